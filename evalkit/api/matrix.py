"""evalkit's public entry points: `run_matrix(MatrixRequest(...))`, like inspect_ai's `eval()`, and
`run_one_cell`, what each Slurm job runs.

`evalkit matrix` parses its options into a `MatrixRequest`, calls `run_matrix` and prints the
`MatrixOutcome`; a script or a notebook does the same without the CLI. Bad input (config,
selection, run id, source ref, an executor that refuses the jobs, the device lock held by another
run) is raised as the `EvalkitError` of its kind before anything is created or overwritten. A
cell that fails is that cell's error, never an exception; Ctrl-C or SIGTERM stops the run, keeps
the finished cells and still writes summary.json and table.md, and the outcome says `interrupted`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.api.publish import publish
from evalkit.config import MatrixConfig, resolve_config
from evalkit.config.cells import Cell, baseline_cell, expand, select
from evalkit.errors import EXIT_INTERRUPTED, ConfigError, Interrupted
from evalkit.evals.capabilities import ReadsEarlierCells
from evalkit.run import gpus
from evalkit.run.cell import CellJob, run_cell
from evalkit.run.external import choose_served_name, normalise_base_url, served_models
from evalkit.run.options import Progress, RunOptions, Silent
from evalkit.run.orchestration import CommandRequest, device_lock, load_unchanged, stopping_on_interrupt
from evalkit.run.signals import interrupts_raise
from evalkit.run.slurm_nodes import placement_for
from evalkit.run.stages import execute, prepare, prepare_sources
from evalkit.store import (
    RunStore,
    atomic_write_text,
    check_run_id,
    check_writable,
    new_run_id,
    read_json,
    resolve_run,
    write_json,
)
from evalkit.store.records import RunRecord

if TYPE_CHECKING:
    from evalkit.verdict.summary import RunSummary

EXTERNAL_CELL = "external"
"""The one cell of a `base_url` run."""


@dataclass(frozen=True)
class MatrixRequest(CommandRequest):
    """What to run: a config, which of its cells, where results go, and how (the terms every
    command shares, `CommandRequest`, first)."""

    only: tuple[str, ...] = ()
    """Subset selections (`parallel=dp8,graph=piecewise`; keys ANDed, `a|b` either value, a union
    over the tuple)."""
    run_id: str | None = None
    """The run folder's name; default: timestamp-config name."""
    base_url: str | None = None
    """Evaluate a running server: one cell `external`, no engine started. Its root, `.../v1` or
    `.../v1/completions` (external.py); checked, with the name it serves, before anything starts."""
    served_name: str | None = None
    """With `base_url`: the model name to request, when the server lists several."""
    executor: str | None = None
    """`local` (this machine) or `slurm` (one job per cell); default: the config's executor.kind."""
    max_parallel: int | None = None
    """Cells side by side (with declared devices); default: as many as the devices allow."""
    history_db: Path | None = None
    """Default: results_dir/history.db."""
    history: bool = True
    """Record every finished cell, then the finished run, in the history database."""
    wait_for_gpus: float | None = None
    """Seconds to wait for GPUs other processes use before the first cell (`--wait-for-gpus`);
    default the config's `timeouts.gpus_busy` (0: refuse at once, `GpusBusy`, exit 4)."""
    bisect_on_regression: bool = False
    """Bisect each cell that breaks a failing threshold it passed in the previous run of this config
    (bisect/on_regression.py) and add the first bad commit to summary.json and table.md; never
    changes the exit code. Skipped for an interrupted run."""
    junit: Path | None = None
    """Also write the run as JUnit XML here (one testcase per cell x threshold check)."""
    github: bool = False
    """Publish to GitHub Actions (api/publish.py): table.md appended to `$GITHUB_STEP_SUMMARY` and
    the annotations returned in the outcome. `evalkit matrix` sets it when `GITHUB_ACTIONS=true`."""
    notify: str | None = None
    """A command (split as a shell would, run without one) run after the run with table.md's path
    appended and `EVALKIT_EXIT_CODE` set."""


