"""Every check's outcome as the reports word it: PASS, FAIL or INCONCLUSIVE (pure data).

Each renderer shows the same texts (verdict/checks.py decides; summary.json's `checks` per cell holds
them): one line per threshold saying how its cells came out and why the inconclusive ones are,
and a table of cells x thresholds with the outcome, the family-adjusted p and the MDE. A summary
written before checks existed has none, and shows none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.evalset import EvalSet, spec_named
from evalkit.render.numbers import p_text
from evalkit.stats.multiplicity import METHOD_WORDS
from evalkit.verdict.plan import data_size
from evalkit.verdict.summary import CellRow, CheckRecord, ComparedCell, RunComparison, RunSummary

OUTCOME_ORDER = ("FAIL", "INCONCLUSIVE", "NOT_CHECKED", "PASS")
"""How a line of outcomes lists them: what needs a reader first."""
MAX_NAMED = 4
"""Inconclusive cells named in a threshold's line; the rest are counted."""


def stored(checks: Iterable[Mapping[str, Any]] | None) -> list[CheckRecord]:
    """Check records kept outside a summary (the history's cells, bisect.json's ends) as models,
    read like a summary's."""
    return [CheckRecord.model_validate(c) for c in checks or []]


def checks_of(row: CellRow | ComparedCell) -> list[CheckRecord]:
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
    spec = spec_named(metric, specs)
    share = spec is not None and spec.comparison in (Comparison.PAIRED, Comparison.COUNT)
    return f"{x * 100:.1f} points" if share else f"{x:.3g}"


def rules(summary: RunSummary | RunComparison) -> list[tuple[int, str]]:
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
    elif check.detects is not None and mde > check.detects:
        words = f"MDE {_scaled(metric, mde, specs)} > the {_scaled(metric, check.detects, specs)} it exists to catch"
    elif check.detects is None and mde > (margin or 0) * (factor := check.factor or 0):
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


def check_table(summary: RunSummary | RunComparison) -> tuple[list[str], list[list[str]], list[list[str]]]:
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


def check_lines(summary: RunSummary | RunComparison) -> list[str]:
    """Per threshold: `#4 repetition.collapse_rate max_rise_vs_baseline 0.05 alpha 0.01 (Holm over 11
    cells): 0 PASS, 11 INCONCLUSIVE, 0 FAIL`, and when some are INCONCLUSIVE, once, in words a
    reader acts on (`advice`): what the run could see, what the margin asks, the key that changes it."""
    out, specs = [], summary.specs()
    for index, rule in rules(summary):
        found = [(cell.id, c) for cell in summary.cells for c in cell.checks or [] if c.threshold == index]
        tested = next((c for _, c in found if c.family), None)
        family = (f" ({METHOD_WORDS.get(tested.multiplicity, tested.multiplicity)} over {tested.family} cells)"
                  if tested and tested.family > 1 else "")
        counts = {o: sum(c.outcome == o for _, c in found) for o in ("PASS", "INCONCLUSIVE", "FAIL", "NOT_CHECKED")}
        words = [f"{counts['PASS']} PASS", f"{counts['INCONCLUSIVE']} INCONCLUSIVE", f"{counts['FAIL']} FAIL"]
        if counts["NOT_CHECKED"]:
            words.append(f"{counts['NOT_CHECKED']} not checked")
        unsure = [(cid, c) for cid, c in found if c.outcome == "INCONCLUSIVE"]
        said = f". {advice(unsure, specs, summary.evals)}" if unsure else ""
        out.append(f"#{index + 1} {rule}{family}: " + ", ".join(words) + said)
    return out


