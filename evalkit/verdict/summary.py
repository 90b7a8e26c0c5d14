"""summary.json as typed models: the run's verdict that every renderer, `compare`, the history and
users' scripts read (issue 27 item 2).

`verdict.deltas.summarize_run` builds a `RunSummary`; summary.json is its `dump()`, keys in the
order the fields are declared (schema_version 2; version 1 kept the order the dicts were built in,
which varied with a check's rule or a metric's kind, and reads into the same models). A key that is
only written when set, like a cell's `error`, still is. The models follow store/records.py: each
field documented under it, unknown keys kept (`extra="allow"`), so a summary written by another
evalkit reads and dumps back with its keys, and one written before a field existed (`metrics`,
`checks`) still validates. Only what every summary has is required. A check, a flag or a delta
declares every key it may have (which it has depends on the check or the metric's comparison kind).
A comparison of two runs (`RunComparison`, verdict/compare.py) is typed here too: it shares the
verdict's cells' checks, flags and tallies, which the reports word by one function.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import ConfigDict, Field, PrivateAttr

from evalkit.evals import recorded, registry
from evalkit.evals.base import MetricSpec
from evalkit.evals.evalset import EvalSet
from evalkit.store.costs import CellCost
from evalkit.store.records import CacheRecord, ImportInfo, LogCheck, RanAsRecord, Record, RecordFile, SourceInfo

SUMMARY_SCHEMA_VERSION = 2
"""summary.json's version: a field is renamed or removed only with a new version and a migration
note in docs/results.md (scripts and cron jobs read these files). 2: keys in declaration order."""

Number = int | float
"""A figure as computed: an int stays an int in the JSON (pydantic keeps the exact type)."""


class MetricRecord(Record):
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
    unit: str | None = None
    """Its unit's name (evals/units.py: "share", "tokens/s"); None: recorded before units were."""


class Delta(Record):
    """One metric of a cell against a reference (deltas.delta): a difference and a p-value, then
    what its kind adds (paired: ci95, n, flipped ids; count: the two-sided p, n, n_reference;
    pairwise: value; a comparison not made: setup_differs or refused). An eval's `Pairwise` or
    `ExtraDelta` may add keys of its own (kept as read)."""

    diff: Number | None = None
    p_value: Number | None = None
    """The p-value a gate reads (a count's: one-sided, a rise)."""
    ci95: list[Number] | None = None
    """A paired difference's 95% interval, [low, high]."""
    n: int | None = None
    """The questions both cells answered (paired), or the cell's samples (count)."""
    right_only_in_cell: int | None = None
    right_only_in_reference: int | None = None
    both_right: int | None = None
    flipped_to_wrong: list[str] = []
    """A paired metric: the question ids right in the reference and wrong in the cell."""
    flipped_to_right: list[str] = []
    p_greater: Number | None = None
    p_two_sided: Number | None = None
    n_reference: int | None = None
    rate_reference: Number | None = None
    noise_floor: Number | None = None
    """The larger repeat swing of the two cells (None: no repeats)."""
    value: Number | None = None
    """A PAIRWISE metric: the value measured between the two cells (else None)."""
    worst: list[dict[str, Any]] = []
    """A PAIRWISE metric: the places its eval found worst (`Pairwise.pairwise`; eval-defined)."""
    setup_differs: list[str] = []
    """The eval setup fields that differ between the two cells (the comparison was refused)."""
    refused: str | None = None
    """Why the comparison was not made: the owning eval refused it, or the two cells scored no
    question (or sample) in common."""
    differs: list[str] = []
    """What the two cells ran differently beyond what the comparison expects (their
    comparability keys, store/comparability.py), in words: the comparison was not made."""

    @property
    def flips_listed(self) -> bool:
        """Whether this is a paired comparison that lists its flipped questions."""
        return "flipped_to_wrong" in self.model_fields_set


class Deltas(Record):
    """A cell against one reference: its id, then one `Delta` per compared metric by name."""

    reference: str
    __pydantic_extra__: dict[str, Delta]

    def of(self, metric: str) -> Delta | None:
        """The delta of `metric` (None: not compared)."""
        return self.__pydantic_extra__.get(metric)


class Flag(Record):
    """A broken threshold or a warning on a cell (verdict/checks.py `flag`, or an eval's
    `CellFlags`): its figures depend on the check."""

    metric: str
    check: str
    limit: Number | None = None
    action: str
    """"fail" or "warn"."""
    value: Number | str | None = None
    """The cell's value (a ran_as flag: the mode the engine ran)."""
    not_checked: str | None = None
    """Why the threshold could not be checked (a flag of a NOT_CHECKED check)."""
    reference: str | None = None
    setup_differs: list[str] = []
    refused: str | None = None
    differs: list[str] = []
    """What the cell and its reference ran differently beyond what the comparison expects."""
    diff: Number | None = None
    p_value: Number | None = None
    p_adj: Number | None = None
    message: str
    """The report's words."""


