"""One cell's lifecycle, the same under every executor: start its engine, run the evals, stop, record.

`run_cell(job, control)` runs one `CellJob` (what to run and where its results go) under one
`CellControl` (the stop and the budget the executor shares with it) and returns its `CellRecord`,
also written as cell.json: each step returns its piece (run/parts.py), kept as it comes, and the
record is assembled from the pieces once, when the cell ends. A failure of the engine (crash,
timeout, fatal log line, hang) or of an eval becomes the cell's error, with every piece kept
before it, and is never raised: the matrix goes on. The engine is the cell's topology
(engine/topology.py): one process for an ordinary cell, every part of a PD or multi-node one,
started, watched and stopped together, the evals against its front. A cell stopped because
the run was interrupted writes no cell.json, so `--resume` runs it again; the stop reaches the
running eval's requests at once (evals/cancel.py: the cell's stop is bound to its thread).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.engine import PORT_PLACEHOLDER, CellLaunch, EngineProcess, PortBook, build_launch
from evalkit.engine.catalog import entry_in_tree
from evalkit.engine.imports import prove
from evalkit.engine.isolation import isolate
from evalkit.engine.placement import Placement
from evalkit.engine.setup import ensure_built, setup_plan
from evalkit.engine.sources import ResolvedSource
from evalkit.engine.topology import PartLaunch, TopologyLaunch, book_ports, build_topology_launch
from evalkit.engine.topology_process import TopologyProcess
from evalkit.errors import EngineError, EvalError, Interrupted, PortInUse, SetupFailed, TreeNotProven
from evalkit.evals import cancel
from evalkit.evals.base import Eval, EvalContext, EvalProgress, EvalResult, Server
from evalkit.profiles import get_profile
from evalkit.redact import scrub, scrub_file, secret_values
from evalkit.run.costs import LaunchClock, devices_held, timed
from evalkit.run.engine_log import applicable, check_log, raise_if_broken, read_ran_as
from evalkit.run.engine_report import check_version
from evalkit.run.gpus import CellGpus
from evalkit.run.options import Progress
from evalkit.run.parts import (
    Begun,
    Catalog,
    CellPart,
    Ended,
    EngineLog,
    EngineStarted,
    EngineStopped,
    Imports,
    Keep,
    Launch,
    Parts,
    Ready,
    Setup,
    assemble,
)
from evalkit.run.wave import run_evals
from evalkit.store import RunStore
from evalkit.store.records import (
    FINISHED,
    CellError,
    CellRecord,
    CellStatus,
    ImportInfo,
    IsolationRecord,
    SetupRecord,
    SourceInfo,
    now,
)

PORT_ATTEMPTS = 3
"""Ports tried per cell when another process takes the chosen one first (`PortInUse`)."""
PORTS = PortBook()
"""Every port this process hands to an engine: cells side by side never get the same one."""
EXTERNAL_NOTE = "external server: not started by evalkit"
ENGINE_CWD = "engine_cwd"
"""The folder of a cell's directory that its engine starts in: empty, evalkit's own, never a
checkout (engine/launch.py says why). Whatever the engine writes there stays with the cell."""


@dataclass(frozen=True)
class CellJob:
    """One cell to run: the cell, its config, where its results go and what it may use."""

    config: MatrixConfig
    cell: Cell
    store: RunStore
    progress: Progress
    limit: int | None = None
    """At most this many questions or prompts per eval (`--limit`)."""
    base_url: str | None = None
    """An external server to evaluate instead of starting the cell's engine."""
    source: ResolvedSource | None = None
    """The checked-out engine source tree, when the cell has one."""
    devices: tuple[int, ...] | None = None
    """The device ids the executor gave the cell, when the config declares devices."""
    placement: Placement | None = None
    """Where the cell's parts run (engine/placement.py); None: every node is this machine."""

    @property
    def cell_dir(self) -> Path:
        return self.store.cell_dir(self.cell.id)

    def update(self, state: str, detail: str = "") -> None:
        self.progress.update(self.cell.id, state, detail)

    def eval_context(self, server: Server, ev: Eval, only: tuple[str, ...] | None = None,
                     earlier: dict[str, EvalResult] | None = None) -> EvalContext:
        """What `ev` runs with on this cell's `server`: the one place its progress is bound to
        the cell's line of the live view, and `--limit` handed over."""
        return EvalContext(server, self.cell_dir, self.store.path, limit=self.limit,
                           progress=EvalProgress(self.update, ev.name), earlier=earlier or {}, only=only)