@dataclass(frozen=True)
class MatrixOutcome:
    """What a run concluded."""

    run_path: Path
    summary: RunSummary
    """The run's verdict: summary.json is its `dump()`. It carries the run's evals (its config's:
    the built-ins and its plugins), so `render(outcome.summary, ...)` shows a plugin's metrics as
    its own code displays them."""
    interrupted: bool
    """Stopped by Ctrl-C or SIGTERM: finished cells kept, `MatrixRequest(resume=...)` completes it."""
    annotations: tuple[str, ...] = ()
    """With `github`: the workflow commands (one per broken threshold or failed cell) to print
    where the runner reads them."""
    warnings: tuple[str, ...] = ()
    """What a delivery could not do (the step summary not writable, the notify hook failing), to show."""

    @property
    def exit_code(self) -> int:
        """The documented exit code: EXIT_INTERRUPTED if interrupted, else the summary's."""
        return EXIT_INTERRUPTED if self.interrupted else self.summary.exit_code


def run_matrix(request: MatrixRequest, progress: Progress | None = None) -> MatrixOutcome:
    """Load and check the config, plan the cells, preflight the executor, take the lock, run,
    then write summary.json, table.md and the history.

    Then, as the request asks: `bisect_on_regression`, the JUnit file, GitHub Actions' step summary
    and annotations, the notify hook (api/publish.py).

    Raises ConfigError, SourceError, LockHeld (GpusBusy: other processes use the GPUs) or EvalError
    for bad input, before anything is created. `progress` hears every cell's states (default: nothing is shown); the caller closes it.
    """
    config, config_path, request = _resolve(request)
    progress = progress or Silent()
    outcome = _run(config, config_path, request, progress)
    if request.bisect_on_regression and not outcome.interrupted:
        outcome = _bisect_regressions(outcome, request, progress)
    annotations, warnings = publish(outcome.run_path, outcome.summary, request.junit, request.github, request.notify)
    return dataclasses.replace(outcome, annotations=tuple(annotations), warnings=tuple(warnings))


def _run(config: MatrixConfig, config_path: Path, request: MatrixRequest, progress: Progress) -> MatrixOutcome:
    from evalkit import history
    from evalkit.verdict.deltas import flat_metrics

    config, request = _external_server(config, request, progress)
    config, cells = _plan(config, request)
    options = RunOptions(
        results_dir=request.results_dir, cache_dir=request.cache_dir,
        run_id=check_run_id(request.run_id or new_run_id(config_path.stem)), limit=request.limit,
        base_url=request.base_url, command_line=list(request.command_line),
        max_parallel=request.max_parallel or (config.devices.count if config.devices else 1),
        resume=request.resume is not None, only=list(request.only), executor=request.executor or config.executor.kind,
    )
    prepared = prepare(config, config_path, cells, options, progress)
    history_path = request.history_db or history.default_db_path(options.results_dir)
    flat = functools.partial(flat_metrics, evals=config.evals.evalset)
    on_cell_done = (history.cell_recorder(history_path, options.results_dir, options.run_id, flat)
                    if request.history else None)
    local_engines = not prepared.options.base_url and prepared.options.executor == "local"
    interrupted = False
    try:
        with device_lock(request, prepared.options.run_id, config, engines_here=local_engines):
            if prepared.options.executor == "local":
                gpus.preflight(config, prepared.options.base_url, request.wait_for_gpus, progress)
            store = execute(prepared, on_cell_done)
    except Interrupted:
        interrupted = True
        store = prepared.store
    summary = _write_verdict(store.path, config)
    if request.history:
        history.record_finished_run(history_path, store.path, flat)
    return MatrixOutcome(store.path, summary, interrupted)


def _resolve(request: MatrixRequest) -> tuple[MatrixConfig, Path, MatrixRequest]:
    """The config and its file; for a resume, the request as the run it continues had it."""
    for name in ("limit", "max_parallel"):
        if (value := getattr(request, name)) is not None and value < 1:
            raise ConfigError(f"{name} {value}: give 1 or more")
    for option, target in (("--history-db", request.history_db if request.history else None), ("--junit", request.junit)):
        if target is not None:
            check_writable(target, option)  # said before any engine starts, not after the last cell
    if request.resume is None:
        config, path = resolve_config(request.model, request.config_path)
        return config, path, request
    run_path = resolve_run(request.results_dir, request.resume)
    previous = RunRecord.load(run_path / "run.json")
    path = request.config_path or Path(previous.config_path)
    config = load_unchanged(path, previous.config, f"run {previous.run_id}", "start a new run instead of --resume")
    return config, path, dataclasses.replace(request, run_id=run_path.name, limit=previous.limit,
                                             only=tuple(previous.only), results_dir=run_path.parent)


