"""When a cell stops its long generations early: their collapses already FAIL every collapse check.

A broken cell's long generations are the slowest part of it (a collapsed generation runs to
`max_tokens` on an engine), and its verdict is often certain long before the last one ends. The
generations are submitted in a seeded order and judged in that order (evals/repetition.py: the
judged prefix, never the completion order, since collapsed generations finish last); after each
one this rule looks at the prefix and stops the rest when BOTH hold:

1. an anytime-valid test rejects "this cell is healthy": `sequential.log_e_above`, the mixture
   likelihood ratio bisect's steps use (a test martingale; Ville's inequality), reaches
   1/`run.stop_alpha` against the highest collapse rate any of the cell's collapse checks lets
   pass (a `max` limit; a reference's rate, at its one-sided `stop_alpha` upper bound, plus a
   rise's margin). A cell at or below that rate is stopped with chance at most `stop_alpha`
   (plus `stop_alpha` for the reference's bound), however many looks;
2. every threshold of the config on the metric that applies to the cell already FAILs on what
   was judged, with its p-value multiplied by the matrix's cell count (the most Holm or BH can
   raise it) and, for a rise, its margin beyond on the prompts both cells generated: the
   verdict of the stopped cell is FAIL on the same rules, from what it judged.

Anything the rule cannot certify leaves the cell to run in full: a threshold of another kind on
the metric (`min`, `gate: point`, an equivalence, a rise with no alpha), a reference cell not finished yet in
this run (cells side by side), a metric no threshold judges. Healthy cells always run in full,
and only the long generations stop: the other evals of the cell keep their full-size verdicts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell, ab_twin, baseline_cell, expand
from evalkit.config.thresholds import Threshold
from evalkit.evals.base import Comparison, Eval, EvalSettings, MetricSpec, StopWhen
from evalkit.stats.bounds import bound_test, clopper_pearson
from evalkit.stats.sequential import log_e_above
from evalkit.stats.tests import fisher_collapse
from evalkit.store import read_jsonl
from evalkit.store.files import RunStore

OWN_ALPHA = 0.05
"""A `max` check's level when its threshold sets none (verdict/checks.py's OWN_ALPHA)."""


@dataclass(frozen=True)
class Limit:
    """A `max` on the rate (`gate: noise`): FAILs when k of n is shown above `value` at `alpha`."""

    value: float
    alpha: float

    def null(self, stop_alpha: float) -> float:
        return self.value

    def fails(self, k: int, n: int, cells: int, rows: Sequence[Mapping[str, Any]], event: str) -> bool:
        return bound_test(k, n, self.value).p_above * cells < self.alpha


@dataclass(frozen=True)
class Rise:
    """A `max_rise_*` against a reference cell's samples (`events`: its event per sample id): FAILs
    when the rise on the samples both generated is beyond `margin` and Fisher's one-sided p is
    below `alpha`."""

    margin: float
    alpha: float
    events: Mapping[str, bool]

    def null(self, stop_alpha: float) -> float:
        k, n = sum(self.events.values()), len(self.events)
        return min(1.0, _upper(k, n, stop_alpha) + self.margin) if n else 1.0

    def fails(self, k: int, n: int, cells: int, rows: Sequence[Mapping[str, Any]], event: str) -> bool:
        shared = [row for row in rows if row["id"] in self.events]
        if not shared:
            return False
        k_here = sum(bool(row[event]) for row in shared)
        k_ref = sum(self.events[row["id"]] for row in shared)
        found = fisher_collapse(k_here, len(shared), k_ref, len(shared))
        return found.diff > self.margin and found.p_greater * cells < self.alpha


class Check(Protocol):
    def null(self, stop_alpha: float) -> float: ...
    def fails(self, k: int, n: int, cells: int, rows: Sequence[Mapping[str, Any]], event: str) -> bool: ...


@dataclass(frozen=True)
class CountStop:
    """The rule for one COUNT metric of one cell (the module docstring): `checks` are the
    thresholds on it that apply to the cell."""

    event: str
    """The samples' boolean field counted (`collapsed`)."""
    checks: tuple[Check, ...]
    cells: int
    """The matrix's cells: the most a threshold's p-value is multiplied by across them."""
    stop_alpha: float

    @functools.cached_property
    def healthy(self) -> float:
        """The highest rate every check lets pass: the anytime-valid test's null (once per rule)."""
        return max(check.null(self.stop_alpha) for check in self.checks)

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> str | None:
        n, healthy = len(rows), self.healthy
        if not n or healthy >= 1.0:
            return None
        k = sum(bool(row[self.event]) for row in rows)
        log_e = _log_e(n, k, healthy)
        if log_e < -math.log(self.stop_alpha):
            return None
        if not all(check.fails(k, n, self.cells, rows, self.event) for check in self.checks):
            return None
        return (f"{k} of {n} judged {self.event}, beyond every threshold on it; a rate of {healthy:.3g} "
                f"or less is ruled out at p <= {min(1.0, math.exp(-log_e)):.2g} (anytime-valid)")


