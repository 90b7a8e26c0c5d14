"""summary.json as typed models: the run's verdict that every renderer, `compare`, the history and
users' scripts read (issue 27 item 2).

`verdicts.summarize_run` builds a `RunSummary`; summary.json is its `dump()`, the same JSON as
the dicts it replaced (a key that was only written when set, like a cell's `error`, still is).
The models follow run/records.py: each field documented under it, unknown keys kept
(`extra="allow"`), so a summary written by another evalkit reads and dumps back unchanged, and
one written before a field existed (`metrics`, `checks`) still validates. Only what every
summary has is required. A dump lists declared fields first, then the rest in the order read, so
the open records (a check, a flag, a delta, whose fields depend on the check or the metric's
comparison kind) declare just the leading fields every one of them has: summary.json keeps its
key order to the byte.
"""

from __future__ import annotations

from typing import Any, Literal

from evalkit.run.records import _Record

SUMMARY_SCHEMA_VERSION = 1
"""summary.json's version: a field is renamed or removed only with a new version and a migration
note in docs/results.md (scripts and cron jobs read these files)."""

Number = int | float
"""A figure as computed: an int stays an int in the JSON (pydantic keeps the exact type)."""


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


class Delta(_Record):
    """One metric of a cell against a reference (verdicts.delta): a difference and a p-value, then
    what its kind adds (paired: n, ci95, flipped ids; count: p first, n, n_reference; pairwise:
    value; a comparison not made: setup_differs or refused). Its keys' order depends on the kind,
    so it declares none (see the module docstring) and reads the two every delta has here."""

    @property
    def diff(self) -> Number | None:
        return (self.model_extra or {}).get("diff")

    @property
    def p_value(self) -> Number | None:
        return (self.model_extra or {}).get("p_value")


class Deltas(_Record):
    """A cell against one reference: its id, then one `Delta` per compared metric by name."""

    reference: str
    __pydantic_extra__: dict[str, Delta]


class Flag(_Record):
    """A broken threshold or a warning on a cell: then `limit`, `action` ("fail" or "warn"), the
    figures, and `message`, the report's words."""

    metric: str
    check: str

    @property
    def action(self) -> str:
        """"fail" or "warn"."""
        return str((self.model_extra or {})["action"])


class CheckRecord(_Record):
    """One threshold checked on one cell (checks.py): its outcome and the figures behind it."""

    threshold: int
    """The threshold's index in the config."""
    rule: str
    metric: str
    check: str
    """Then `margin`, `action`, ..., `outcome` (PASS, FAIL, INCONCLUSIVE, NOT_CHECKED): checks.py."""


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
    ran_as: dict[str, Any] | None
    log_checks: list[dict[str, Any]] | None
    source: dict[str, Any] | None
    imports: dict[str, Any] | None
    engine_version: str | None
    timings: dict[str, Any]
    checks: list[CheckRecord] = []
    flags: list[Flag] = []


class RunSummary(_Record):
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
    regressions: list[dict[str, Any]] | None = None
    """What --bisect-on-regression found (only written when it ran)."""

    def model_post_init(self, context: Any) -> None:
        # the version is written whether or not the reader's file had it (files before it: 1)
        self.model_fields_set.add("schema_version")
