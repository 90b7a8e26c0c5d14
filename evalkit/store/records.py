"""What a run writes about itself: `run.json` (`RunRecord`) and each cell's `cell.json` (`CellRecord`).

One typed model per file, each field documented under it, in the manner of inspect_ai's eval log:
the file carries its own status, so a crash at any moment leaves a log that says how far it got.
Every writer (the cell lifecycle, the local executor, the Slurm driver) builds these models, and
`failed_cell` is the one constructor of a record for a cell without a result.

Both files carry `schema_version`. A file is written with only the fields that were set, so a
record holds exactly the keys it did before the models existed (plus `schema_version`); unknown
keys are kept (`extra="allow"`), so a newer writer's additions survive a read and a rewrite.
They live in the store, below the run that writes them, so the judging step, the history and
bisect read them without reaching into the run's modules; a record names its cell by the
`CellLike` shape (an id and axes), not by the config's `Cell` type.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from evalkit.errors import ConfigError
from evalkit.store import read_json
from evalkit.store.costs import CellCost

SCHEMA_VERSION = 1
"""Version of the cell.json and run.json shapes. Files written before it existed are version 1."""



class CellLike(Protocol):
    """What a record needs of a matrix cell (evalkit.config.cells.Cell has it): its id and axes."""

    @property
    def id(self) -> str: ...

    @property
    def axes(self) -> Mapping[str, str]: ...


CellStatus = Literal["running", "ok", "error", "skipped", "interrupted"]
"""What a writer records of a cell."""
NotRun = Literal["not run"]
"""A planned cell without cell.json (the run stopped before it): never written, only what
`read_run_records` makes of the missing file, so the judging step reads every planned cell as a
`CellRecord`. Kept out of `CellStatus` so no writer can record it."""
ReadStatus = Literal[CellStatus, NotRun]
"""A cell's status as read back: written, or `not run` (one Literal, so a bad one is refused by name)."""
RunStatus = Literal["running", "complete", "interrupted"]
FINISHED: tuple[CellStatus, ...] = ("ok", "error")
"""A cell with one of these statuses in its cell.json is not run again by --resume."""


def now() -> str:
    """A record's timestamp: UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Record(BaseModel):
    """Shared by every model here: unknown keys kept, a dump holds only the fields that were set."""

    model_config = ConfigDict(extra="allow")

    def dump(self) -> dict[str, Any]:
        """The record as written to disk (JSON-ready through `store.write_json`)."""
        return self.model_dump(exclude_unset=True)


_F = TypeVar("_F", bound="RecordFile")


class RecordFile(Record):
    """A whole file: versioned, loaded from and dumped to JSON."""

    newest: ClassVar[int] = SCHEMA_VERSION
    """The newest shape of this file that this evalkit reads and writes (`load` refuses a later one)."""
    schema_version: int = SCHEMA_VERSION
    """The shape this file follows (`newest` when written by this evalkit)."""

    def model_post_init(self, context: Any) -> None:
        # A file read without the field (written before versions existed) is version 1, and
        # says so when it is written again.
        self.model_fields_set.add("schema_version")

    @classmethod
    def load(cls: type[_F], path: Path) -> _F:
        """Read and check a file; refuses one written by a newer evalkit (a newer schema)."""
        try:
            record = cls.model_validate(read_json(path))
        except ValidationError as e:
            raise ConfigError(f"{path}: not a {cls.__name__} ({e.errors()[0]['loc']}: {e.errors()[0]['msg']})") from e
        if record.schema_version > cls.newest:
            raise ConfigError(f"{path}: schema_version {record.schema_version} is newer than this evalkit's "
                              f"{cls.newest}; upgrade evalkit")
        return record


class CellError(Record):
    """Why a cell has no result: the cell's own failure, a budget, or a Slurm job that ended badly."""

    type: str | None = None
    """The error's class: `EngineExited`, `StartupTimeout`, `EvalError`, ..., `SlurmJob` (Slurm
    ended the job or it left no result), `SlurmSubmit` (sbatch refused it); absent for a skip."""
    message: str
    """One line naming what failed (secrets scrubbed); the report shows it."""
    exit_code: int | None = None
    """The engine process's exit code, or the Slurm job's exit status; None if it did not exit."""
    log_tail: str | None = None
    """The last lines of the engine log (or of `slurm-<jobid>.out`), secrets scrubbed."""
    slurm_state: str | None = None
    """The Slurm job's final state (`TIMEOUT`, `NODE_FAIL`, ...) when Slurm ended it."""


