"""Run a matrix: for each cell, start its engine, run the evals, store the results, stop it.

Data flows one way: config -> cells -> engine process -> evals -> results store -> verdicts.
A cell that fails (engine crash, timeout, fatal log line, eval error) becomes that cell's error
and the matrix goes on; Ctrl-C stops the engine, keeps finished cells and marks the run
interrupted so `--resume` can finish it.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import evalkit
from evalkit.config import MatrixConfig
from evalkit.engine import EngineProcess, free_port
from evalkit.errors import EngineError, EvalError, Interrupted, PortInUse
from evalkit.evals import registry
from evalkit.evals.base import EvalContext, EvalResult
from evalkit.evals.lm_eval_adapter import lm_eval_version
from evalkit.matrix import Cell
from evalkit.engine.launch import PORT_PLACEHOLDER, CellLaunch, build_launch
from evalkit.redact import redact_env, scrub, scrub_file, secret_values
from evalkit.engine.sources import ResolvedSource, checkout
from evalkit.run.scheduler import WAIT_SLICE_S, DevicePool, device_need
from evalkit.store import RunStore, write_jsonl

PORT_ATTEMPTS = 3
FINISHED = ("ok", "error")
TASK_DIR = "lm_eval_tasks"
"""A cell with one of these statuses in its cell.json is not run again by --resume."""


class Progress(Protocol):
    """Where the runner reports what each cell is doing (plain lines, a live table, nothing)."""

    def update(self, cell_id: str, state: str, detail: str = "") -> None: ...


@dataclass
class RunOptions:
    results_dir: Path
    cache_dir: Path
    run_id: str
    limit: int | None = None
    base_url: str | None = None
    """Evaluate a server that is already running (one cell, no engine started)."""
    command_line: list[str] = field(default_factory=list)
    max_parallel: int = 1
    """Cells side by side, when the config declares devices."""
    resume: bool = False
    """Continue the run `run_id`: cells already finished are kept, the others run."""
    only: list[str] = field(default_factory=list)
    executor: str = "local"
    """`local` (this machine) or `slurm` (one job per cell)."""


@contextmanager
def _interrupts_raise() -> Iterator[None]:
    """Turn SIGTERM into the same clean stop as Ctrl-C, so `finally` blocks stop the engines."""

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _git_sha(path: Path) -> str | None:
    """The commit evalkit itself runs from, when it runs from a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def prepare_sources(cells: list[Cell], cache_dir: Path) -> dict[str, ResolvedSource]:
    """Check out every cell's source before any engine starts; a bad ref fails the whole run now."""
    resolved: dict[str, ResolvedSource] = {}
    by_source: dict[tuple[str, str], ResolvedSource] = {}
    for cell in cells:
        if cell.source is None:
            continue
        key = (cell.source.repo, cell.source.ref)
        if key not in by_source:
            by_source[key] = checkout(cell.source, cache_dir)
        resolved[cell.id] = by_source[key]
    return resolved


@dataclass
class CellControl:
    """Shared between the main thread and one cell's worker: stop it, or budget it."""

    stop: threading.Event
    budget_s: float | None = None
    engine: EngineProcess | None = None
    over_budget: bool = False
    _timer: threading.Timer | None = None

    def attach(self, engine: EngineProcess) -> None:
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


