"""summary.json as typed models: the run's verdict that every renderer, `compare`, the history and
users' scripts read (issue 27 item 2).

`verdicts.summarize_run` builds a `RunSummary`; summary.json is its `dump()`, the same JSON as
the dicts it replaced (a key that was only written when set, like a cell's `error`, still is).
The models follow store/records.py: each field documented under it, unknown keys kept
(`extra="allow"`), so a summary written by another evalkit reads and dumps back unchanged, and
one written before a field existed (`metrics`, `checks`) still validates. Only what every
summary has is required. A dump lists declared fields first, then the rest in the order read, so
the open records (a check, a flag, a delta, whose fields depend on the check or the metric's
comparison kind) declare just the leading fields every one of them has: summary.json keeps its
key order to the byte.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import PrivateAttr

from evalkit.evals import recorded, registry
from evalkit.evals.base import MetricSpec
from evalkit.evals.evalset import EvalSet
from evalkit.store.records import ImportInfo, LogCheck, RanAsRecord, SourceInfo, _Record

SUMMARY_SCHEMA_VERSION = 1
"""summary.json's version: a field is renamed or removed only with a new version and a migration
note in docs/results.md (scripts and cron jobs read these files)."""

Number = int | float
"""A figure as computed: an int stays an int in the JSON (pydantic keeps the exact type)."""


class _Open(_Record):
    """A record whose later keys depend on its kind, so they stay undeclared (declaring one would
    move it ahead of the others in the dump): renderers read them through the typed properties
    below, the one place each key is named, rather than by string."""

    def _extra(self, key: str) -> Any:
        return (self.model_extra or {}).get(key)


class MetricRecord(_Record):
    """One metric the run measured, as its eval declares it (evals/recorded.py writes and reads it)."""

    name: str
    label: str
    comparison: Literal["paired", "count", "continuous", "pairwise", "none"]
    higher_is_better: bool = True
    key: str = ""
    column: str | None = None
    delta_label: str | None = None
    pivot: str | None = None
    details: str | None = None


class Delta(_Open):
    """One metric of a cell against a reference (verdicts.delta): a difference and a p-value, then
    what its kind adds (paired: n, ci95, flipped ids; count: p first, n, n_reference; pairwise:
    value; a comparison not made: setup_differs or refused). Its keys' order depends on the kind,
    so it declares none (see the module docstring) and reads the two every delta has here."""

    @property
    def diff(self) -> Number | None:
        return self._extra("diff")

    @property
    def p_value(self) -> Number | None:
        return self._extra("p_value")

    @property
    def value(self) -> Number | None:
        """A PAIRWISE metric: the value measured between the two cells (else None)."""
        return self._extra("value")

    @property
    def n(self) -> int | None:
        return self._extra("n")

    @property
    def ci95(self) -> list[float] | None:
        """A paired difference's 95% interval, [low, high]."""
        return self._extra("ci95")

    @property
    def setup_differs(self) -> list[str]:
        """The eval setup fields that differ between the two cells (the comparison was refused)."""
        return self._extra("setup_differs") or []

    @property
    def refused(self) -> str | None:
        """Why the owning eval refused to compare the two cells."""
        return self._extra("refused")

    @property
    def flipped_to_wrong(self) -> list[str]:
        """A paired metric: the question ids right in the reference and wrong in the cell."""
        return self._extra("flipped_to_wrong") or []

    @property
    def flipped_to_right(self) -> list[str]:
        return self._extra("flipped_to_right") or []

    @property
    def flips_listed(self) -> bool:
        """Whether this is a paired comparison that lists its flipped questions."""
        return "flipped_to_wrong" in (self.model_extra or {})

    @property
    def worst(self) -> list[dict[str, Any]]:
        """A PAIRWISE metric: the places its eval found worst (`Pairwise.pairwise`; eval-defined)."""
        return self._extra("worst") or []


class Deltas(_Record):
    """A cell against one reference: its id, then one `Delta` per compared metric by name."""

    reference: str
    __pydantic_extra__: dict[str, Delta]

    def of(self, metric: str) -> Delta | None:
        """The delta of `metric` (None: not compared)."""
        return self.__pydantic_extra__.get(metric)


