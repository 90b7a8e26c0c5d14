"""Every check's outcome as the reports word it: PASS, FAIL or INCONCLUSIVE (pure data).

Each renderer shows the same texts (verdict/checks.py decides; summary.json's `checks` per cell holds
them): one line per threshold saying how its cells came out and why the inconclusive ones are,
and a table of cells x thresholds with the outcome, the family-adjusted p and the MDE. A summary
written before checks existed has none, and shows none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from evalkit.evals import registry
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.render.numbers import p_text
from evalkit.stats.multiplicity import METHOD_WORDS
from evalkit.verdict.summary import CellRow, CheckRecord, JudgedCell, RunSummary, Verdict

OUTCOME_ORDER = ("FAIL", "INCONCLUSIVE", "NOT_CHECKED", "PASS")
"""How a line of outcomes lists them: what needs a reader first."""
MAX_NAMED = 4
"""Inconclusive cells named in a threshold's line; the rest are counted."""


def stored(checks: Iterable[Mapping[str, Any]] | None) -> list[CheckRecord]:
    """Check records kept outside a summary (the history's cells, bisect.json's ends) as models,
    read like a summary's."""
    return [CheckRecord.model_validate(c) for c in checks or []]


def checks_of(row: CellRow | JudgedCell) -> list[CheckRecord]:
    """A summary row's check records. A summary written before per-check outcomes has only its
    broken-threshold flags: each becomes the record it stood for (FAIL, or NOT_CHECKED), which is
    all that file knew; the thresholds that held left no trace there. Such a record's `threshold`
    is its flag's place and its `rule` the flag's metric, check and limit: the config's index and
    words were not recorded."""
    if row.checks is not None:
        return list(row.checks)
    return [CheckRecord.model_validate({
        "threshold": i, "rule": f"{f.metric} {f.check} {f.limit}", "metric": f.metric, "check": f.check,
        "margin": f.limit, "action": f.action, "reference": f.reference,
        "outcome": "NOT_CHECKED" if f.not_checked else "FAIL", "why": f.not_checked, "message": f.message})
        for i, f in enumerate(row.flags)]


def _scaled(metric: str, x: float | None, specs: list[MetricSpec]) -> str:
    """A margin, MDE or difference in the metric's units: points for shares, else as is."""
    if x is None:
        return "-"
    spec = registry.metric(metric, specs)
    share = spec is not None and spec.comparison in (Comparison.PAIRED, Comparison.COUNT)
    return f"{x * 100:.1f} points" if share else f"{x:.3g}"


def rules(summary: RunSummary | Verdict) -> list[tuple[int, str]]:
    """(threshold index, rule text) of every threshold some cell was checked on, in config order."""
    found = {c.threshold: c.rule for cell in summary.cells for c in cell.checks or []}
    return sorted(found.items())


def why(check: CheckRecord, specs: list[MetricSpec]) -> str:
    """Why a check is INCONCLUSIVE, in a few words."""
    metric, margin, mde = check.metric, check.margin, check.mde
    if check.check in ("min", "max"):
        low, high = check.ci or (None, None)
        return f"{check.ci_level:.0%} interval {low:.3f}-{high:.3f} reaches past {margin or 0:g}" \
            if low is not None else "too few samples"
    if check.check.startswith("equivalent"):
        words = f"not shown inside ±{_scaled(metric, margin, specs)}"
    elif mde is None:
        words = "no drop could be detected at this n" if check.p is not None else "no test"
    elif mde > (margin or 0) * (factor := check.factor or 0):
        words = f"MDE {_scaled(metric, mde, specs)} > {factor:g} x margin {_scaled(metric, margin, specs)}"
    else:
        words = f"change {_scaled(metric, abs(check.diff or 0), specs)} beyond the margin but not significant"
    if check.n_needed:
        words += f"; needs n ≈ {check.n_needed}"
    return words


def outcome_text(check: CheckRecord | None, specs: list[MetricSpec]) -> str:
    """`PASS · p_adj 1 · MDE 1.8 points`: one check in a table cell; `-` when not checked on the cell."""
    if check is None:
        return "-"
    parts = [check.outcome]
    if check.p_adj is not None:
        parts.append(f"p_adj {p_text(check.p_adj)}")
    if check.p_equivalent_adj is not None:
        parts.append(f"p_eq {p_text(check.p_equivalent_adj)}")
    if check.mde is not None:
        parts.append(f"MDE {_scaled(check.metric, check.mde, specs)}")
    return " · ".join(parts)


