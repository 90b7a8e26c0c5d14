"""The headline: the one line a busy reviewer reads, about cells, in words (issue 38 item 1).

A matrix is judged per threshold and cell, but a reviewer asks "which configuration broke, and
how badly?". So the first line of every format (and the CLI's last line, and the nightly's mail
subject) says how many cells broke and which, with the one or two figures that show it:

    1 of 12 cells broke: dp8-piecewise-fixoff: GSM8K flexible -7.1 points vs twin (p 6.1e-17), collapse rate 21/64 vs 0/64

or that every cell held, or which cells could not be decided and why. The threshold tallies
(`header.verdict_line`) stay as detail below. A cell *broke* when a failing threshold's check on
it FAILs; a warning threshold never breaks a cell. It is *undecided* when nothing broke it but a
failing threshold's check on it is INCONCLUSIVE: the run could not have seen the margin.

Pure data from the typed summary (a run's `RunSummary` or a comparison's `RunComparison`), unescaped:
each renderer escapes it for its target.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.evalset import spec_named
from evalkit.render.checks import checks_of, why
from evalkit.render.numbers import p_text
from evalkit.render.text import no_local_paths
from evalkit.verdict.summary import CellRow, CheckRecord, ComparedCell, RunComparison, RunSummary

if TYPE_CHECKING:
    from evalkit.render.details import Details

NAMED_CELLS = 2
"""Broken cells named with their figures; the rest are listed by id only."""
NAMED_IDS = 4
"""Cells named by id in a list (undecided, not run, broken past NAMED_CELLS); the rest are counted."""
NAMED_RULES = 2
"""Thresholds named, with their reason, for undecided cells; the rest are counted."""
FIGURES = 2
"""Figures per broken cell: the one or two that show it."""
_REFERENCE_WORDS = {"vs_baseline": "baseline", "ab": "twin"}
_CHECK_WORDS = {"max_drop": "drop", "max_rise": "rise", "equivalent": "equivalence"}


def _failing(checks: Sequence[CheckRecord], outcome: str) -> list[CheckRecord]:
    """The checks of failing thresholds (action "fail": a warning never breaks a cell) with `outcome`."""
    return [c for c in checks if c.outcome == outcome and (c.action or "fail") == "fail"]


def _ids(ids: Sequence[str]) -> str:
    more = f" and {len(ids) - NAMED_IDS} more" if len(ids) > NAMED_IDS else ""
    return ", ".join(ids[:NAMED_IDS]) + more


def _counts(spec: MetricSpec, cell: CellRow, reference: CellRow | None) -> str | None:
    """`21/64 vs 0/64`: a count's events in the cell and its reference, when both are known."""
    def kn(row: CellRow | None) -> str | None:
        if row is None or spec.count_metric is None or spec.n_metric is None:
            return None
        k, n = row.metrics.get(spec.count_metric), row.metrics.get(spec.n_metric)
        return None if k is None or n is None else f"{k}/{n}"
    mine, theirs = kn(cell), kn(reference)
    return f"{mine} vs {theirs}" if mine and theirs else None


def figure(check: CheckRecord, row: CellRow | ComparedCell, cells: dict[str, CellRow], specs: list[MetricSpec]) -> str:
    """One broken check as a figure a reviewer reads: `GSM8K flexible -7.1 points vs twin (p 6.1e-17)`,
    `collapse rate 21/64 vs 0/64 (p 6.7e-08)`, `GSM8K flexible 0.870 < min 0.9`; a compared cell
    (a `ComparedCell`: B against A) is `vs A`."""
    spec = spec_named(check.metric, specs)
    label = spec.display.label if spec is not None else check.metric
    if check.check in ("min", "max"):
        sign = "<" if check.check == "min" else ">"
        value = "-" if check.value is None else f"{check.value:.3f}"
        return f"{label} {value} {sign} {check.check} {check.margin or 0:g}"
    word = next((w for end, w in _REFERENCE_WORDS.items() if check.check.endswith(end)), "reference")
    word = word if isinstance(row, CellRow) else "A"
    p = f" (p {p_text(check.p)})" if check.p is not None else ""
    if spec is not None and spec.comparison is Comparison.COUNT and isinstance(row, CellRow):
        if counts := _counts(spec, row, cells.get(check.reference or "")):
            return f"{label} {counts}{p}"
    if check.diff is None:
        return f"{label} vs {word}{p}"
    share = spec is not None and spec.comparison in (Comparison.PAIRED, Comparison.COUNT)
    diff = f"{check.diff * 100:+.1f} points" if share else f"{check.diff:+.3g}"
    return f"{label} {diff} vs {word}{p}"