class CheckRecord(Record):
    """One threshold checked on one cell (verdict/checks.py): its outcome and the figures behind it."""

    threshold: int
    """The threshold's index in the config."""
    rule: str
    metric: str
    check: str
    margin: Number | None = None
    action: str | None = None
    alpha: Number | None = None
    power: Number | None = None
    """The power at which `mde` is stated."""
    factor: Number | None = None
    """The MDE above `factor` x `margin` makes a pass INCONCLUSIVE."""
    detects: Number | None = None
    """A detect-only check's change to catch: an MDE within it PASSES a non-significant check."""
    reference: str | None = None
    value: Number | None = None
    diff: Number | None = None
    n: int | None = None
    """Questions or samples per cell the check was decided on."""
    p: Number | None = None
    """The test's p-value before the family adjustment (None: not tested)."""
    p_adj: Number | None = None
    mde: Number | None = None
    """The minimum detectable effect at this n (None: none could be computed)."""
    n_needed: int | None = None
    outcome: str
    """PASS, FAIL, INCONCLUSIVE or NOT_CHECKED."""
    why: str | None = None
    """Why a NOT_CHECKED check was not checked."""
    setup_differs: list[str] = []
    refused: str | None = None
    differs: list[str] = []
    """What the cell and its reference ran differently beyond what the comparison expects."""
    noise_floor: Number | None = None
    between: Number | None = None
    """A PAIRWISE metric: the value measured between the two cells."""
    p_value: Number | None = None
    """The delta's p-value, shown in a flag's words even when no alpha asks for a test."""
    untestable: bool = False
    """A threshold with alpha on a delta that has no test: never significant."""
    discordance: Number | None = None
    base_rate: Number | None = None
    n_reference: int | None = None
    ci: list[Number] | None = None
    ci_level: Number = 0.9
    p_equivalent: Number | None = None
    p_equivalent_adj: Number | None = None
    family: int = 0
    """How many cells' p-values were adjusted together (0: none was tested)."""
    multiplicity: str = "none"
    message: str | None = None
    """A check recovered from a flag (render/checks.py `checks_of`): the flag's words."""

    def updated(self, **changes: Any) -> CheckRecord:
        """A copy with `changes`, validated (a figure computed by numpy becomes a plain number):
        verdict/checks.py builds a check in steps."""
        return CheckRecord.model_validate(self.dump() | changes)


DECIDED = ("PASS", "FAIL", "INCONCLUSIVE")
"""The outcomes of a check that looked at evidence (NOT_CHECKED did not)."""


def _decides(check: CheckRecord) -> bool:
    return check.outcome in DECIDED and (check.action or "fail") == "fail"


class CellRow(Record):
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
    cache: CacheRecord | None = None
    """How the engine's compile caches were kept: keyed (its key, hit or miss), fresh or the
    engine's own (engine/caches.py); None: recorded before keyed caches, or no engine started."""
    source: SourceInfo | None
    imports: ImportInfo | None
    engine_version: str | None
    timings: dict[str, Number | None]
    cost: CellCost | None = None
    """Devices held x wall, by phase (store/costs.py); None: recorded before costs were."""
    checks: list[CheckRecord] | None = None
    """The thresholds checked on the cell (None: a summary written before checks were recorded)."""
    flags: list[Flag] = []

    @property
    def judged(self) -> bool:
        """Whether a failing threshold's check decided something about the cell (PASS, FAIL or
        INCONCLUSIVE): only a judged cell may be said to hold. A summary written before checks were
        recorded (`checks` None) judged its cells by their flags, as it did."""
        return self.status == "ok" and (self.checks is None or any(_decides(c) for c in self.checks))

    def against(self, key: str) -> Deltas | None:
        """`vs_baseline` or `vs_ab` by name (render/table.py `AGAINST`)."""
        return self.vs_baseline if key == "vs_baseline" else self.vs_ab if key == "vs_ab" else None

    def delta(self, key: str, metric: str) -> Delta | None:
        """The delta of `metric` against the reference `key` names (None: not compared)."""
        deltas = self.against(key)
        return deltas.of(metric) if deltas is not None else None


class Regression(Record):
    """What `--bisect-on-regression` found for one cell (bisect/on_regression.py, regressions.json):
    the cell, then the previous run, the good and bad ends, and the bisect's outcome or why none ran."""

    cell: str
    previous_run: str | None = None
    good: str | None = None
    bad: str | None = None
    bisect_id: str | None = None
    status: str | None = None
    first_bad: str | None = None
    """The first bad commit the bisect found."""
    message: str | None = None
    subject: str | None = None


def _specs(metrics: list[MetricRecord] | None, evals: EvalSet | None) -> list[MetricSpec]:
    """Recorded metrics as specs (`recorded.specs_from`: none recorded, the evals' fixed specs)."""
    return recorded.specs_from(None if metrics is None else [m.dump() for m in metrics], evals)


_C = TypeVar("_C", bound="_Carries")


class _Carries(Record):
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


class RunMeta(Record):
    """One run of a comparison, as its run.json and cells name it."""

    run_id: str
    model: str
    engine: str
    started_at: str | None
    status: str | None
    limit: int | None
    simulated: bool
    source_shas: list[str]
    """The engine source commits its cells ran, sorted (none: no engine source recorded)."""
    command: list[str] | None
    """The command that started the run, secrets redacted."""