class SourceInfo(Record):
    """The engine source tree a cell ran (a git worktree at an exact commit)."""

    repo: str
    ref: str
    """The ref as the config gives it (branch, tag or abbreviated SHA)."""
    sha: str
    """The commit it resolved to."""


class SetupRecord(Record):
    """The source tree's setup step (engine/setup.py), when its source names one."""

    argv: list[str]
    """The setup as run, placeholders filled."""
    log: str
    """Its output, beside the worktree (the run that built it, or the one that failed)."""
    marker: str
    """The file that marks the worktree built with this argv."""
    status: Literal["built", "reused", "failed"]
    """`built` by this cell, `reused` (an earlier run or cell built it) or `failed`."""
    wall_s: float | None = None
    exit_code: int | None = None


class CacheRecord(Record):
    """How the launch's compile caches were kept (engine/caches.py): cell.json's `isolation.cache`."""

    mode: Literal["fresh", "keyed", "engine"]
    """`keyed`: a folder named by `key`, reused across cells and nights; `fresh`: empty folders
    made for this launch; `engine`: the engine's own caches, untouched."""
    key: str | None = None
    """The keyed folder's name: 16 hex characters of evalkit's cache key (None unless keyed)."""
    hit: bool | None = None
    """Whether an earlier launch with the same key had filled the folder (None unless keyed)."""
    path: str | None = None
    """The keyed folder (its key.json says the key in full)."""
    why: str | None = None
    """Why the mode is not what the config asked (a keyed folder in use by another launch)."""


class IsolationRecord(Record):
    """What kept this cell's engine launch apart from others (engine/isolation.py)."""

    cache: CacheRecord | None = None
    """How the caches were kept: mode, key and hit (None: recorded before keyed caches)."""
    cache_root: str | None = None
    """The launch's fresh cache folder (inside the cell folder, removed when the engine stops);
    None when the caches are keyed or the engine's own, or the profile names no cache variable."""
    cache_env: dict[str, str] = {}
    """Variable -> folder (e.g. VLLM_CACHE_ROOT, SGLANG_CACHE_DIR): empty at launch, or keyed."""
    emptied: list[str] = []
    """Fixed cache folders (no variable moves them, e.g. ATOM's ~/.cache/atom) emptied before launch."""
    kept: dict[str, str] = {}
    """Cache variables the config sets itself, so left as given (variable -> value)."""
    internal_ports: dict[str, str] = {}
    """Engine flag -> the value evalkit gave this launch (its internal ports, from the port book)."""


class ImportInfo(Record):
    """Where the engine's top package imports from, as the cell's own interpreter, environment and
    working directory answered before the engine started (evalkit/engine/imports.py)."""

    package: str
    """The package asked about (`engine.package`, else the profile's: `atom`, `vllm`, `sglang`)."""
    origin: str | None
    """Its `__init__.py` (or a namespace package's first directory); None: not importable."""
    tree: str | None = None
    """The source tree it must import from (worktree or its package subdirectory); None: the cell
    has no source tree, and the origin is recorded only."""
    inside: bool | None = None
    """Whether every place it imports from lies in `tree`; None without a tree."""
    error: str | None = None
    """Why the interpreter could not say, when it could not."""


