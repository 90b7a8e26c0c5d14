"""What an eval can do beyond its core (evals/base.py), each a small protocol it opts into by
defining the method.

A consumer asks ``isinstance(ev, Subsets)``: one way for every capability, and an eval without
one has no stub that a reader (or a consumer) could mistake for it. Each protocol is
`runtime_checkable`, which checks that the method exists; its signature is the contract below.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from evalkit.evals.base import EvalResult, MetricSpec


@runtime_checkable
class Pairwise(Protocol):
    """Measures its PAIRWISE metrics between two cells' stored samples (a divergence of their
    token distributions), a value no cell has alone."""

    def pairwise(self, metric: MetricSpec, this_dir: Path, ref_dir: Path) -> dict[str, Any] | None:
        """`metric` between this cell's samples and `ref_dir`'s, or None when there is nothing to
        compare (a cell without the eval's samples).

        Returns at least ``{"diff": change, "value": value, "p_value": None}``: `value` measured
        between the two, `diff` its change from the reference against itself (a divergence: the
        value; an agreement share: value - 1); more facts may follow, among them ``worst``: a list
        of ``{"id", "at", "value", "before", "here", "after"}`` (a sample id, a position in it,
        the value there and the text around it) that the report's details show. A comparison the
        eval cannot make honestly (the two cells tokenized a text differently, say) is
        ``{"diff": None, "p_value": None, "refused": "one line naming the sample and why"}``: the
        report says "not compared" and a threshold on it is flagged, never passed silently."""
        ...


@runtime_checkable
class ExtraDelta(Protocol):
    """Adds its own facts to the comparison of one of its metrics between two cells."""

    def extra_delta(self, metric: MetricSpec, cell_dir: Path, ref_dir: Path) -> dict[str, Any]:
        """More facts for the delta of `metric` (the collapse check: the new collapses)."""
        ...


@runtime_checkable
class Subsets(Protocol):
    """Runs just the samples named in `EvalContext.only`, and merges such runs: a bisect step runs
    it in batches and stops as soon as its verdict is decided (a step skips any other eval, with
    a note)."""

    def combine(self, parts: list[EvalResult]) -> EvalResult:
        """The runs of disjoint subsets (in run order) as one result, its metrics what one run over
        all their samples would report (so `flat` and the report read it)."""
        ...


@runtime_checkable
class Checks(Protocol):
    """Can tell before a run starts what would fail every cell (missing data, an unknown task)."""

    def check(self, settings: Any) -> None:
        """Raise ConfigError or EvalError for what would fail every cell."""
        ...


@runtime_checkable
class Prepares(Protocol):
    """Writes files every cell of a run shares (lm-eval's task YAML)."""

    def prepare(self, run_dir: Path, settings: Any) -> None:
        """Once per run, after its folder exists and before any cell."""
        ...


@runtime_checkable
class ReadsEarlierCells(Protocol):
    """Reads, in a cell, what the run's other cells left in their folders (divergence with
    `generations` scores their long generations), so the plan runs the baseline cell last."""

    def runs_baseline_last(self, settings: Any) -> bool:
        """Whether these settings need the baseline cell run after the others."""
        ...


@runtime_checkable
class ScansEarlierTexts(Protocol):
    """Reads the texts the cell's other evals generated (`EvalResult.texts`) as extra evidence
    (the collapse detector over GSM8K's answers): run apart, at the end of its own `run`; in a
    wave (run/wave.py), once every eval of the wave is done."""

    def scan_earlier(self, result: EvalResult, earlier: Mapping[str, EvalResult], settings: Any) -> None:
        """Add to `result.metrics` what the texts of `earlier` (by eval name) show."""
        ...


@runtime_checkable
class LifecycleRecorded(Protocol):
    """A pseudo-eval: never run against a server (`EvalSet.enabled` leaves it out); its figures
    are what the cell lifecycle recorded (the engine's own report, evals/engine_figures.py)."""

    def raw(self, record: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """Its raw metrics (what `flat` reads) from a cell record; None: the cell has none."""
        ...


@runtime_checkable
class Unmeasured(Protocol):
    """Has metrics a cell can lack although the eval ran (an engine without speculative decoding,
    a failed scrape): a threshold on one is then "not checked" rather than passed."""

    def absent(self, raw: Mapping[str, Any]) -> dict[str, str]:
        """Metric name -> why this cell has no value of it."""
        ...


@runtime_checkable
class CellFlags(Protocol):
    """Raises flags on a cell that no threshold expresses (the engine not running its source tree)."""

    def cell_flags(self, record: Mapping[str, Any], row: Mapping[str, Any],
                   baseline: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """Flags shaped like a threshold's (`metric`, `check`, `action`, `message`), from the cell's
        record, its summary row and the baseline's row."""
        ...