class ComparedCell(Record):
    """One cell of a comparison (verdict.compare.compare_runs): where it ran, both sides' flat
    metrics, B's checks and flags against A, and B − A of each compared metric under the metric's
    name (None: not compared, e.g. no question both answered), kept as extra keys so the JSON
    reads `cells[i]["gsm8k.flexible"]["diff"]`."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    id: str
    axes: dict[str, str]
    found_in: Literal["both", "a", "b"] = Field(alias="in")
    """The runs the cell is in (the JSON's `in`)."""
    status_a: str | None
    """The cell's status in A (None: not in A)."""
    status_b: str | None
    a: dict[str, Any]
    """A's flat metrics (`Eval.flat`; {} when the cell is not in A or did not finish)."""
    b: dict[str, Any]
    setup_differs: dict[str, list[str]] = {}
    """Eval name -> the setup fields that differ between A and B (its metrics were not compared)."""
    differs: list[str] = []
    """What A's and B's cell ran differently beyond what the comparison expects (their
    comparability keys, store/comparability.py), in words: the cell was not compared."""
    question_sets: dict[str, str] = {}
    """Eval name -> how its question sets differ (`gsm8k question set: 200 (stratified) vs all
    1319`): its metrics were compared on the questions both scored."""
    on_shared: dict[str, list[Number]] = {}
    """Metric -> [A, B] on the questions (samples) both runs scored, for a share of an eval whose
    question sets differ: the two values its Δ compares (`a` and `b` hold each run's own)."""
    checks: list[CheckRecord] = []
    """B's config's delta thresholds checked against A's cell (none unless both are ok)."""
    flags: list[Flag] = []
    __pydantic_extra__: dict[str, Delta | None]

    @property
    def both_ok(self) -> bool:
        """Whether the cell finished in both runs: only then is it compared."""
        return self.found_in == "both" and self.status_a == self.status_b == "ok"

    @property
    def judged(self) -> bool:
        """Whether B's cell was judged against A's: both finished, ran alike, and a failing
        threshold's check on it decided something (PASS, FAIL or INCONCLUSIVE)."""
        return self.both_ok and not self.differs and any(_decides(c) for c in self.checks)

    def delta(self, metric: str) -> Delta | None:
        """B − A of `metric` (None: not compared)."""
        return self.__pydantic_extra__.get(metric)


class RunComparison(_Carries):
    """Two runs of one matrix compared (verdict.compare.compare_runs): run B judged against run A
    cell by cell, with the tallies and exit status a `RunSummary` has, so the reports word a
    run's and a comparison's checks, flags and verdict line by one function. `--format json`
    is its dump."""

    a: RunMeta
    b: RunMeta
    metrics: list[MetricRecord]
    """The metrics either run measured, in report order."""
    cells: list[ComparedCell]
    """Every cell of either run, A's order first."""
    multiplicity: str | None
    """B's config's adjustment of p-values across cells (None: B stored no config)."""
    check_outcomes: dict[str, int]
    inconclusive_checks: int
    failed_cells: int
    """Cells that failed to run in B."""
    broken_thresholds: int
    warnings: int
    exit_code: int
    allowed: list[str] = []
    """What the caller allowed A and B to differ in beyond the build, questions and set-ups
    (`compare --allow`)."""
    shared_questions: dict[str, int] = {}
    """Eval name -> the fewest questions both runs scored in a compared cell, for each eval whose
    question sets differ: the comparison stands on those alone."""

    def specs(self) -> list[MetricSpec]:
        """The metrics the comparison measured, in report order."""
        return _specs(self.metrics, self._evals)

    @property
    def unjudged(self) -> list[str]:
        """The cells B was not judged on (on one side only, not finished on both, run differently,
        or no check of B's config decided anything): never said to hold."""
        return [cell.id for cell in self.cells if not cell.judged]


class RunSummary(RecordFile, _Carries):
    """The whole run's verdict: summary.json (`load` refuses one a newer evalkit wrote)."""

    newest = SUMMARY_SCHEMA_VERSION
    schema_version: int = 1
    """The shape the file follows: `summarize_run` writes `SUMMARY_SCHEMA_VERSION`; a file
    without the field was written before versions (1)."""
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

    def specs(self) -> list[MetricSpec]:
        """The metrics the run measured, in report order (`recorded.specs_of`: a summary from
        before they were recorded falls back to the evals' fixed specs)."""
        return _specs(self.metrics, self._evals)

    @property
    def unjudged(self) -> list[str]:
        """The finished cells no failing threshold's check decided anything about, neither on the
        cell nor against it as another cell's reference (the baseline, a fix-on twin): never said to
        hold. A run against one server judged only by relative gates has every cell here."""
        references = {c.reference for cell in self.cells for c in cell.checks or [] if _decides(c)}
        return [cell.id for cell in self.cells if cell.status == "ok" and not cell.judged and cell.id not in references]
