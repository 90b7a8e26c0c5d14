"""Every check's outcome as the reports word it: PASS, FAIL or INCONCLUSIVE (pure data).

Each renderer shows the same texts (checks.py decides; summary.json's `checks` per cell holds
them): one line per threshold saying how its cells came out and why the inconclusive ones are,
and a table of cells x thresholds with the outcome, the family-adjusted p and the MDE. A summary
written before checks existed has none, and shows none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from evalkit.evals import registry
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.recorded import specs_of
from evalkit.multiplicity import METHOD_WORDS
from evalkit.render.numbers import p_text

OUTCOME_ORDER = ("FAIL", "INCONCLUSIVE", "NOT_CHECKED", "PASS")
"""How a line of outcomes lists them: what needs a reader first."""
MAX_NAMED = 4
"""Inconclusive cells named in a threshold's line; the rest are counted."""


def checks_of(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A summary row's check records. A summary written before per-check outcomes has only its
    broken-threshold flags: each becomes the record it stood for (FAIL, or NOT_CHECKED), which is
    all that file knew; the thresholds that held left no trace there."""
    if "checks" in row:
        return list(row["checks"])
    return [{"metric": f.get("metric"), "check": f.get("check"), "margin": f.get("limit"), "action": f.get("action"),
             "reference": f.get("reference"), "outcome": "NOT_CHECKED" if f.get("not_checked") else "FAIL",
             "why": f.get("not_checked"), "message": f["message"]} for f in row.get("flags", [])]


def _scaled(metric: str, x: float | None, specs: list[MetricSpec]) -> str:
    """A margin, MDE or difference in the metric's units: points for shares, else as is."""
    if x is None:
        return "-"
    spec = registry.metric(metric, specs)
    share = spec is not None and spec.comparison in (Comparison.PAIRED, Comparison.COUNT)
    return f"{x * 100:.1f} points" if share else f"{x:.3g}"


def rules(summary: dict[str, Any]) -> list[tuple[int, str]]:
    """(threshold index, rule text) of every threshold some cell was checked on, in config order."""
    found = {c["threshold"]: c["rule"] for cell in summary["cells"] for c in cell.get("checks") or []}
    return sorted(found.items())


def why(check: dict[str, Any], specs: list[MetricSpec]) -> str:
    """Why a check is INCONCLUSIVE, in a few words."""
    metric = check["metric"]
    if check["check"] in ("min", "max"):
        low, high = check.get("ci") or (None, None)
        return f"{check.get('ci_level', 0.9):.0%} interval {low:.3f}-{high:.3f} reaches past {check['margin']:g}" \
            if low is not None else "too few samples"
    if check["check"].startswith("equivalent"):
        words = f"not shown inside ±{_scaled(metric, check['margin'], specs)}"
    elif check["mde"] is None:
        words = "no drop could be detected at this n" if check.get("p") is not None else "no test"
    elif check["mde"] > check["margin"] * check["factor"]:
        words = f"MDE {_scaled(metric, check['mde'], specs)} > {check['factor']:g} x margin {_scaled(metric, check['margin'], specs)}"
    else:
        words = f"change {_scaled(metric, abs(check['diff'] or 0), specs)} beyond the margin but not significant"
    if check.get("n_needed"):
        words += f"; needs n ≈ {check['n_needed']}"
    return words


def outcome_text(check: dict[str, Any] | None, specs: list[MetricSpec]) -> str:
    """`PASS · p_adj 1 · MDE 1.8 points`: one check in a table cell; `-` when not checked on the cell."""
    if check is None:
        return "-"
    parts = [check["outcome"]]
    if check.get("p_adj") is not None:
        parts.append(f"p_adj {p_text(check['p_adj'])}")
    if check.get("p_equivalent_adj") is not None:
        parts.append(f"p_eq {p_text(check['p_equivalent_adj'])}")
    if check.get("mde") is not None:
        parts.append(f"MDE {_scaled(check['metric'], check['mde'], specs)}")
    return " · ".join(parts)


def check_sentence(check: dict[str, Any], specs: list[MetricSpec]) -> str:
    """One check in words, for a report about one comparison (a bisect's ends): `FAIL
    gsm8k.flexible max_drop_vs_baseline 0.02 alpha 0.01: -7.0 points, p 3e-09, MDE 2.1 points`;
    an INCONCLUSIVE one says why (`why`), a NOT_CHECKED one what kept it from being checked."""
    outcome, metric = check["outcome"], check["metric"]
    if outcome == "NOT_CHECKED":
        return f"NOT_CHECKED {check['rule']}: {check.get('why') or 'no value'}"
    parts = []
    if check.get("diff") is not None:
        diff = check["diff"]
        parts.append(f"{diff * 100:+.1f} points" if "points" in _scaled(metric, diff, specs) else f"{diff:+.3g}")
    elif check.get("value") is not None:
        parts.append(f"{check['value']:.3f}")
    p = check["p_adj"] if check.get("p_adj") is not None else check.get("p")
    if p is not None:
        parts.append(f"p {p_text(p)}")
    if outcome == "INCONCLUSIVE":
        parts.append(why(check, specs))
    elif check.get("mde") is not None:
        parts.append(f"MDE {_scaled(metric, check['mde'], specs)}")
    return f"{outcome} {check['rule']}" + (f": {', '.join(parts)}" if parts else "")


def numbered_rules(checks: Iterable[Iterable[dict[str, Any]]]) -> dict[str, int]:
    """Rule text -> its number, 1 up, in order of first appearance over several runs' checks (a
    history spans configs whose thresholds may differ: the rule, not its index, names one)."""
    return {rule: i + 1 for i, rule in enumerate(dict.fromkeys(c["rule"] for found in checks for c in found))}


def outcomes_text(checks: list[dict[str, Any]], numbers: Mapping[str, int], specs: list[MetricSpec]) -> str:
    """One cell's checks in a line, worst first: `FAIL #2 #3 · INCONCLUSIVE #4 (MDE 13.9 points) ·
    PASS #1` (rule numbers from `numbered_rules`; an INCONCLUSIVE one with its MDE)."""
    parts = []
    for outcome in OUTCOME_ORDER:
        found = [c for c in checks if c["outcome"] == outcome]
        if not found:
            continue
        parts.append(f"{outcome} " + " ".join(with_mde(c, "#" + str(numbers[c["rule"]]), specs) for c in found))
    return " · ".join(parts) or "-"


def with_mde(check: dict[str, Any], name: str, specs: list[MetricSpec]) -> str:
    """`name`, and for an INCONCLUSIVE check its MDE: `#4 (MDE 13.9 points)`."""
    if check["outcome"] != "INCONCLUSIVE" or check.get("mde") is None:
        return name
    return f"{name} (MDE {_scaled(check['metric'], check['mde'], specs)})"


def check_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """(headers, rows, marks): a row per cell with checks, a column per threshold; marks "fail",
    "warn" (INCONCLUSIVE) or ""."""
    listed, specs = rules(summary), specs_of(summary)
    headers = ["cell", *(f"#{i + 1} {rule}" for i, rule in listed)]
    rows, marks = [], []
    for cell in summary["cells"]:
        by = {c["threshold"]: c for c in cell.get("checks") or []}
        if not by:
            continue
        found = [by.get(i) for i, _ in listed]
        rows.append([cell["id"], *(outcome_text(c, specs) for c in found)])
        marks.append(["", *("fail" if c and c["outcome"] == "FAIL" else "warn" if c and c["outcome"] == "INCONCLUSIVE"
                            else "" for c in found)])
    return headers, rows, marks


def check_lines(summary: dict[str, Any]) -> list[str]:
    """Per threshold: `#2 gsm8k.flexible max_drop_vs_baseline 0.02 alpha 0.01 (Holm over 11 cells):
    9 PASS, 2 INCONCLUSIVE (tp8-eager: MDE 2.6 points > 2 x margin 2.0 points), 0 FAIL`."""
    out, specs = [], specs_of(summary)
    for index, rule in rules(summary):
        found = [(cell["id"], c) for cell in summary["cells"] for c in cell.get("checks") or [] if c["threshold"] == index]
        tested = next((c for _, c in found if c.get("family")), None)
        family = (f" ({METHOD_WORDS.get(tested['multiplicity'], tested['multiplicity'])} over {tested['family']} cells)"
                  if tested and tested["family"] > 1 else "")
        counts = {o: sum(c["outcome"] == o for _, c in found) for o in ("PASS", "INCONCLUSIVE", "FAIL", "NOT_CHECKED")}
        unsure = [(cid, c) for cid, c in found if c["outcome"] == "INCONCLUSIVE"]
        named = "; ".join(f"{cid}: {why(c, specs)}" for cid, c in unsure[:MAX_NAMED])
        more = f"; and {len(unsure) - MAX_NAMED} more" if len(unsure) > MAX_NAMED else ""
        words = [f"{counts['PASS']} PASS", f"{counts['INCONCLUSIVE']} INCONCLUSIVE" + (f" ({named}{more})" if named else ""),
                 f"{counts['FAIL']} FAIL"]
        if counts["NOT_CHECKED"]:
            words.append(f"{counts['NOT_CHECKED']} not checked")
        out.append(f"#{index + 1} {rule}{family}: " + ", ".join(words))
    return out