def _plan(config: MatrixConfig, request: MatrixRequest) -> tuple[MatrixConfig, list[Cell]]:
    """The cells to run: the selected cells of the matrix, or the one cell of an external server
    (whose config then has no axes, baseline or A/B)."""
    if request.base_url is None:
        every_cell = expand(config)
        baseline = baseline_cell(every_cell, config)  # a baseline that is not a cell is bad input, caught now
        cells = select(every_cell, request.only, config)
        if baseline is not None and any(isinstance(ev, ReadsEarlierCells) and ev.runs_baseline_last(s)
                                    for ev, s in config.evals.enabled()):
            cells = [c for c in cells if c.id != baseline.id] + [c for c in cells if c.id == baseline.id]
        return config, cells
    external = Cell(EXTERNAL_CELL, {}, config.engine.settings, (), {}, None)
    return config.model_copy(update={"axes": {}, "baseline": None, "ab": None, "exclude": []}), [external]


def _external_server(config: MatrixConfig, request: MatrixRequest, progress: Progress) -> tuple[MatrixConfig, MatrixRequest]:
    """A `base_url` request with the server's root and the name it really serves (external.py)."""
    if request.base_url is None:
        if request.served_name is not None:
            raise ConfigError("--served-name goes with --base-url (an engine evalkit starts serves the config's name)")
        return config, request
    if (request.executor or config.executor.kind) != "local":
        return config, request  # the executor refuses it with its own reason
    root = normalise_base_url(request.base_url)
    name, note = choose_served_name(root, config.served, request.served_name, served_models(root))
    if note:
        progress.update(EXTERNAL_CELL, "served model", note)
    return config.model_copy(update={"served_name": name}), dataclasses.replace(request, base_url=root)


def _bisect_regressions(outcome: MatrixOutcome, request: MatrixRequest, progress: Progress) -> MatrixOutcome:
    """Bisect the run's new regressions, then its summary and table.md again with what they found."""
    from evalkit.bisect.on_regression import bisect_regressions

    bisect_regressions(outcome.run_path, outcome.summary, request.results_dir, request.cache_dir, request.lock_file,
                       request.lock, progress)
    return dataclasses.replace(outcome, summary=refresh_verdict(outcome.run_path))


def refresh_verdict(run_path: Path) -> RunSummary:
    """Write summary.json and table.md again from what the run folder holds now (after something
    added to it, such as `--bisect-on-regression`'s regressions.json), with the run's own config."""
    from evalkit.config import parse_config

    return _write_verdict(run_path, parse_config(read_json(run_path / "run.json")["config"], run_path / "run.json"))


def _write_verdict(run_path: Path, config: MatrixConfig) -> RunSummary:
    """summary.json and table.md from what the run stored; the summary, carrying the config's evals."""
    from evalkit.verdict.deltas import summarize_run

    summary = summarize_run(run_path, config)
    write_json(run_path / "summary.json", summary.dump())
    atomic_write_text(run_path / "table.md", _markdown(run_path, summary))
    return summary


def _markdown(run_path: Path, summary: RunSummary) -> str:
    """table.md: the one call of the markdown renderer."""
    from evalkit.render import render

    return render(summary, "markdown", run_path) or ""  # a text format: always its text


def run_one_cell(results_dir: Path, run_id: str, cell_id: str, cache_dir: Path, progress: Progress) -> dict[str, Any]:
    """Run one cell of an existing run (what a Slurm job does), writing its cell.json; its record.

    The config is re-read from the run's config path and must match the run's snapshot, so a job
    never runs a different experiment than the run it belongs to. Inside a Slurm job of several
    nodes, a cell whose topology spans them starts each part on its node (run/slurm_nodes.py).
    """
    store = RunStore(results_dir, run_id)
    info = RunRecord.load(store.path / "run.json")
    config = load_unchanged(Path(info.config_path), info.config, f"run {run_id}")
    cell = next((c for c in expand(config) if c.id == cell_id), None)
    if cell is None:
        raise ConfigError(f"cell {cell_id!r} is not a cell of run {run_id}")
    job = CellJob(config, cell, store, progress, limit=info.limit,
                  source=prepare_sources([cell], cache_dir).get(cell.id),
                  placement=placement_for(cell.topology.nodes, config.engine.host, os.environ))
    with interrupts_raise(), stopping_on_interrupt(config) as control:
        return run_cell(job, control).dump()