class Witness(Record):
    """One piece of evidence about which tree the engine ran."""

    kind: Literal["import", "version", "log"]
    """`import`: where its package imports from (the proof); `version`: the commit its version
    endpoint names; `log`: the path of its own file in a start-up line of its log."""
    status: Literal["match", "mismatch", "unknown"]
    message: str


class EngineCheck(Record):
    """Does the engine run the source tree the cell checked out? (run/engine_report.py)"""

    status: Literal["match", "mismatch", "unknown"]
    """`mismatch` is the loud one: the engine logged a file outside the tree, or (with no import
    proof) its version names a commit other than the checkout's. A version that names no commit
    or another one never makes a mismatch when the import path proves the tree."""
    commit: str | None = None
    """The commit the engine's version names, if it names one."""
    source_sha: str | None = None
    """The checked-out commit; None when the cell has no source tree."""
    message: str
    """One line: what was compared, or why nothing could be (no version, a release version)."""
    witnesses: list[Witness] = []
    """Each piece of evidence (import path, version, logged file) with its own verdict."""


class RanAsRecord(Record):
    """What the engine's own log says it ran (profiles/ran.py), and whether that is what the cell asked."""

    mode: str | None = None
    """The graph mode the log shows (`eager`/`NONE`: no graphs); None: the log does not say."""
    layout: dict[str, int | bool] = {}
    """The parallel layout the log shows (`tensor_parallel`, `data_parallel`, `dp_attention`,
    `dp_attention_ranks`), only what it gives."""
    evidence: list[str] = []
    """The log lines read (a sentence where a missing line is the evidence)."""
    asked: dict[str, Any] = {}
    """The cell's own settings compared (`graph_mode`, `tensor_parallel`, `data_parallel`, `dp_attention`)."""
    agrees: bool | None = None
    """False: the engine ran another mode or layout than asked (the report flags the cell); None:
    the log says nothing to compare."""
    disagreements: list[str] = []
    """One phrase per difference, e.g. `graph mode FULL, asked PIECEWISE`."""


class LogCheck(Record):
    """One log assertion of the config (`log:` of the engine or an axis value), checked once the
    engine was ready and before the evals ran."""

    origin: str
    """Where the config states it: `engine`, or `axis=value`."""
    must: Literal["appear", "not appear"]
    pattern: str
    """The regex, searched line by line in this launch's engine log."""
    ok: bool
    line: str | None = None
    """The first line that matched (for `not appear`, the one that breaks it); None: no line did."""


class GpuRecord(Record):
    """The GPUs a cell's engine ran on (evalkit/run/gpus.py); absent without a GPU tool."""

    uuids: list[str] = []
    """The UUIDs of the cell's devices, as the vendor tool names them."""
    before_mib: dict[str, int] = {}
    """Device index -> used MiB before the engine started: the level its memory must come back to."""
    release: dict[str, Any] | None = None
    """After the engine stopped: `wait_s`, `released`, and on timeout `over_mib` and the `held`
    processes (pid, name, device, used_mib)."""
    telemetry: dict[str, Any] | None = None
    """While the evals ran: `interval_s`, `samples`, per device `peak_used_mib` and `mean_util_pct`."""


