"""A cell's record, piece by piece: each step of the cell's lifecycle returns what it found as one
small frozen piece, and `assemble` alone turns the pieces into the `CellRecord` (cell.json).

Why pieces: the steps (the source's build, the tree's proof, each engine launch, the engine's log,
its version, each eval, each eval's scrapes, the GPUs around the engine, a bisect step's verdict)
live in different modules; when each wrote into one shared record, any of them could overwrite
another's fields and the record's shape was spread over all of them. Now a step's module only
says what it found, and this one function says where it goes in cell.json.

The lifecycle (run/cell.py) keeps the pieces in the order they were returned, so a cell that fails
half-way, or whose evals raise, still has every piece that finished: `assemble` of what was kept
is the record of the cell so far. The order matters where pieces meet in one mapping: `timings`
keeps its keys in the order the phases ended (start, ready, each eval, GPU release, stop), and a
later engine launch (another port after a lost race) replaces the earlier launch's pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from evalkit.store.costs import PhaseKind, Span, cell_cost
from evalkit.store.records import (
    CellError,
    CellLike,
    CellRecord,
    CellStatus,
    EngineCheck,
    GpuRecord,
    ImportInfo,
    IsolationRecord,
    LogCheck,
    RanAsRecord,
    SetupRecord,
    SourceInfo,
    failed_cell,
)


@dataclass(frozen=True)
class Begun:
    """The cell as it starts: when, which source tree, which devices."""

    started_at: str
    source: SourceInfo | None
    devices: list[int] | None
    clock: float | None = None
    """`time.monotonic()` at the start: what each `Phase` is measured from (None: no cost recorded)."""
    held: tuple[int, str] = (1, "one device: the cell declares none")
    """The devices the cell holds, and where that count came from (run/costs.py `devices_held`)."""


@dataclass(frozen=True)
class Setup:
    """The source tree's setup step (built, reused, or failed: the failure is still recorded)."""

    setup: SetupRecord


@dataclass(frozen=True)
class Catalog:
    """The engine CI catalog's entry the launch was taken from; None: the cell uses none."""

    entry: dict[str, Any] | None


@dataclass(frozen=True)
class Imports:
    """Where the engine's package imports from, asked before it starts."""

    imports: ImportInfo


@dataclass(frozen=True)
class Launch:
    """What was started (or, for an external server, where it is) and what isolated it."""

    launch: dict[str, Any]
    isolation: IsolationRecord | None = None
    """None for an external server: evalkit started nothing to isolate."""


@dataclass(frozen=True)
class EngineStarted:
    """The engine process is running (it may not become ready)."""

    pid: int | None


@dataclass(frozen=True)
class Ready:
    """The engine answered: seconds to health, to a served warm-up, and the warm-up's attempts."""

    engine_start_s: float | None
    engine_ready_s: float | None
    warmup_attempts: int


@dataclass(frozen=True)
class EngineLog:
    """What the ready engine's log says it ran, and the config's log assertions checked on it."""

    ran_as: RanAsRecord | None
    """None: the profile cannot read its engine's log (recorded as such)."""
    log_checks: list[LogCheck] | None
    """None: no assertion applies to the cell (then cell.json has no `log_checks`)."""


@dataclass(frozen=True)
class EngineVersion:
    """The engine's version endpoint and the check of which tree it ran (run/engine_report.py)."""

    asked: bool
    """Whether the profile has a version endpoint (then `engine_version` is recorded, even None)."""
    version: str | None = None
    check: EngineCheck | None = None


@dataclass(frozen=True)
class EvalRun:
    """One eval's raw metrics and wall time (a bisect step returns one per batch: the metrics of
    everything asked so far, replacing the last)."""

    name: str
    metrics: dict[str, Any]
    wall_s: float


@dataclass(frozen=True)
class Scraped:
    """What the engine's `/metrics` (or log) counted during one eval, and the client's throughput."""

    name: str
    figures: dict[str, Any]
    throughput: dict[str, Any]


@dataclass(frozen=True)
class Gpus:
    """The engine's GPUs (run/gpus.py): UUIDs and memory before it started, telemetry while the
    evals ran (when they did) and the wait for its memory after it stopped."""

    uuids: list[str]
    before_mib: dict[str, int]
    telemetry: dict[str, Any] | None = None
    """None: no eval ran under the sampler (the engine never became ready)."""
    release: dict[str, Any] | None = None
    release_wait_s: float | None = None


@dataclass(frozen=True)
class EngineStopped:
    """One engine launch ended: its stop's seconds (None: it was never stopped by evalkit) and
    its whole wall time, from the launch."""

    stop_s: float | None
    wall_s: float


@dataclass(frozen=True)
class Phase:
    """One phase's span, in `time.monotonic()` seconds: the source's build, the engine's start-up
    (launch to serving), the body that ran the evals (`evals`), each eval inside it (`eval`: one
    after another, or at once in a wave), the teardown (stop, GPU release). cell.json `cost` is
    built from them (store/costs.py)."""

    name: str
    kind: PhaseKind
    start: float
    end: float


