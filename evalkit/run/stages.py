"""A run of planned cells, in two steps: `prepare` checks everything, `execute` runs it.

`prepare` finds every mistake that is the input's before anything exists: a cell needing more
devices than declared, a setting the engine's profile does not know, a source ref that does not
resolve (every source is checked out now), an eval that cannot run, and whatever the executor
refuses (`Executor.preflight`). `execute` then creates the run folder (or reopens it for
`--resume`, keeping the finished cells), writes run.json as `running`, lets the executor run the
cells, and writes run.json again as `complete` or `interrupted`. The caller takes the device
lock between the two (api/matrix.py).
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import evalkit
from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.engine.catalog import entry_in_tree
from evalkit.engine.sources import ResolvedSource, checkout
from evalkit.engine.topology import build_topology_launch, plan_ports
from evalkit.errors import ConfigError, Interrupted
from evalkit.evals import evalset
from evalkit.evals.base import Eval, EvalSettings
from evalkit.evals.lm_eval_adapter import lm_eval_version
from evalkit.profiles import Profile, get_profile
from evalkit.redact import redact_env
from evalkit.run.executor import Executor, OnCellDone
from evalkit.run.gpus import provenance
from evalkit.run.local import LocalExecutor
from evalkit.run.options import Progress, RunOptions
from evalkit.run.scheduler import DevicePool
from evalkit.run.signals import interrupts_raise
from evalkit.run.slurm import SlurmExecutor
from evalkit.store import RunStore
from evalkit.store.records import FINISHED, CellRecord, HostInfo, RunRecord, now


@dataclass
class PreparedRun:
    """A run whose input passed every check: what `execute` needs, nothing created yet."""

    config: MatrixConfig
    config_path: Path
    cells: list[Cell]
    """Every planned cell, in plan order."""
    todo: list[Cell]
    """The cells still to run (all of them, except on `--resume`)."""
    options: RunOptions
    store: RunStore
    """The run's folder (not created yet for a new run)."""
    profile: Profile
    """The engine's profile (even with `--base-url`: run.json says whether the engine is simulated)."""
    evals: list[tuple[Eval, EvalSettings]]
    executor: Executor
    progress: Progress


def prepare(config: MatrixConfig, config_path: Path, cells: list[Cell], options: RunOptions,
            progress: Progress) -> PreparedRun:
    """Check the plan, check out the sources, check the evals, preflight the executor.

    Raises ConfigError, SourceError or EvalError (bad input) and creates nothing.
    """
    profile = get_profile(config.engine.profile)
    pool = DevicePool(config.devices.count if config.devices else None, 1)
    for cell in cells:
        pool.check(cell.id, cell.topology.devices)
        if not options.base_url:  # a profile, setting or topology error is bad input, now
            build_topology_launch(config, cell, plan_ports)
    sources = {} if options.base_url else prepare_sources(cells, options.cache_dir)
    for cell in cells if not options.base_url else ():  # a catalog without the entry is bad input, now
        entry_in_tree(config, cell, sources.get(cell.id))
    evals = config.evals.enabled()
    evalset.check(evals)
    store = RunStore(options.results_dir, options.run_id)
    todo = [c for c in cells if _unfinished(store, c)] if options.resume else cells
    executor = _executor(config, store, options, progress, sources)
    executor.preflight(todo)
    return PreparedRun(config, config_path, cells, todo, options, store, profile, evals, executor, progress)


def execute(run: PreparedRun, on_cell_done: OnCellDone | None = None) -> RunStore:
    """Run the prepared cells; returns the store. Raises Interrupted on Ctrl-C/SIGTERM, after
    stopping every engine (or cancelling every job) and marking the run interrupted."""
    store, options = run.store, run.options
    if options.resume:
        info = RunRecord.load(store.path / "run.json")
        info.resumed_at = [*info.resumed_at, now()]
    else:
        store.create()
        info = run_info(run)
    info.status = "running"
    store.write_run(info.dump())
    try:
        with interrupts_raise():
            evalset.prepare(run.evals, store.path)
            for cell in run.todo:
                run.progress.update(cell.id, "waiting")
            run.executor.run(run.todo, on_cell_done)
        info.status = "complete"
    except (KeyboardInterrupt, Interrupted):
        info.status = "interrupted"
        raise Interrupted("run interrupted") from None
    finally:
        info.finished_at = now()
        store.write_run(info.dump())
    return store


def _executor(config: MatrixConfig, store: RunStore, options: RunOptions, progress: Progress,
              sources: dict[str, ResolvedSource]) -> Executor:
    if options.executor == "slurm":
        return SlurmExecutor(config, store, options, progress)
    if options.executor == "local":
        return LocalExecutor(config, store, options, progress, sources)
    raise ConfigError(f"executor {options.executor!r}: use local or slurm")


def _unfinished(store: RunStore, cell: Cell) -> bool:
    path = store.cell_dir(cell.id) / "cell.json"
    return not path.is_file() or CellRecord.load(path).status not in FINISHED


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


def redacted_snapshot(config: MatrixConfig) -> dict[str, Any]:
    """The config as stored in run.json: every secret-looking env value replaced."""
    snapshot = config.model_dump(mode="json")
    snapshot["engine"]["env"] = redact_env(config.engine.env, config.secret_env)
    for values in snapshot["axes"].values():
        for value in values.values():
            value["env"] = redact_env(value["env"], config.secret_env)
    return snapshot


def run_info(run: PreparedRun) -> RunRecord:
    """run.json of a new run: what runs, where, with which versions; secrets redacted."""
    config, options = run.config, run.options
    gpus = provenance(config, options.base_url) if options.executor == "local" else None
    return RunRecord(
        run_id=options.run_id,
        status="running",
        model=config.model,
        served_name=config.served,
        engine=config.engine.profile,
        simulated=run.profile.simulated,
        config_path=str(run.config_path.resolve()),
        config=redacted_snapshot(config),
        cells=[c.id for c in run.cells],
        limit=options.limit,
        only=options.only,
        base_url=options.base_url,
        listen_host=config.engine.host,
        command=options.command_line,
        evalkit_version=evalkit.__version__,
        evalkit_git_sha=evalkit_commit(Path(evalkit.__file__).resolve().parent),
        lm_eval_version=lm_eval_version(),
        python=sys.version.split()[0],
        host=HostInfo(hostname=socket.gethostname(), platform=platform.platform(), cpus=os.cpu_count()),
        started_at=now(),
        finished_at=None,
        **({"gpus": gpus} if gpus else {}),
    )


def evalkit_commit(package_dir: Path) -> str | None:
    """The commit evalkit runs from: HEAD of the git work tree whose root holds `package_dir`
    (evalkit's own package folder), else None.

    `git rev-parse` walks up from where it is asked: evalkit unpacked from an sdist or a wheel
    inside some other checkout (a monorepo, a venv in a project) would name that project's commit,
    which says nothing about evalkit's code. Only a work tree rooted right above the package
    (a clone of evalkit, or a worktree of one) is evalkit's own.
    """
    try:
        out = subprocess.run(["git", "-C", str(package_dir), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split("\n")
    if out.returncode != 0 or len(lines) < 2 or Path(lines[0]).resolve() != package_dir.resolve().parent:
        return None
    return lines[1].strip() or None