@functools.lru_cache(maxsize=1024)
def _upper(k: int, n: int, alpha: float) -> float:
    """A reference's one-sided upper bound on its rate, cached: every cell judged against one
    reference asks the same."""
    return clopper_pearson(k, n, alpha)[1]


@functools.lru_cache(maxsize=4096)
def _log_e(n: int, k: int, healthy: float) -> float:
    """`log_e_above` of one look, cached: consecutive looks (and simulated cells) repeat (n, k)."""
    return float(log_e_above(n, k, healthy))


def stop_rule(config: MatrixConfig, cell: Cell, store: RunStore, ev: Eval, settings: EvalSettings) -> StopWhen | None:
    """The stopping rule of `ev` on `cell`, None where the config asks none (`run.stop_early`
    false) or the rule could certify nothing (the module docstring)."""
    if not config.run.stop_early:
        return None
    specs = [spec for spec in ev.metrics_for(settings) if spec.comparison is Comparison.COUNT
             and spec.event_field and not spec.higher_is_better]
    if len(specs) != 1:
        return None
    spec = specs[0]
    thresholds = [t for t in config.thresholds if t.metric == spec.name]
    cells = expand(config)
    checks: list[Check] = []
    for threshold in thresholds:
        check = _check(threshold, spec, cell, cells, config, store, ev)
        if check is False:
            return None
        if check is not None:
            checks.append(check)
    if not checks:
        return None
    assert spec.event_field is not None
    return CountStop(spec.event_field, tuple(checks), len(cells), config.run.stop_alpha)


def _check(threshold: Threshold, spec: MetricSpec, cell: Cell, cells: list[Cell], config: MatrixConfig,
           store: RunStore, ev: Eval) -> Check | None | Literal[False]:
    """The certifiable form of one threshold on this cell; None where it does not apply to the
    cell (a baseline has no `vs_baseline`), False where it applies and cannot be certified."""
    check, value = threshold.check, threshold.value
    if check == "max":
        return Limit(value, threshold.alpha or OWN_ALPHA) if threshold.gate == "noise" else False
    if check not in ("max_rise_vs_baseline", "max_rise_ab"):
        return False
    reference = baseline_cell(cells, config) if check == "max_rise_vs_baseline" else ab_twin(cell, cells, config)
    if reference is None or reference.id == cell.id:
        return None
    if threshold.alpha is None:
        return False
    record = store.read_cell(reference.id)
    path = store.cell_dir(reference.id) / ev.samples_file
    if record is None or record.get("status") != "ok" or not path.is_file():
        return False  # not finished before this cell (side by side, or later in the plan)
    event = spec.event_field or ""
    return Rise(value, threshold.alpha, {row["id"]: bool(row.get(event)) for row in read_jsonl(path)})