class CellRecord(RecordFile):
    """cell.json: one cell's status, launch, timings and raw metrics.

    Written once, when the cell ends (`ok`, `error`, or `skipped` by the run budget); a cell
    stopped by an interrupt writes nothing, so `--resume` runs it again. The Slurm driver adds
    `slurm` to the record its job wrote.
    """

    id: str
    """The cell id (axis value names joined in axis order), also the cell folder's name."""
    axes: dict[str, str]
    """Axis name -> value name."""
    status: ReadStatus
    """`running` while it runs, then `ok`, `error`, `skipped` or `interrupted` (never written);
    `not run` only as read back (`read_run_records`), for a planned cell that wrote nothing."""
    started_at: str | None = None
    """UTC start; absent for a skipped cell or an unsubmitted job, None when Slurm does not say."""
    source: SourceInfo | None = None
    """The engine source tree, or None when the engine runs from what is installed."""
    devices: list[int] | None = None
    """The device ids the cell ran on, when the config declares devices."""
    gpu: GpuRecord | None = None
    """Its GPUs' UUIDs, memory given back after the engine, telemetry; absent without a GPU tool."""
    setup: SetupRecord | None = None
    """The source tree's setup step; absent when the source names none."""
    isolation: IsolationRecord | None = None
    """Fresh caches and internal ports of the (last) engine launch; absent for an external server."""
    timings: dict[str, int | float | None] = {}
    """Seconds per phase (`engine_start_s`, `engine_ready_s`, `<eval>_s`, `engine_stop_s`,
    `engine_wall_s`, `total_s`) and `warmup_attempts`."""
    cost: CellCost | None = None
    """Devices held x wall time, split by phase, and the eval waited on last (store/costs.py)."""
    metrics: dict[str, Any] = {}
    """Raw metrics per eval name (`gsm8k`, `repetition`); `Eval.flat` turns them into the
    summary's dotted names."""
    launch: dict[str, Any] | None = None
    """What was started (argv, env, host, port, health_path; secrets redacted), or for an
    external server {base_url, note}."""
    engine_pid: int | None = None
    """The engine process's pid (tests check that none is left running)."""
    effective_mode: str | None = None
    """The graph mode the engine's log says it ran (`ran_as.mode`, kept here for history and old readers)."""
    ran_as: RanAsRecord | None = None
    """What the engine's log says it ran against what the cell asked; absent when the profile
    cannot read its engine's log (or for an external server)."""
    log_checks: list[LogCheck] | None = None
    """The config's log assertions that apply to this cell, each with its result; absent when none apply."""
    engine_version: str | None = None
    """What the engine's version endpoint reports (its profile's `version_path`), read once ready."""
    imports: ImportInfo | None = None
    """Where the engine's package imports from, asked before it started; absent when the engine
    names no package (or evalkit started none). A source cell whose answer lies outside its tree
    fails with `TreeNotProven` before its engine starts."""
    catalog: dict[str, Any] | None = None
    """The engine CI catalog's entry this cell's launch was taken from, as read at its ref
    (`engine.catalog`; engine/catalog.py `CatalogEntry.record`); absent without one."""
    engine_check: EngineCheck | None = None
    """Which tree the engine ran, from its import path, version and logged file; absent when none
    of them can be known."""
    engine_metrics: dict[str, Any] = {}
    """Per eval name, what the engine's `/metrics` counters say it did during that eval
    (`generation_tokens`, `requests`, `tpot_mean_s`, `tpot_n`, `spec_*`, `scrape_s`; see
    engine/metrics.py `figures`), or `{"missing": why}`; absent when `evals.engine` is off."""
    throughput: dict[str, Any] = {}
    """Per eval name: output tokens the client received per second (`completion_tokens`, `wall_s`,
    `tokens_per_s`; `tokens_from`: `usage`, `stream token ids` or `engine counter`; `timed`:
    `requests`, first request to last answer, or the whole `eval`), see run/engine_report.py."""
    traceback: str | None = None
    """For an internal error (a bug, not the engine's or eval's failure): the traceback, scrubbed."""
    error: CellError | None = None
    """Why the cell has no result; absent when it is `ok`."""
    finished_at: str | None = None
    """UTC end."""
    slurm: dict[str, Any] | None = None
    """Slurm executor only: the job (id, name, attempt, state, node, exit code, sbatch argv,
    `scontrol show job`, `sacct` or why not, earlier attempts)."""

    @classmethod
    def begin(cls, cell: CellLike, **fields: Any) -> CellRecord:
        """A cell's record as it starts: `running`, nothing measured yet, plus `fields`."""
        return cls(id=cell.id, axes=dict(cell.axes), status="running", **{"timings": {}, "metrics": {}, **fields})

    @property
    def message(self) -> str:
        """The error message, or "" (what the progress line shows)."""
        return self.error.message if self.error else ""