def run_cell(
    config: MatrixConfig,
    cell: Cell,
    store: RunStore,
    options: RunOptions,
    source: ResolvedSource | None,
    task_dir: Path,
    progress: Progress,
    control: CellControl,
    devices: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """Run one cell end to end and return its record (also written as cell.json).

    A cell stopped because the run was interrupted writes no cell.json: `--resume` runs it again.
    """
    cell_dir = store.cell_dir(cell.id)
    cell_dir.mkdir(parents=True, exist_ok=True)
    secrets = secret_values({**os.environ, **cell.env}, config.secret_env)
    record: dict[str, Any] = {
        "id": cell.id,
        "axes": cell.axes,
        "status": "running",
        "started_at": _now(),
        "source": {"repo": source.repo, "ref": source.ref, "sha": source.sha} if source else None,
        "devices": list(devices) if devices else None,
        "timings": {},
        "metrics": {},
    }
    timings = record["timings"]
    started = time.monotonic()
    control.start_budget()
    try:
        if options.base_url:
            record["launch"] = {"base_url": options.base_url, "note": "external server: not started by evalkit"}
            _run_evals(config, cell, options.base_url, store, options, task_dir, progress, record, token_ids=False)
        else:
            _run_with_engine(config, cell, store, options, source, task_dir, progress, record, control, devices)
        record["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - any failure is this cell's error; the matrix goes on
        record["status"] = "error"
        message = str(e) if isinstance(e, (EngineError, EvalError)) else f"internal error: {type(e).__name__}: {e}"
        if not isinstance(e, (EngineError, EvalError)):
            record["traceback"] = scrub(traceback.format_exc(), secrets)
        if control.over_budget:
            message = f"over the cell budget of {control.budget_s:g} s (stopped): {message}"
        record["error"] = {
            "type": type(e).__name__,
            "message": scrub(message, secrets),
            "exit_code": getattr(e, "exit_code", None),
            "log_tail": scrub(getattr(e, "log_tail", ""), secrets),
        }
    finally:
        control.cancel()
        if control.stop.is_set() and record["status"] != "ok":
            record["status"] = "interrupted"
        timings["total_s"] = round(time.monotonic() - started, 3)
        record["finished_at"] = _now()
        if record["status"] in FINISHED:
            store.write_cell(cell.id, record)
        progress.update(cell.id, record["status"], (record.get("error") or {}).get("message", ""))
    return record


def _run_with_engine(
    config: MatrixConfig, cell: Cell, store: RunStore, options: RunOptions, source: ResolvedSource | None,
    task_dir: Path, progress: Progress, record: dict[str, Any], control: CellControl,
    devices: tuple[int, ...] | None,
) -> None:
    timings = record["timings"]
    log_path = store.cell_dir(cell.id) / "engine.log"
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = config.engine.port or _ports.take(config.engine.host)
        launch = build_launch(config, cell, port, source.worktree if source else None, devices)
        record["launch"] = launch.display(config.secret_env)
        progress.update(cell.id, "starting", f"port {port}" + (f" devices {','.join(map(str, devices))}" if devices else ""))
        t0 = time.monotonic()
        engine = _engine_for(launch, config, log_path)
        try:
            with engine:
                control.attach(engine)
                record["engine_pid"] = engine.pid
                ready = engine.wait_ready(config.timeouts.startup, config.timeouts.warmup)
                timings["engine_start_s"] = ready.health_s
                timings["engine_ready_s"] = ready.warmup_s
                timings["warmup_attempts"] = ready.warmup_attempts
                record["effective_mode"] = engine.effective_mode()
                progress.update(cell.id, "ready", f"in {ready.warmup_s:.1f} s")
                try:
                    _run_evals(config, cell, launch.base_url, store, options, task_dir, progress, record,
                               token_ids=launch.profile.supports_token_ids)
                except EvalError as e:
                    engine.check_alive()  # an engine that died or hung mid-eval is the real reason
                    e.log_tail = engine.log_tail()
                    raise
                t_stop = time.monotonic()
            timings["engine_stop_s"] = round(time.monotonic() - t_stop, 3)
            return
        except PortInUse:
            if config.engine.port or attempt == PORT_ATTEMPTS or control.stop.is_set():
                raise
            progress.update(cell.id, "starting", f"port {port} taken, retrying")
        finally:
            timings.setdefault("engine_wall_s", round(time.monotonic() - t0, 3))
            scrub_file(log_path, secret_values({**os.environ, **launch.env}, config.secret_env))


class _PortBook:
    """Free ports handed out by this process, never twice (cells start side by side)."""

    def __init__(self) -> None:
        self._given: set[int] = set()
        self._lock = threading.Lock()

    def take(self, host: str) -> int:
        with self._lock:
            while True:
                port = free_port(host)
                if port not in self._given:
                    self._given.add(port)
                    return port


_ports = _PortBook()


def _engine_for(launch: CellLaunch, config: MatrixConfig, log_path: Path) -> EngineProcess:
    return EngineProcess(
        argv=launch.argv,
        env={**os.environ, **launch.env},
        log_path=log_path,
        base_url=launch.base_url,
        served_name=config.served,
        health_path=launch.health_path,
        fatal_patterns=launch.fatal_patterns,
        effective_mode_pattern=launch.profile.effective_mode_pattern,
        stop_grace_s=config.timeouts.stop_grace,
        hang_timeout_s=config.timeouts.hang,
    )


def _run_evals(
    config: MatrixConfig, cell: Cell, base_url: str, store: RunStore, options: RunOptions, task_dir: Path,
    progress: Progress, record: dict[str, Any], token_ids: bool,
) -> None:
    """Every enabled eval against one running server, in registry order; each writes its samples
    beside cell.json and its raw metrics under its name."""
    timings, metrics = record["timings"], record["metrics"]
    cell_dir = store.cell_dir(cell.id)
    earlier: dict[str, EvalResult] = {}
    for ev, settings in registry.enabled(config.evals):
        progress.update(cell.id, ev.name)
        ctx = EvalContext(base_url=base_url, served_name=config.served, cell_dir=cell_dir, run_dir=store.path,
                          limit=options.limit, token_ids=token_ids,
                          status=lambda state, detail: progress.update(cell.id, state, detail), earlier=dict(earlier))
        t = time.monotonic()
        result = ev.run(ctx, settings)
        timings[f"{ev.name}_s"] = round(time.monotonic() - t, 3)
        write_jsonl(cell_dir / ev.samples_file, result.samples)
        metrics[ev.name] = result.metrics
        earlier[ev.name] = result


def redacted_snapshot(config: MatrixConfig) -> dict[str, Any]:
    """The config as stored in run.json: every secret-looking env value replaced."""
    snapshot = config.model_dump(mode="json")
    snapshot["engine"]["env"] = redact_env(config.engine.env, config.secret_env)
    for values in snapshot["axes"].values():
        for value in values.values():
            value["env"] = redact_env(value["env"], config.secret_env)
    return snapshot


def run_info(config: MatrixConfig, config_path: Path, options: RunOptions, cells: list[Cell]) -> dict[str, Any]:
    """run.json: enough to know exactly what ran, where, with which versions; secrets redacted."""
    snapshot = redacted_snapshot(config)
    return {
        "run_id": options.run_id,
        "status": "running",
        "model": config.model,
        "served_name": config.served,
        "engine": config.engine.profile,
        "simulated": config.engine.profile == "sim",
        "config_path": str(config_path.resolve()),
        "config": snapshot,
        "cells": [c.id for c in cells],
        "limit": options.limit,
        "only": options.only,
        "base_url": options.base_url,
        "listen_host": config.engine.host,
        "command": options.command_line,
        "evalkit_version": evalkit.__version__,
        "evalkit_git_sha": _git_sha(Path(evalkit.__file__).resolve().parent.parent),
        "lm_eval_version": lm_eval_version(),
        "python": sys.version.split()[0],
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "started_at": _now(),
        "finished_at": None,
    }


def run_matrix(
    config: MatrixConfig,
    config_path: Path,
    cells: list[Cell],
    options: RunOptions,
    progress: Progress,
    on_cell_done: Callable[[dict[str, Any]], None] | None = None,
) -> RunStore:
    """Run every cell not finished yet; returns the store. Raises Interrupted on Ctrl-C/SIGTERM,
    after stopping every engine (or cancelling every job) and marking the run interrupted."""
    pool = DevicePool(config.devices.count if config.devices else None, options.max_parallel)
    for cell in cells:
        pool.check(cell.id, device_need(cell.settings))
        if not options.base_url:
            build_launch(config, cell, PORT_PLACEHOLDER)  # a profile or setting error is bad input, now
    sources = {} if options.base_url else prepare_sources(cells, options.cache_dir)
    evals = registry.enabled(config.evals)
    for ev, settings in evals:
        ev.check(settings)
    store = RunStore(options.results_dir, options.run_id)
    if options.resume:
        info = store.read_run()
        info.setdefault("resumed_at", []).append(_now())
        todo = [c for c in cells if (store.read_cell(c.id) or {}).get("status") not in FINISHED]
    else:
        store.create()
        info = run_info(config, config_path, options, cells)
        todo = cells
    info["status"] = "running"
    store.write_run(info)
    for ev, settings in evals:
        ev.prepare(store.path, settings)
    for cell in todo:
        progress.update(cell.id, "waiting")
    try:
        with _interrupts_raise():
            if options.executor == "slurm":
                from evalkit.run.slurm import run_on_slurm

                run_on_slurm(config, store, todo, options, progress, on_cell_done)
            else:
                _run_local(config, store, todo, options, progress, on_cell_done, sources, pool)
        info["status"] = "complete"
    except (KeyboardInterrupt, Interrupted):
        info["status"] = "interrupted"
        raise Interrupted("run interrupted") from None
    finally:
        info["finished_at"] = _now()
        store.write_run(info)
    return store


def _run_local(
    config: MatrixConfig, store: RunStore, todo: list[Cell], options: RunOptions, progress: Progress,
    on_cell_done: Callable[[dict[str, Any]], None] | None, sources: dict[str, ResolvedSource], pool: DevicePool,
) -> None:
    """Cells on this machine: worker threads, started in plan order as devices free up."""
    stop = threading.Event()
    controls: dict[str, CellControl] = {}
    workers: list[threading.Thread] = []
    deadline = time.monotonic() + config.timeouts.run if config.timeouts.run else None
    task_dir = store.path / TASK_DIR

    def worker(cell: Cell, devices: tuple[int, ...], control: CellControl) -> None:
        try:
            record = run_cell(config, cell, store, options, sources.get(cell.id), task_dir, progress, control,
                              devices if config.devices else None)
            if on_cell_done and record["status"] in FINISHED:
                on_cell_done(record)
        finally:
            pool.release(devices)

    try:
        for cell in todo:
            while (devices := pool.try_acquire(device_need(cell.settings))) is None:
                pass
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                pool.release(devices)
                _skip(store, cell, "the run budget was used up before this cell started", progress)
                continue
            budgets = [b for b in (config.timeouts.cell, remaining) if b is not None]
            control = CellControl(stop, min(budgets) if budgets else None)
            controls[cell.id] = control
            thread = threading.Thread(target=worker, args=(cell, devices, control), name=cell.id, daemon=True)
            thread.start()
            workers.append(thread)
        for thread in workers:
            while thread.is_alive():
                thread.join(WAIT_SLICE_S)
    except (KeyboardInterrupt, Interrupted):
        _stop_all(stop, controls, workers)
        raise


def run_one_cell(results_dir: Path, run_id: str, cell_id: str, cache_dir: Path, progress: Progress) -> dict[str, Any]:
    """Run one cell of an existing run (what a Slurm job does), writing its cell.json.

    The config is re-read from the run's config path and must match the run's snapshot, so a job
    never runs a different experiment than the run it belongs to.
    """
    from evalkit.config import load_config
    from evalkit.errors import ConfigError
    from evalkit.matrix import expand

    store = RunStore(results_dir, run_id)
    info = store.read_run()
    config = load_config(Path(info["config_path"]))
    if redacted_snapshot(config) != info["config"]:
        raise ConfigError(f"{info['config_path']}: changed since run {run_id} started")
    cell = next((c for c in expand(config) if c.id == cell_id), None)
    if cell is None:
        raise ConfigError(f"cell {cell_id!r} is not a cell of run {run_id}")
    source = prepare_sources([cell], cache_dir).get(cell.id)
    options = RunOptions(results_dir=results_dir, cache_dir=cache_dir, run_id=run_id, limit=info.get("limit"))
    control = CellControl(threading.Event(), config.timeouts.cell)
    with _interrupts_raise():
        try:
            return run_cell(config, cell, store, options, source, store.path / TASK_DIR, progress, control)
        except (KeyboardInterrupt, Interrupted):
            control.stop.set()
            if control.engine is not None:
                control.engine.stop()
            raise


def _skip(store: RunStore, cell: Cell, reason: str, progress: Progress) -> None:
    store.write_cell(cell.id, {"id": cell.id, "axes": cell.axes, "status": "skipped", "error": {"message": reason},
                               "timings": {}, "metrics": {}, "finished_at": _now()})
    progress.update(cell.id, "skipped", reason)


def _stop_all(stop: threading.Event, controls: dict[str, CellControl], workers: list[threading.Thread]) -> None:
    """Stop every engine at once (in parallel: each may need its SIGKILL grace), then the workers."""
    stop.set()
    stoppers = [threading.Thread(target=c.engine.stop, daemon=True) for c in controls.values() if c.engine]
    for t in stoppers:
        t.start()
    deadline = time.monotonic() + 60
    for t in stoppers + workers:
        t.join(max(0.0, deadline - time.monotonic()))