def _figures(row: CellRow | ComparedCell, cells: dict[str, CellRow], specs: list[MetricSpec]) -> str:
    """The cell's broken checks as figures, at most FIGURES, one per metric in the run's metric
    order (the config's evals: GSM8K before the collapse rate before the rest); of a metric's
    checks the most significant, a change against a reference before a bare limit (it says more)."""
    order = {spec.name: i for i, spec in enumerate(specs)}
    broken = sorted(_failing(checks_of(row), "FAIL"), key=lambda c: (
        order.get(c.metric, len(order)), c.p is None, c.p or 0.0, c.check in ("min", "max")))
    shown: dict[str, str] = {}
    for check in broken:
        if check.metric not in shown and len(shown) < FIGURES:
            shown[check.metric] = figure(check, row, cells, specs)
    return ", ".join(shown.values())


def check_words(check: CheckRecord, specs: list[MetricSpec]) -> str:
    """A threshold in a few words: `collapse rate rise vs twin`, `GSM8K flexible min 0.9`."""
    spec = spec_named(check.metric, specs)
    label = spec.display.label if spec is not None else check.metric
    if check.check in ("min", "max"):
        return f"{label} {check.check} {check.margin or 0:g}"
    kind = next((w for start, w in _CHECK_WORDS.items() if check.check.startswith(start)), check.check)
    word = next((w for end, w in _REFERENCE_WORDS.items() if check.check.endswith(end)), "reference")
    return f"{label} {kind} vs {word}"


def _undecided(rows: Sequence[CellRow | ComparedCell], specs: list[MetricSpec]) -> str:
    """Why the undecided cells are: per threshold (at most NAMED_RULES), in words, its cells and
    the first one's reason."""
    by_rule: dict[str, tuple[list[str], str]] = {}
    for row in rows:
        for check in _failing(checks_of(row), "INCONCLUSIVE"):
            ids, reason = by_rule.setdefault(check_words(check, specs), ([], why(check, specs)))
            if row.id not in ids:
                ids.append(row.id)
    named = [f"{words} on {_ids(ids)} ({reason})" for words, (ids, reason) in list(by_rule.items())[:NAMED_RULES]]
    more = len(by_rule) - NAMED_RULES
    return "; ".join(named) + (f"; and {more} more threshold{'s' if more > 1 else ''}" if more > 0 else "")


def headline(summary: RunSummary | RunComparison) -> str:
    """The run's (or a comparison's) verdict about cells, in one line (see the module docstring)."""
    specs = summary.specs()
    n = len(summary.cells)
    cells = {c.id: c for c in summary.cells if isinstance(c, CellRow)}
    not_run = [c for c in summary.cells if isinstance(c, CellRow) and c.status != "ok"]
    broke = [c for c in summary.cells if _failing(checks_of(c), "FAIL")]
    undecided = [c for c in summary.cells if c not in broke and _failing(checks_of(c), "INCONCLUSIVE")]
    parts: list[str] = []
    if broke:
        named = [f"{c.id}: {_figures(c, cells, specs)}" for c in broke[:NAMED_CELLS]]
        rest = [c.id for c in broke[NAMED_CELLS:]]
        parts.append(f"{len(broke)} of {n} cells broke: " + "; ".join(named)
                     + (f"; also {_ids(rest)}" if rest else ""))
    if not_run:
        first = not_run[0]
        reason = f" ({first.status}: {no_local_paths(first.error)})" if first.error else f" ({first.status})"
        parts.append(f"{len(not_run)} of {n} cells did not run: {_ids([c.id for c in not_run])}"
                     + (reason if len(not_run) == 1 else ""))
    if undecided and parts:  # the checks say why: the headline is about what broke
        parts.append(f"{len(undecided)} other cell{'s' if len(undecided) > 1 else ''} undecided")
    elif undecided:
        parts.append(f"{len(undecided)} of {n} cells could not be decided: {_undecided(undecided, specs)}")
    if not parts and n == 0:
        parts.append("no cell finished")
    elif not parts:
        passed = sum(c.outcome == "PASS" for row in summary.cells for c in checks_of(row))
        parts.append(f"all {n} cells held" + (f" ({passed} checks PASS)" if passed else ""))
    elif not broke and not not_run:
        parts.insert(0, f"{n - len(undecided)} of {n} cells held")
    line = "; ".join(parts)
    if isinstance(summary, RunSummary) and summary.status == "interrupted":
        line = f"run interrupted: {line}"
    return line



def report(summary: RunSummary, details: Details) -> str:
    """`--format headline`: only the line."""
    return headline(summary) + "\n"


def comparison(result: RunComparison) -> str:
    """A comparison's line, said to be B judged against A."""
    return "B against A: " + headline(result) + "\n"