@dataclass(frozen=True)
class Parts:
    """Every part of a topology cell (engine/topology.py `TopologyProcess.records`): its role,
    node, argv and ports, pid, seconds to ready and to stop, exit code, its log and, when it
    failed or the cell did, its log's tail, and what its `/metrics` counted (cell.json `parts`)."""

    parts: list[dict[str, Any]]


@dataclass(frozen=True)
class Step:
    """A bisect step's verdict, counts and evidence (bisect/step.py): cell.json `step`."""

    step: dict[str, Any]


CellPart = (Setup | Catalog | Imports | Launch | EngineStarted | Ready | EngineLog | EngineVersion | EvalRun
            | Scraped | Gpus | EngineStopped | Phase | Parts | Step)
Keep = Callable[[CellPart], None]
"""How the lifecycle keeps a piece the moment a step returns it."""


@dataclass(frozen=True)
class Ended:
    """How the cell ended: its status, its error (and, for a bug, the traceback), its seconds."""

    status: CellStatus
    total_s: float
    finished_at: str
    error: CellError | None = None
    traceback: str | None = None


def assemble(cell: CellLike, begun: Begun, parts: Iterable[CellPart], ended: Ended) -> CellRecord:
    """The cell's record from its pieces, in the order they were kept; the one place that knows
    which piece is which field of cell.json. A field no piece gave is left out of the file."""
    timings: dict[str, int | float | None] = {}
    metrics: dict[str, Any] = {}
    spans: list[Span] = []
    fields: dict[str, Any] = {"started_at": begun.started_at, "source": begun.source, "devices": begun.devices,
                              "timings": timings, "metrics": metrics}
    for part in parts:
        match part:
            case Setup(setup):
                fields["setup"] = setup
            case Catalog(entry):
                fields["catalog"] = entry
            case Imports(imports):
                fields["imports"] = imports
            case Launch(launch, isolation):
                fields["launch"] = launch
                if isolation is not None:
                    fields["isolation"] = isolation
            case EngineStarted(pid):
                fields["engine_pid"] = pid
            case Ready():
                timings.update(engine_start_s=part.engine_start_s, engine_ready_s=part.engine_ready_s,
                               warmup_attempts=part.warmup_attempts)
            case EngineLog(ran_as, log_checks):
                fields["ran_as"] = ran_as
                if ran_as is not None:
                    fields["effective_mode"] = ran_as.mode  # kept for history and old readers
                if log_checks is not None:
                    fields["log_checks"] = log_checks
            case EngineVersion(asked, version, check):
                if asked:
                    fields["engine_version"] = version
                if check is not None:
                    fields["engine_check"] = check
            case EvalRun(name, found, wall_s):
                timings[f"{name}_s"] = wall_s
                metrics[name] = found
            case Scraped(name, figures, speed):
                fields.setdefault("engine_metrics", {})[name] = figures
                fields.setdefault("throughput", {})[name] = speed
            case Gpus():
                fields["gpu"] = _gpu_record(part)
                if part.release is not None:
                    timings["gpu_release_s"] = part.release_wait_s
            case EngineStopped(stop_s, wall_s):
                if stop_s is not None:  # the GPUs' memory wait after it is timed on its own, gpu_release_s
                    timings["engine_stop_s"] = stop_s
                timings.setdefault("engine_wall_s", wall_s)  # the first launch's, when a lost port retried
            case Phase(name, kind, start, end) if begun.clock is not None:
                spans.append(Span(name=name, kind=kind, start_s=round(start - begun.clock, 3),
                                  end_s=round(end - begun.clock, 3)))
            case Parts(found):
                fields["parts"] = found  # an extra key of CellRecord: only topology cells carry it
            case Step(step):
                fields["step"] = step  # an extra key of CellRecord: only bisect steps carry it
    timings["total_s"] = ended.total_s
    if begun.clock is not None:
        fields["cost"] = cell_cost(*begun.held, ended.total_s, spans)
    fields["finished_at"] = ended.finished_at
    if ended.error is None:
        return CellRecord(id=cell.id, axes=dict(cell.axes), status=ended.status, **fields)
    if ended.traceback is not None:
        fields["traceback"] = ended.traceback
    failed = failed_cell(cell, ended.error, **fields)
    failed.status = ended.status  # `interrupted` when the run's stop is what failed it
    return failed


def _gpu_record(part: Gpus) -> GpuRecord:
    """cell.json `gpu`: `telemetry` and `release` only when they were measured."""
    measured = {"telemetry": part.telemetry} if part.telemetry is not None else {}
    if part.release is not None:
        measured["release"] = part.release
    return GpuRecord(uuids=part.uuids, before_mib=part.before_mib, **measured)
