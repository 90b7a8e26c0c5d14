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
from evalkit.verdict.summary import DECIDED, CellRow, CheckRecord, ComparedCell, RunComparison, RunSummary

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


def check_words(check: CheckRecord, specs: list[MetricSpec], reference: str | None = None) -> str:
    """A threshold in a few words: `collapse rate rise vs twin`, `GSM8K flexible min 0.9`;
    `reference` names the one reference of a comparison ("A")."""
    spec = spec_named(check.metric, specs)
    label = spec.display.label if spec is not None else check.metric
    if check.check in ("min", "max"):
        return f"{label} {check.check} {check.margin or 0:g}"
    kind = next((w for start, w in _CHECK_WORDS.items() if check.check.startswith(start)), check.check)
    word = reference or next((w for end, w in _REFERENCE_WORDS.items() if check.check.endswith(end)), "reference")
    return f"{label} {kind} vs {word}"


def _undecided(rows: Sequence[CellRow | ComparedCell], specs: list[MetricSpec]) -> str:
    """Why the undecided cells are: per threshold (at most NAMED_RULES), in words, its cells and
    the first one's reason."""
    by_rule: dict[str, tuple[list[str], str]] = {}
    for row in rows:
        reference = "A" if isinstance(row, ComparedCell) else None
        for check in _failing(checks_of(row), "INCONCLUSIVE"):
            ids, reason = by_rule.setdefault(check_words(check, specs, reference), ([], why(check, specs)))
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
    unjudged = [c for c in summary.cells if c.id in set(summary.unjudged) and c not in broke and c not in undecided]
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
    if unjudged:
        parts.append(_not_judged(unjudged, n))
    held = n - len(broke) - len(not_run) - len(undecided) - len(unjudged)
    if n == 0:
        parts.append("no cell finished")
    elif held == n:
        passed = sum(c.outcome == "PASS" for row in summary.cells for c in checks_of(row))
        parts.append(f"all {n} cells held" + (f" ({passed} checks PASS)" if passed else ""))
    elif held and not broke and not not_run:
        parts.insert(0, f"{held} of {n} cells held")
    if blind := _unjudged_metrics(summary, specs):
        parts.append(blind)
    line = "; ".join(parts)
    if isinstance(summary, RunComparison) and (on := _shared_questions(summary)):
        line = f"{on}: {line}"
    if isinstance(summary, RunSummary) and summary.status == "interrupted":
        line = f"run interrupted: {line}"
    return line


def _not_judged(rows: Sequence[CellRow | ComparedCell], n: int) -> str:
    """`2 of 12 cells not judged: tp8-full-fixoff (only in A), dp8-eager-fixon (ran differently:
    engine argv: --max-num-seqs 256 vs 128)`: the cells never said to hold, each with its reason
    (at most NAMED_IDS named)."""
    said = [f"{row.id} ({_unjudged_reason(row)})" for row in rows[:NAMED_IDS]]
    more = f" and {len(rows) - NAMED_IDS} more" if len(rows) > NAMED_IDS else ""
    return f"{len(rows)} of {n} cells not judged: " + ", ".join(said) + more


def _unjudged_reason(row: CellRow | ComparedCell) -> str:
    if isinstance(row, ComparedCell):
        if row.found_in != "both":
            return f"only in {row.found_in.upper()}"
        if not row.both_ok:
            return f"A {row.status_a}, B {row.status_b}"
        if row.differs:
            return f"ran differently: {row.differs[0]}" + (f" and {len(row.differs) - 1} more" if len(row.differs) > 1 else "")
    reasons = [c.why for c in checks_of(row) if c.outcome == "NOT_CHECKED" and c.why]
    return f"not checked: {reasons[0]}" if reasons else "no failing threshold applies to it"


def _unjudged_metrics(summary: RunSummary | RunComparison, specs: list[MetricSpec]) -> str:
    """The headline metrics (those with a pivot by configuration) that no check decided on any
    finished cell, e.g. a run against one server (no twin, no baseline) whose config gates them
    only relative to another cell."""
    finished = [c for c in summary.cells if (c.status == "ok" if isinstance(c, CellRow) else c.both_ok)]
    if not finished:
        return ""
    decided = {c.metric for row in finished for c in checks_of(row) if c.outcome in DECIDED}
    blind = [spec.display.label for spec in specs if spec.display.pivot and spec.name in _measured(finished, spec.name)
             and spec.name not in decided]
    if not blind:
        return ""
    return f"{' and '.join(blind)} judged on no cell (no threshold reached {'them' if len(blind) > 1 else 'it'})"


def _measured(rows: Sequence[CellRow | ComparedCell], metric: str) -> set[str]:
    """{metric} when some finished row has a value of it (B's, in a comparison), else empty."""
    return {metric} if any((r.metrics if isinstance(r, CellRow) else r.b).get(metric) is not None for r in rows) else set()


def _shared_questions(result: RunComparison) -> str:
    """`on the 200 GSM8K questions both runs scored`, where the two runs scored different question
    sets (an eval without per-question marks counts samples: `and 30 self-consistency samples`)."""
    words = []
    for name, count in result.shared_questions.items():
        ev = next((e for e in result.evals if e.name == name), None)
        title = ev.display.title if ev is not None and ev.display.title else name
        paired = ev is None or any(spec.comparison is Comparison.PAIRED for spec in ev.metrics)
        words.append(f"{count} {title} {'questions' if paired else 'samples'}")
    return f"on the {' and '.join(words)} both runs scored" if words else ""



def report(summary: RunSummary, details: Details) -> str:
    """`--format headline`: only the line."""
    return headline(summary) + "\n"


def comparison(result: RunComparison) -> str:
    """A comparison's line, said to be B judged against A."""
    return "B against A: " + headline(result) + "\n"