class Flag(_Open):
    """A broken threshold or a warning on a cell: then `limit`, `action` ("fail" or "warn"), the
    figures, and `message`, the report's words."""

    metric: str
    check: str

    @property
    def action(self) -> str:
        """"fail" or "warn"."""
        return str((self.model_extra or {})["action"])

    @property
    def message(self) -> str:
        return str((self.model_extra or {})["message"])

    @property
    def limit(self) -> Number | None:
        return self._extra("limit")

    @property
    def value(self) -> Number | None:
        return self._extra("value")

    @property
    def reference(self) -> str | None:
        return self._extra("reference")

    @property
    def not_checked(self) -> str | None:
        """Why the threshold could not be checked (a flag of a NOT_CHECKED check)."""
        return self._extra("not_checked")


class CheckRecord(_Open):
    """One threshold checked on one cell (verdict/checks.py): its outcome and the figures behind it."""

    threshold: int
    """The threshold's index in the config."""
    rule: str
    metric: str
    check: str
    """Then `margin`, `action`, ..., `outcome` (PASS, FAIL, INCONCLUSIVE, NOT_CHECKED): verdict/checks.py."""

    @property
    def outcome(self) -> str:
        return str((self.model_extra or {})["outcome"])

    @property
    def action(self) -> str | None:
        return self._extra("action")

    @property
    def margin(self) -> Number | None:
        return self._extra("margin")

    @property
    def factor(self) -> Number | None:
        """The MDE above `factor` x `margin` makes a pass INCONCLUSIVE."""
        return self._extra("factor")

    @property
    def detects(self) -> Number | None:
        """A detect-only check's change to catch: an MDE within it PASSES a non-significant check."""
        return self._extra("detects")

    @property
    def alpha(self) -> Number | None:
        return self._extra("alpha")

    @property
    def power(self) -> Number | None:
        """The power at which `mde` is stated."""
        return self._extra("power")

    @property
    def n(self) -> int | None:
        """Questions or samples per cell the check was decided on."""
        return self._extra("n")

    @property
    def reference(self) -> str | None:
        return self._extra("reference")

    @property
    def value(self) -> Number | None:
        return self._extra("value")

    @property
    def diff(self) -> Number | None:
        return self._extra("diff")

    @property
    def p(self) -> Number | None:
        """The test's p-value before the family adjustment (None: not tested)."""
        return self._extra("p")

    @property
    def p_adj(self) -> Number | None:
        return self._extra("p_adj")

    @property
    def p_equivalent_adj(self) -> Number | None:
        return self._extra("p_equivalent_adj")

    @property
    def mde(self) -> Number | None:
        """The minimum detectable effect at this n (None: none could be computed)."""
        return self._extra("mde")

    @property
    def n_needed(self) -> int | None:
        return self._extra("n_needed")

    @property
    def ci(self) -> list[float] | None:
        return self._extra("ci")

    @property
    def ci_level(self) -> float:
        return self._extra("ci_level") or 0.9

    @property
    def family(self) -> int:
        """How many cells' p-values were adjusted together (0: none was tested)."""
        return self._extra("family") or 0

    @property
    def multiplicity(self) -> str:
        return str(self._extra("multiplicity"))

    @property
    def why(self) -> str | None:
        """Why a NOT_CHECKED check was not checked."""
        return self._extra("why")

    @property
    def message(self) -> str | None:
        """A check recovered from a flag (render/checks.py `checks_of`): the flag's words."""
        return self._extra("message")

    @property
    def untestable(self) -> bool:
        """A threshold with alpha on a delta that has no test: never significant."""
        return bool(self._extra("untestable"))


class CellRow(_Record):
    """One cell's line of the verdict."""

    id: str
    axes: dict[str, str]
    status: str
    error: str | None = None
    """The cell's error message (only written for a cell that failed)."""
    metrics: dict[str, Any]
    """Flat metrics under dotted names (`Eval.flat`)."""
    unmeasured: dict[str, str]
    vs_baseline: Deltas | None = None
    vs_ab: Deltas | None = None
    setup: dict[str, str]
    """Eval name -> the hash of its setup (the run's `setups` hold the fields)."""
    effective_mode: str | None
    ran_as: RanAsRecord | None
    log_checks: list[LogCheck] | None
    source: SourceInfo | None
    imports: ImportInfo | None
    engine_version: str | None
    timings: dict[str, Number | None]
    checks: list[CheckRecord] | None = None
    """The thresholds checked on the cell (None: a summary written before checks were recorded)."""
    flags: list[Flag] = []

    def against(self, key: str) -> Deltas | None:
        """`vs_baseline` or `vs_ab` by name (render/table.py `AGAINST`)."""
        return self.vs_baseline if key == "vs_baseline" else self.vs_ab if key == "vs_ab" else None

    def delta(self, key: str, metric: str) -> Delta | None:
        """The delta of `metric` against the reference `key` names (None: not compared)."""
        deltas = self.against(key)
        return deltas.of(metric) if deltas is not None else None