@dataclass
class CellControl:
    """Shared between the executor and one cell's worker: stop it, or budget it."""

    stop: cancel.Stop
    """Set when the run is interrupted: the running eval is cancelled, the cell's outcome is
    `interrupted`, never written."""
    budget_s: float | None = None
    """Seconds the cell may take (`timeouts.cell`, or what is left of `timeouts.run`)."""
    engine: TopologyProcess | None = None
    over_budget: bool = False
    _timer: threading.Timer | None = None

    def attach(self, engine: TopologyProcess) -> None:
        """The engine a stop or the budget must end (stopped at once if the run already stops)."""
        self.engine = engine
        if self.stop.is_set():
            engine.stop()

    def start_budget(self) -> None:
        if self.budget_s is not None:
            self._timer = threading.Timer(self.budget_s, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        self.over_budget = True
        if self.engine is not None:
            self.engine.stop()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


EvalsBody = Callable[["CellJob", Server], Iterable[CellPart]]
"""What runs against the ready server: (job, the server) -> the record's pieces, each returned
the moment it is done (so an eval that fails keeps the ones before it); it writes the samples.
`run/wave.run_evals` for a matrix cell (its evals in one wave or apart); a bisect step runs its batches (evalkit/bisect/step.py) through
the same lifecycle."""


def run_cell(job: CellJob, control: CellControl, body: EvalsBody | None = None) -> CellRecord:
    """Run one cell end to end and return its record (also written as cell.json when finished).

    `body` runs against the ready server (default: every enabled eval, `run/wave.run_evals`). Each step
    returns its piece of the record (run/parts.py); the pieces kept when the cell ends, however it
    ends, are assembled into the record once."""
    body = body or run_evals
    job.cell_dir.mkdir(parents=True, exist_ok=True)
    secrets = secret_values({**os.environ, **job.cell.env}, job.config.secret_env)
    source = job.source
    started = time.monotonic()
    begun = Begun(started_at=now(), source=SourceInfo(repo=source.repo, ref=source.ref, sha=source.sha) if source else None,
                  devices=list(job.devices) if job.devices else None, clock=started,
                  held=devices_held(job.cell, job.devices))
    parts: list[CellPart] = []
    status: CellStatus = "running"
    error, trace = None, None
    control.start_budget()
    try:
        with cancel.bound(control.stop):
            _run(job, control, body, parts.append)
        status = "ok"
    except Interrupted:
        if not control.stop.is_set():
            raise  # a signal in this very thread (a Slurm job's cell, a bisect): its caller stops the engine
        # else the run's stop cancelled this cell's eval: the cell is `interrupted` (below), the worker ends quietly
    except Exception as e:  # noqa: BLE001 - any failure is this cell's error; the matrix goes on
        expected = isinstance(e, (EngineError, EvalError))
        trace = None if expected else scrub(traceback.format_exc(), secrets)
        error, status = _error_of(e, expected, secrets, control), "error"
    finally:
        control.cancel()
        if control.stop.is_set() and status != "ok":
            status = "interrupted"
        record = assemble(job.cell, begun, parts, Ended(status, round(time.monotonic() - started, 3), now(),
                                                        error, trace))
        if record.status in FINISHED:
            job.store.write_cell(job.cell.id, record.dump())
        job.update(record.status, record.message)
    return record


def _run(job: CellJob, control: CellControl, body: EvalsBody, keep: Keep) -> None:
    """The cell's steps: its external server's version, or its source's build and its engine; then `body`."""
    if job.base_url:
        keep(Launch({"base_url": job.base_url, "note": EXTERNAL_NOTE}))
        keep(check_version(job.base_url, get_profile(job.config.engine.profile), job.source, None, job.cell.id,
                           job.progress, plugin=job.config.engine.plugin))
        wire = get_profile(job.config.engine.profile).wire(token_ids=False)
        with timed(keep, "evals", "evals"):
            for part in body(job, Server(job.base_url, job.config.served, wire)):
                keep(part)
    else:
        _build_source(job, control, keep)
        _run_with_engine(job, control, body, keep)


def _error_of(e: Exception, expected: bool, secrets: list[str], control: CellControl) -> CellError:
    """The cell's error: the engine's or eval's own message, or an internal error named as one."""
    message = str(e) if expected else f"internal error: {type(e).__name__}: {e}"
    if control.over_budget:
        message = f"over the cell budget of {control.budget_s:g} s (stopped): {message}"
    return CellError(type=type(e).__name__, message=scrub(message, secrets), exit_code=getattr(e, "exit_code", None),
                     log_tail=scrub(getattr(e, "log_tail", ""), secrets))


def _build_source(job: CellJob, control: CellControl, keep: Keep) -> None:
    """Run the source tree's setup step unless its worktree is already built (engine/setup.py);
    a failure is this cell's error with the setup recorded (its log path)."""
    setup = job.cell.source.setup if job.cell.source else None
    if job.source is None or not setup:
        return
    plan = setup_plan(setup, job.source.worktree, job.config.engine.python or sys.executable)
    job.update("building", "" if plan.built else f"setup, log {plan.log}")
    with timed(keep, "setup", "setup"):
        try:
            keep(Setup(SetupRecord.model_validate(ensure_built(plan, job.source, control.stop))))
        except SetupFailed as e:
            keep(Setup(SetupRecord.model_validate(e.info)))
            raise


def _run_with_engine(job: CellJob, control: CellControl, body: EvalsBody, keep: Keep) -> None:
    """Start the cell's topology (other ports if one is lost to a race), run the evals against
    its front, stop every part."""
    config = job.config
    log_path = job.cell_dir / "engine.log"
    cwd = (job.cell_dir / ENGINE_CWD).resolve()
    cwd.mkdir(parents=True, exist_ok=True)
    worktree = job.source.worktree if job.source else None
    catalog = entry_in_tree(config, job.cell, job.source)
    keep(Catalog(catalog.record() if catalog else None))
    imports = _prove_tree(job, build_launch(config, job.cell, PORT_PLACEHOLDER, worktree, job.devices, cwd=cwd,
                                            catalog=catalog), keep)
    gpus = CellGpus(config, job.devices)
    for attempt in range(1, PORT_ATTEMPTS + 1):
        planned = build_topology_launch(config, job.cell, book_ports(PORTS, config.engine.port), worktree, job.devices,
                                        cwd=cwd, catalog=catalog, placement=job.placement)
        single = planned.topology.kind == "single"
        isolation = {p.name: isolate(p.launch, config, PORTS, job.cell_dir if single else job.cell_dir / "parts" / p.name,
                                     job.store.results_dir, job.source.sha if job.source else None)
                     for p in planned.parts if p.part.role != "router"}  # a router has no engine caches or ports
        topology = TopologyLaunch(planned.topology, tuple(
            dataclasses.replace(p, launch=isolation[p.name].launch) if p.name in isolation else p for p in planned.parts))
        isolated = isolation[topology.primary.name]
        served = False  # whether a keyed cache folder was filled by an engine that became ready
        launch, front = topology.primary.launch, topology.front.launch
        keep(Launch(topology.display(config.secret_env), IsolationRecord.model_validate(isolated.record)))
        port = front.port
        job.update("starting", ("" if single else f"{len(topology.parts)} parts, front ") + f"port {port}" + (f" devices {','.join(map(str, job.devices))}" if job.devices else ""))
        t0 = time.monotonic()
        clock = LaunchClock(t0)
        engine = TopologyProcess(topology, lambda part: _engine_for(part, config, job.cell_dir, log_path))
        watch = gpus.watch(control.stop)
        try:
            with watch, engine, clock:
                control.attach(engine)
                keep(EngineStarted(engine.pid))
                ready = engine.wait_ready(config.timeouts.startup, config.timeouts.warmup)
                served = True
                keep(Ready(ready.health_s, ready.warmup_s, ready.warmup_attempts))
                log = engine.launch_log()  # read once: an engine's start-up log can run to megabytes
                _read_engine_log(job, launch, log, engine, keep)
                keep(check_version(launch.base_url, launch.profile, job.source, imports, job.cell.id, job.progress,
                                   tree=launch.tree, log_text=log, plugin=job.config.engine.plugin))
                job.update("ready", f"in {ready.warmup_s:.1f} s")
                clock.ready()
                try:
                    with watch.sampling(), timed(keep, "evals", "evals"):
                        for part in body(job, Server(front.base_url, job.config.served, launch.profile.wire())):
                            keep(part)
                except EvalError as e:
                    engine.settle()  # an engine that died or hung mid-eval is the real reason
                    e.log_tail = engine.log_tail()
                    raise
            return
        except PortInUse:
            if config.engine.port or attempt == PORT_ATTEMPTS or control.stop.is_set():
                raise
            job.update("starting", f"port {port} taken, retrying")
        finally:
            if (seen := watch.part()) is not None:
                keep(seen)
            keep(EngineStopped(engine.stop_s, round(time.monotonic() - t0, 3)))
            if not single:
                keep(Parts(engine.records(config.secret_env)))
            for isolated_part in isolation.values():
                isolated_part.finish(served, config.engine.cache_max_gib)
            for placed in topology.parts:
                scrub_file(job.cell_dir / placed.part.log_name,
                           secret_values({**os.environ, **placed.launch.env}, config.secret_env))
            for phase in clock.phases():
                keep(phase)


def _prove_tree(job: CellJob, launch: CellLaunch, keep: Keep) -> ImportInfo | None:
    """Before the engine starts, ask its own interpreter, with its environment and working
    directory, where its package imports from, and keep the answer; for a cell with a source
    tree, an answer outside the tree fails the cell now (`TreeNotProven`): the engine would run
    other code than the cell's commit, and both sides of an A/B could run the same."""
    if launch.package is None:
        return None
    proof = prove(launch.python, launch.package, {**os.environ, **launch.env}, launch.cwd)
    outside = proof.outside(launch.tree) if launch.tree is not None else None
    within = {} if launch.tree is None else {"tree": str(launch.tree), "inside": outside is None}
    imports = ImportInfo(package=proof.package, origin=proof.origin, error=proof.error, **within)
    keep(Imports(imports))
    if outside is not None:
        sha = job.source.sha[:12] if job.source else "?"
        raise TreeNotProven(f"engine package {proof.package!r} would import from {outside}, not from the cell's "
                            f"source tree {launch.tree} ({sha}): the engine was not started; set engine.package "
                            "to the package the tree holds (a plugin or a fix module, not the engine), or the "
                            "source's subdir to the folder it lives in")
    return imports


def _engine_for(part: PartLaunch, config: MatrixConfig, cell_dir: Path, log_path: Path) -> EngineProcess:
    """One part's process: its argv as its node starts it, its own log (the one engine's `engine.log`)."""
    launch = part.launch
    return EngineProcess(
        argv=part.start,
        env={**os.environ, **launch.env},
        log_path=log_path if part.part.role == "engine" else cell_dir / part.part.log_name,
        readiness=part.readiness,  # type: ignore[arg-type]
        base_url=launch.base_url,
        served_name=config.served,
        health_path=launch.health_path,
        fatal_patterns=launch.fatal_patterns,
        stop_grace_s=config.timeouts.stop_grace,
        hang_timeout_s=config.timeouts.hang,
        cwd=launch.cwd,
        ask_stop=part.ask_stop,
        cpus=launch.cpus,
    )


def _read_engine_log(job: CellJob, launch: CellLaunch, log: str, engine: TopologyProcess, keep: Keep) -> None:
    """What the ready engine's log proves (run/engine_log.py): the mode and layout it ran, a
    `warning` in the live progress at once when they are not what the cell asked, and the
    config's log assertions, a broken one failing the cell (once kept) before any eval runs."""
    ran_as = read_ran_as(launch.profile, log, launch.cell)  # with what the catalog's entry asked
    if ran_as is not None and ran_as.agrees is False:
        job.update("warning", f"engine ran {'; '.join(ran_as.disagreements)}")
    assertions = applicable(job.config, job.cell)
    checks = check_log(log, assertions) if assertions else None
    keep(EngineLog(ran_as, checks))
    if checks is not None:
        raise_if_broken(checks, engine.log_tail())