def advice(unsure: list[tuple[str, CheckRecord]], specs: list[MetricSpec], evals: EvalSet) -> str:
    """One threshold's INCONCLUSIVE checks in plain words, said once for all its cells: what the
    run could see (the n and the MDE, or the interval), what the margin asks, and the config key
    that changes it. A nightly that says "inconclusive" without this teaches its readers to ignore
    it (issue 38); one that says "64 generations see 13.9 points, 5 needs 180: set
    evals.repetition.count" gets fixed."""
    checks = [c for _, c in unsure]
    first = checks[0]
    key = n_key(first.metric, evals)
    more = f"more {_unit(first.metric, specs)} ({key} or --limit)" if key else f"more {_unit(first.metric, specs)}"
    if first.check in ("min", "max"):
        lows = [c.ci[0] if first.check == "min" else c.ci[1] for c in checks if c.ci]
        edge = (min(lows) if first.check == "min" else max(lows)) if lows else None
        return (f"{_cells(unsure)} within sampling reach of {first.margin or 0:g}: {_ns(checks)} {_unit(first.metric, specs)} "
                f"put its {first.ci_level:.0%} interval across it" + (f" (to {edge:.3f})" if edge is not None else "")
                + f"; {more} or a limit further from the expected value decide it")
    if first.check.startswith("equivalent"):
        return (f"{_cells(unsure)}: {_ns(checks)} {_unit(first.metric, specs)} do not show ±{_scaled(first.metric, first.margin, specs)}"
                + _asks(checks, first, key, evals, specs) + "; or widen the margin")
    unseen_pairs = [(cid, c) for cid, c in unsure if not _moved_past(c)]
    unseen = [c for _, c in unseen_pairs]
    parts = []
    if unseen:
        worst = max(unseen, key=lambda c: float("inf") if c.mde is None else c.mde)
        way = "drop" if first.check.startswith("max_drop") else "rise"
        bar = (f"the {_scaled(first.metric, first.detects, specs)} it exists to catch" if first.detects is not None
               else f"{first.factor or 0:g} x its margin of {_scaled(first.metric, first.margin, specs)}")
        sees = (f"could not show a {way} of any size at alpha {first.alpha:g}" if worst.mde is None else
                f"see a {way} of {_scaled(first.metric, worst.mde, specs)} or more ({_power(first)}), more than {bar}")
        parts.append(f"{_cells(unseen_pairs)}: {_ns(unseen)} {_unit(first.metric, specs)} per cell {sees}"
                     + _asks(unseen, first, key, evals, specs) + _wider(worst, first))
    if moved := [(cid, c) for cid, c in unsure if _moved_past(c)]:
        parts.append(f"{_cells(moved)} moved past the margin without significance: a rerun or {more} decide it")
    return "; ".join(parts)


def n_key(metric: str, evals: EvalSet) -> str | None:
    """The config key that sets how many questions or samples a metric's eval scores per cell
    (`evals.repetition.count`, `evals.gsm8k.limit`); None when its settings have none (or the run's
    `evals` lack its code)."""
    ev = evals.eval_of(metric)
    if ev is None:
        return None
    fields = ev.settings_model.model_fields
    name = next((f for f in ("count", "limit") if f in fields), None)
    return f"evals.{ev.name}.{name}" if name else None


def _moved_past(check: CheckRecord) -> bool:
    """INCONCLUSIVE though its test could see the margin: the change went past it, not significantly."""
    bar = check.detects if check.detects is not None else (check.margin or 0) * (check.factor or 0)
    return check.mde is not None and check.mde <= bar


def _asks(checks: list[CheckRecord], first: CheckRecord, key: str | None, evals: EvalSet, specs: list[MetricSpec]) -> str:
    """`; the 5.0-point margin asks for n ≈ 180 per cell: set evals.repetition.count` (or: more than the data holds)."""
    needed = max((c.n_needed for c in checks if c.n_needed), default=None)
    if needed is None:
        return ""
    target = "the change it exists to catch" if first.detects is not None else "the margin"
    ev = evals.eval_of(first.metric)
    size = data_size(ev) if ev is not None else None
    if ev is not None and size is not None and needed > size:
        scored = max(c.n or 0 for c in checks)
        return (f"; {target} asks for n ≈ {needed}, more than the {size} {_unit(first.metric, specs)} {ev.name} holds"
                + (f" (this run scored {scored}; without --limit and with {key} unset, a run scores all {size})"
                   if scored < size and key else ""))
    return f"; {target} asks for n ≈ {needed} per cell" + (f": set {key} to {needed} (and no --limit below it)" if key else "")


def _wider(worst: CheckRecord, first: CheckRecord) -> str:
    """`, or widen max_rise_vs_baseline to 0.07`: the margin this run's MDE would PASS at."""
    if worst.mde is None or first.detects is not None:
        return ""
    wider = math.ceil(worst.mde / (first.factor or 1) * 200) / 200  # a half-point step, at or above
    return f", or widen the margin to {wider:g}"


def _ns(checks: list[CheckRecord]) -> str:
    """`64`, or `49-50` when the cells' n differ."""
    ns = sorted({c.n for c in checks if c.n})
    return "?" if not ns else str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"


def _unit(metric: str, specs: list[MetricSpec]) -> str:
    """What an eval's n counts: questions for paired marks, samples for counts."""
    spec = spec_named(metric, specs)
    return "questions" if spec is not None and spec.comparison is Comparison.PAIRED else "samples"


def _power(check: CheckRecord) -> str:
    return f"power {check.power or 0.8:.0%} at alpha {check.alpha:g}" if check.alpha is not None else "the noise floor"


def _cells(unsure: list[tuple[str, CheckRecord]]) -> str:
    """`tp8-eager-fixon`, or `5 cells (tp8-full-fixon, ...)`: who, briefly."""
    ids = [cid for cid, _ in unsure]
    if len(ids) == 1:
        return ids[0]
    named = ", ".join(ids[:MAX_NAMED]) + (f" and {len(ids) - MAX_NAMED} more" if len(ids) > MAX_NAMED else "")
    return f"{len(ids)} cells ({named})"