def check_sentence(check: CheckRecord, specs: list[MetricSpec]) -> str:
    """One check in words, for a report about one comparison (a bisect's ends): `FAIL
    gsm8k.flexible max_drop_vs_baseline 0.02 alpha 0.01: -7.0 points, p 3e-09, MDE 2.1 points`;
    an INCONCLUSIVE one says why (`why`), a NOT_CHECKED one what kept it from being checked."""
    outcome, metric = check.outcome, check.metric
    if outcome == "NOT_CHECKED":
        return f"NOT_CHECKED {check.rule}: {check.why or 'no value'}"
    parts = []
    if (diff := check.diff) is not None:
        parts.append(f"{diff * 100:+.1f} points" if "points" in _scaled(metric, diff, specs) else f"{diff:+.3g}")
    elif check.value is not None:
        parts.append(f"{check.value:.3f}")
    p = check.p_adj if check.p_adj is not None else check.p
    if p is not None:
        parts.append(f"p {p_text(p)}")
    if outcome == "INCONCLUSIVE":
        parts.append(why(check, specs))
    elif check.mde is not None:
        parts.append(f"MDE {_scaled(metric, check.mde, specs)}")
    return f"{outcome} {check.rule}" + (f": {', '.join(parts)}" if parts else "")


def numbered_rules(checks: Iterable[Iterable[CheckRecord]]) -> dict[str, int]:
    """Rule text -> its number, 1 up, in order of first appearance over several runs' checks (a
    history spans configs whose thresholds may differ: the rule, not its index, names one)."""
    return {rule: i + 1 for i, rule in enumerate(dict.fromkeys(c.rule for found in checks for c in found))}


def outcomes_text(checks: list[CheckRecord], numbers: Mapping[str, int], specs: list[MetricSpec]) -> str:
    """One cell's checks in a line, worst first: `FAIL #2 #3 · INCONCLUSIVE #4 (MDE 13.9 points) ·
    PASS #1` (rule numbers from `numbered_rules`; an INCONCLUSIVE one with its MDE)."""
    parts = []
    for outcome in OUTCOME_ORDER:
        found = [c for c in checks if c.outcome == outcome]
        if not found:
            continue
        parts.append(f"{outcome} " + " ".join(with_mde(c, "#" + str(numbers[c.rule]), specs) for c in found))
    return " · ".join(parts) or "-"


def with_mde(check: CheckRecord, name: str, specs: list[MetricSpec]) -> str:
    """`name`, and for an INCONCLUSIVE check its MDE: `#4 (MDE 13.9 points)`."""
    if check.outcome != "INCONCLUSIVE" or check.mde is None:
        return name
    return f"{name} (MDE {_scaled(check.metric, check.mde, specs)})"


def check_table(summary: RunSummary | Verdict) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """(headers, rows, marks): a row per cell with checks, a column per threshold; marks "fail",
    "warn" (INCONCLUSIVE) or ""."""
    listed, specs = rules(summary), summary.specs()
    headers = ["cell", *(f"#{i + 1} {rule}" for i, rule in listed)]
    rows, marks = [], []
    for cell in summary.cells:
        by = {c.threshold: c for c in cell.checks or []}
        if not by:
            continue
        found = [by.get(i) for i, _ in listed]
        rows.append([cell.id, *(outcome_text(c, specs) for c in found)])
        marks.append(["", *("fail" if c and c.outcome == "FAIL" else "warn" if c and c.outcome == "INCONCLUSIVE"
                            else "" for c in found)])
    return headers, rows, marks


def check_lines(summary: RunSummary | Verdict) -> list[str]:
    """Per threshold: `#2 gsm8k.flexible max_drop_vs_baseline 0.02 alpha 0.01 (Holm over 11 cells):
    9 PASS, 2 INCONCLUSIVE (tp8-eager: MDE 2.6 points > 2 x margin 2.0 points), 0 FAIL`."""
    out, specs = [], summary.specs()
    for index, rule in rules(summary):
        found = [(cell.id, c) for cell in summary.cells for c in cell.checks or [] if c.threshold == index]
        tested = next((c for _, c in found if c.family), None)
        family = (f" ({METHOD_WORDS.get(tested.multiplicity, tested.multiplicity)} over {tested.family} cells)"
                  if tested and tested.family > 1 else "")
        counts = {o: sum(c.outcome == o for _, c in found) for o in ("PASS", "INCONCLUSIVE", "FAIL", "NOT_CHECKED")}
        unsure = [(cid, c) for cid, c in found if c.outcome == "INCONCLUSIVE"]
        named = "; ".join(f"{cid}: {why(c, specs)}" for cid, c in unsure[:MAX_NAMED])
        more = f"; and {len(unsure) - MAX_NAMED} more" if len(unsure) > MAX_NAMED else ""
        words = [f"{counts['PASS']} PASS", f"{counts['INCONCLUSIVE']} INCONCLUSIVE" + (f" ({named}{more})" if named else ""),
                 f"{counts['FAIL']} FAIL"]
        if counts["NOT_CHECKED"]:
            words.append(f"{counts['NOT_CHECKED']} not checked")
        out.append(f"#{index + 1} {rule}{family}: " + ", ".join(words))
    return out