def failed_cell(cell: CellLike, error: CellError, *, status: Literal["error", "skipped"] = "error",
                base: CellRecord | None = None, **fields: Any) -> CellRecord:
    """The record of a cell without a result, the one way every writer builds it.

    `base` is the record of the cell so far (its start, launch, timings), kept as it was; `fields`
    add to it. Used by the cell lifecycle (its engine or an eval failed), the local executor (a
    cell `skipped` because the run budget was used up) and the Slurm driver (a job that left no
    result or that Slurm ended, a submission sbatch refused).
    """
    known = {name: getattr(base, name) for name in base.model_fields_set} if base else {}
    known = {"timings": {}, "metrics": {}, "finished_at": now(), **known, **fields}
    for name in ("schema_version", "id", "axes", "status", "error"):
        known.pop(name, None)
    return CellRecord(id=cell.id, axes=dict(cell.axes), status=status, error=error, **known)


def read_run_records(run_path: Path) -> tuple[RunRecord, list[CellRecord]]:
    """run.json and every planned cell's record, in plan order: what the judging step reads. A
    cell never written (the run was interrupted before it) is `not run`, with no axes (the store
    does not know them) and no metrics; a cell.json that is not a `CellRecord` raises ConfigError."""
    run = RunRecord.load(run_path / "run.json")
    cells = []
    for cell_id in run.cells:
        path = run_path / cell_id / "cell.json"
        cells.append(CellRecord.load(path) if path.is_file()
                     else CellRecord(id=cell_id, axes={}, status="not run", metrics={}))
    return run, cells


class HostInfo(Record):
    """The machine the run (its driver, for Slurm) ran on."""

    hostname: str
    platform: str
    cpus: int | None = None


class RunRecord(RecordFile):
    """run.json: enough to know exactly what ran, where, with which versions; secrets redacted.

    Written as `running` before the first cell starts and again when the run ends, so a run
    killed outright still says it was running.
    """

    run_id: str
    """The run folder's name."""
    status: RunStatus
    """`running`, then `complete`, or `interrupted` (Ctrl-C, SIGTERM: `--resume` finishes it)."""
    model: str
    """The model the engine serves (config `model`)."""
    served_name: str | None = None
    """The name requests use (config `served_name`, default the model)."""
    engine: str
    """The engine profile's name."""
    simulated: bool = False
    """Whether the engine is evalkit's simulator: reports label such runs."""
    config_path: str
    """The config file, absolute; `evalkit cell` and `--resume` read it again."""
    config: dict[str, Any]
    """The config as parsed, env values that look secret replaced; `--resume` and each Slurm
    job refuse a config file that no longer matches it."""
    cells: list[str] = []
    """Every planned cell id, in plan order (a cell without cell.json was not run)."""
    limit: int | None = None
    """`--limit`: at most this many questions or prompts per eval."""
    only: list[str] = []
    """The `--only` selections that chose the cells."""
    base_url: str | None = None
    """`--base-url`: the external server evaluated (then no engine was started)."""
    listen_host: str | None = None
    """The host engines bind."""
    command: list[str] = []
    """evalkit's own command line (`evalkit matrix ...`), shown in the report to reproduce the run."""
    evalkit_version: str | None = None
    evalkit_git_sha: str | None = None
    """The commit evalkit ran from, when it ran from a git checkout."""
    lm_eval_version: str | None = None
    python: str | None = None
    host: HostInfo | None = None
    gpus: dict[str, Any] | None = None
    """The GPUs of the box (evalkit/devices/model.py `Inventory`): vendor, driver, runtime (CUDA or
    ROCm) and its version, count, per device index, uuid, name, total_mib; absent without a GPU tool."""
    started_at: str | None = None
    """UTC start of the first driver."""
    finished_at: str | None = None
    """UTC end of the last driver; None while running."""
    resumed_at: list[str] = []
    """UTC start of each `--resume`; absent for a run never resumed."""