class Regression(_Open):
    """What `--bisect-on-regression` found for one cell (bisect/on_regression.py, regressions.json):
    the cell, then the previous run, the good and bad ends, and the bisect's outcome or why none ran."""

    cell: str

    @property
    def previous_run(self) -> str | None:
        return self._extra("previous_run")

    @property
    def first_bad(self) -> str | None:
        """The first bad commit the bisect found."""
        return self._extra("first_bad")

    @property
    def subject(self) -> str | None:
        return self._extra("subject")

    @property
    def bisect_id(self) -> str | None:
        return self._extra("bisect_id")

    @property
    def good(self) -> str | None:
        return self._extra("good")

    @property
    def bad(self) -> str | None:
        return self._extra("bad")

    @property
    def status(self) -> str | None:
        return self._extra("status")

    @property
    def message(self) -> str | None:
        return self._extra("message")


def _specs(metrics: list[MetricRecord] | None, evals: EvalSet | None) -> list[MetricSpec]:
    """Recorded metrics as specs (`recorded.specs_from`: none recorded, the evals' fixed specs)."""
    return recorded.specs_from(None if metrics is None else [m.dump() for m in metrics], evals)


_C = TypeVar("_C", bound="_Carries")


class _Carries(_Record):
    """A verdict that carries its run's evals (`EvalSet`), never dumped: who summarised the run or
    read it with its config gives them (`carrying`); a summary read alone has the built-ins, and
    shows another eval's metrics as recorded."""

    _evals: EvalSet | None = PrivateAttr(None)

    @property
    def evals(self) -> EvalSet:
        return self._evals if self._evals is not None else registry.builtins()

    def carrying(self: _C, evals: EvalSet) -> _C:
        """This verdict, with its run's evals (returned, to chain after a validate)."""
        self._evals = evals
        return self


class JudgedCell(_Record):
    """A compared cell as the verdict sees it (`Verdict`): its id, checks and flags; the rest of
    the compare row (comparison.compare_runs) is kept as read."""

    id: str
    checks: list[CheckRecord] | None = None
    flags: list[Flag] = []


class Verdict(_Carries):
    """What a comparison of two runs (comparison.compare_runs) shares with a `RunSummary`: the
    judged cells and the tallies, so the reports word a run's and a comparison's checks, flags
    and verdict line by one function. A view for reading, never dumped."""

    metrics: list[MetricRecord] | None = None
    cells: list[JudgedCell]
    status: str | None = None
    failed_cells: int
    broken_thresholds: int
    warnings: int
    exit_code: int
    inconclusive_checks: int | None = None

    def specs(self) -> list[MetricSpec]:
        """The metrics the comparison measured, in report order."""
        return _specs(self.metrics, self._evals)


class RunSummary(_Carries):
    """The whole run's verdict: summary.json."""

    schema_version: int = SUMMARY_SCHEMA_VERSION
    run_id: str
    model: str
    engine: str
    simulated: bool
    status: str | None
    started_at: str | None
    finished_at: str | None
    command: list[str] | str | None
    listen_host: str | None
    baseline: str | None
    ab: dict[str, str] | None
    metrics: list[MetricRecord] | None = None
    """The run's metrics (absent in summaries written before they were recorded)."""
    cells: list[CellRow]
    setups: dict[str, dict[str, Any]]
    failed_cells: int
    not_run_cells: int
    broken_thresholds: int
    warnings: int
    exit_code: int
    multiplicity: str | None = None
    check_outcomes: dict[str, int] | None = None
    inconclusive_checks: int | None = None
    regressions: list[Regression] | None = None
    """What --bisect-on-regression found (only written when it ran)."""

    def model_post_init(self, context: Any) -> None:
        # the version is written whether or not the reader's file had it (files before it: 1)
        self.model_fields_set.add("schema_version")

    def specs(self) -> list[MetricSpec]:
        """The metrics the run measured, in report order (`recorded.specs_of`: a summary from
        before they were recorded falls back to the evals' fixed specs)."""
        return _specs(self.metrics, self._evals)
