"""`run_bisect(BisectRequest(...))`: which commit of the engine's source broke one cell.

The flow, each part in its own module: the config and the cell (config/, config/cells.py), the commits
of good..bad from the cell's source repo (commits.py), the good end then the bad end as full
cells (`run_cell`, the matrix's own lifecycle), the bad end judged against the good end
(`judge_ends`: the config's thresholds, McNemar and Fisher); if it is not bad the bisect stops
(exit 1). Then the binary search (search.py) runs one step per probed commit (`run_step`: one
engine start, questions and long generations in batches until the sequential test decides) and
rewrites bisect.json after each (state.py). A commit whose engine does not start or crashes is
untestable and the search moves to a neighbour.

Ctrl-C or SIGTERM stops the running engine (the `with engine` of the cell lifecycle), keeps every
finished step and marks the bisect `interrupted`; `BisectRequest(resume=ID)` continues it and
never runs a finished step again. Bad input raises before any engine starts.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.bisect import search
from evalkit.bisect.commits import CommitRange, commit_range
from evalkit.bisect.ends import Ends, judge_ends
from evalkit.bisect.state import (
    FOLDER_PREFIX,
    BisectRecord,
    BisectStatus,
    CommitInfo,
    EndRecord,
    StepRecord,
    folder_of,
    load,
)
from evalkit.bisect.step import run_step
from evalkit.config import MatrixConfig, find_config, resolve_config
from evalkit.config.cells import Cell, expand
from evalkit.engine.sources import checkout
from evalkit.errors import (
    EXIT_BAD_INPUT,
    EXIT_ENDS_NOT_AS_CLAIMED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_ONLY_UNTESTABLE,
    ConfigError,
    Interrupted,
)
from evalkit.evals import evalset
from evalkit.run.cell import CellControl, CellJob, run_cell
from evalkit.run.options import Progress, Silent
from evalkit.run.orchestration import CommandRequest, device_lock, load_unchanged, stopping_on_interrupt
from evalkit.run.signals import interrupts_raise, signals_held
from evalkit.run.stages import redacted_snapshot
from evalkit.store import (
    RunStore,
    check_run_id,
    new_run_id,
    read_jsonl,
    resolve_run,
)
from evalkit.store.records import CellRecord, now

DEFAULT_ALPHA = 0.01
"""Each step's false-alarm rate when no threshold of the config sets `alpha`."""

FINAL = ("found", "ends_not_as_claimed", "untestable")
"""Statuses of a bisect that is over: `--resume` only reports it."""
EXIT_OF_STATUS = {"found": EXIT_OK, "ends_not_as_claimed": EXIT_ENDS_NOT_AS_CLAIMED,
                  "untestable": EXIT_ONLY_UNTESTABLE, "interrupted": EXIT_INTERRUPTED}


@dataclass(frozen=True)
class BisectRequest(CommandRequest):
    """What to bisect: a config's cell, two refs of its engine source, and where results go (the
    terms every command shares, `CommandRequest`, first; `resume` names a bisect: continue it,
    finished steps reused)."""

    cell: str | None = None
    good: str | None = None
    bad: str | None = None
    axis: str | None = None
    """The axis whose value's `source` gives the repo, when more than one axis carries one."""
    good_run: str | None = None
    """A run (id or path) whose folder for `cell` ran at the good commit: the good end, not run again."""
    all_parents: bool = False
    """Follow merged branches too (default: the first-parent line)."""
    bisect_id: str | None = None
    seed: int = 0


@dataclass(frozen=True)
class BisectOutcome:
    folder: Path
    record: BisectRecord

    @property
    def exit_code(self) -> int:
        return EXIT_OF_STATUS.get(self.record.status, EXIT_BAD_INPUT)


@dataclass
class _Search:
    """A bisect under way: its config, cell, record and folder."""

    config: MatrixConfig
    cell: Cell
    record: BisectRecord
    store: RunStore
    progress: Progress
    cache_dir: Path
    seed: int

    @property
    def folder(self) -> Path:
        return self.store.path

    def save(self) -> None:
        self.record.write(self.folder)


def run_bisect(request: BisectRequest, progress: Progress | None = None) -> BisectOutcome:
    """Bisect; the outcome's record is what bisect.json holds. Raises ConfigError / SourceError /
    LockHeld for bad input before any engine starts."""
    progress = progress or Silent()
    # Absolute: git creates a relative worktree path under the repo, and the engine's PYTHONPATH
    # would be relative to the engine's own working directory.
    request = dataclasses.replace(request, cache_dir=request.cache_dir.resolve())
    state = _resume(request, progress) if request.resume else _start(request, progress)
    if state.record.status in FINAL:
        return BisectOutcome(state.folder, state.record)  # resuming a finished bisect: its report, nothing run
    with device_lock(request, FOLDER_PREFIX + state.record.bisect_id, state.config), interrupts_raise():
        if not request.resume:
            state.store.create()  # only now: bad input and a held lock leave nothing behind
        try:
            with stopping_on_interrupt(state.config) as control:
                state.save()
                evalset.prepare(state.config.evals.enabled(), state.folder)  # lm-eval's task files
                _search(state, control)
        except (KeyboardInterrupt, Interrupted):
            state.record.status = "interrupted"
            state.record.message = f"interrupted: finished steps kept; continue with --resume {state.record.bisect_id}"
        finally:
            state.record.finished_at = now()
            state.save()
    return BisectOutcome(state.folder, state.record)


def _start(request: BisectRequest, progress: Progress) -> _Search:
    for name in ("cell", "good", "bad"):
        if not getattr(request, name):
            raise ConfigError(f"--{name} is required (or --resume BISECT_ID)")
    if request.limit is not None and request.limit < 1:
        raise ConfigError(f"--limit {request.limit}: give 1 or more")
    config, config_path = resolve_config(request.model, request.config_path)
    cell, axis = _cell_and_axis(config, request.cell or "", request.axis)
    assert cell.source is not None  # _cell_and_axis refuses a cell without one
    commits = commit_range(cell.source.repo, request.good or "", request.bad or "", request.cache_dir,
                           first_parent=not request.all_parents)
    good_dir = _good_run_dir(request, cell, commits) if request.good_run else None
    evalset.check(config.evals.enabled())  # an eval that cannot run (missing data) is bad input, now
    bisect_id = check_run_id(request.bisect_id or new_run_id(cell.id))
    store = RunStore(request.results_dir, FOLDER_PREFIX + bisect_id)
    if store.path.exists():
        raise ConfigError(f"{store.path}: bisect folder exists already (use --resume {bisect_id})")
    record = BisectRecord(
        bisect_id=bisect_id, status="running", config_path=str(config_path.resolve()), config=redacted_snapshot(config),
        cell=cell.id, axis=axis, repo=cell.source.repo, good_ref=request.good or "", bad_ref=request.bad or "",
        first_parent=commits.first_parent, limit=request.limit, good_run=request.good_run, seed=request.seed,
        alpha=_alpha(config),
        commits=[CommitInfo.of(c) for c in commits.commits], command=list(request.command_line), started_at=now(),
    )
    if good_dir is not None:
        record.good = EndRecord(**CommitInfo.of(commits.good).model_dump(), cell_dir=str(good_dir.resolve()), status="ok")
    else:
        record.good = EndRecord(**CommitInfo.of(commits.good).model_dump(), cell_dir=f"good-{commits.good.short}")
    return _Search(config, cell, record, store, progress, request.cache_dir, request.seed)


def _resume(request: BisectRequest, progress: Progress) -> _Search:
    folder = folder_of(request.results_dir, request.resume or "")
    record = load(folder)
    _refuse_other_terms(request, record)
    config = load_unchanged(Path(record.config_path), record.config, f"bisect {record.bisect_id}", "start a new bisect")
    cell, _ = _cell_and_axis(config, record.cell, record.axis)
    if record.status not in FINAL:
        record.resumed_at = [*record.resumed_at, now()]
        record.status = "running"
    return _Search(config, cell, record, RunStore(folder.parent, folder.name), progress, request.cache_dir, record.seed)


def _refuse_other_terms(request: BisectRequest, record: BisectRecord) -> None:
    """A resumed bisect keeps the terms it started with: an option that says otherwise is an error,
    never silently ignored (the user would believe they bisect another cell or range)."""
    given: dict[str, tuple[object, object]] = {"--cell": (request.cell, record.cell), "--good": (request.good, record.good_ref),
             "--bad": (request.bad, record.bad_ref), "--axis": (request.axis, record.axis),
             "--limit": (request.limit, record.limit), "--good-run": (request.good_run, record.good_run)}
    if request.all_parents and record.first_parent:
        given["--all-parents"] = (True, False)
    if request.config_path is not None or request.model is not None:
        path = request.config_path or find_config(request.model or "")
        if path.resolve() != Path(record.config_path):
            given["--config" if request.config_path else "--model"] = (request.config_path or request.model,
                                                                      record.config_path)
    for option, (asked, started) in given.items():
        if asked is not None and asked != started:
            kept = f" (it has {option} {started})" if started is not None else ""
            raise ConfigError(f"{option} {asked}: --resume {record.bisect_id} keeps the terms it started with{kept};"
                              " drop the option or start a new bisect")


def _cell_and_axis(config: MatrixConfig, cell_id: str, axis: str | None) -> tuple[Cell, str | None]:
    """The matrix cell and the axis whose value's source gives its commits (None: engine.source)."""
    cells = {c.id: c for c in expand(config)}
    if cell_id not in cells:
        raise ConfigError(f"--cell {cell_id}: not a cell of the matrix (cells: {', '.join(cells)})")
    cell = cells[cell_id]
    with_source = [a for a, values in config.axes.items() if any(v.source for v in values.values())]
    if axis is not None and axis not in config.axes:
        raise ConfigError(f"--axis {axis}: not an axis (axes: {', '.join(config.axes)})")
    if axis is None and len(with_source) > 1:
        raise ConfigError(f"--axis: axes {', '.join(with_source)} all carry a source; name the one to bisect")
    axis = axis or (with_source[0] if with_source else None)
    if axis is not None and config.axes[axis][cell.axes[axis]].source is None:
        raise ConfigError(f"--cell {cell_id}: its {axis} value {cell.axes[axis]} has no source to bisect")
    if cell.source is None:
        raise ConfigError(f"--cell {cell_id}: no engine source (set source.repo on an axis value or engine.source)")
    return cell, axis


def _good_run_dir(request: BisectRequest, cell: Cell, commits: CommitRange) -> Path:
    """`--good-run RUN`: its cell folder, which must have run this cell at the good commit."""
    folder = resolve_run(request.results_dir, request.good_run or "") / cell.id
    path = folder / "cell.json"
    if not path.is_file():
        raise ConfigError(f"--good-run {request.good_run}: no cell {cell.id} in {folder.parent}")
    done = CellRecord.load(path)
    if done.status != "ok":
        raise ConfigError(f"--good-run {request.good_run}: cell {cell.id} did not finish ok ({done.status})")
    if done.source is None or done.source.sha != commits.good.sha:
        ran = done.source.sha[:12] if done.source else "no source"
        raise ConfigError(f"--good-run {request.good_run}: cell {cell.id} ran {ran}, not --good {commits.good.short}")
    return folder


def _alpha(config: MatrixConfig) -> float:
    """The strictest alpha of the config's thresholds: a step is as careful as the matrix's gates."""
    alphas = [t.alpha for t in config.thresholds if t.alpha is not None]
    return min(alphas) if alphas else DEFAULT_ALPHA


def _job(state: _Search, sha: str, folder: str) -> CellJob:
    """A CellJob for the bisected cell at one commit, its results in the bisect folder's `folder`."""
    # The cell's own source at this commit: its setup (the build each commit needs) comes along, and
    # a failed setup is that step's cell error, so the commit is untestable.
    assert state.cell.source is not None  # _cell_and_axis refuses a cell without one
    at_commit = state.cell.source.model_copy(update={"ref": sha})
    with signals_held():  # a Ctrl-C that killed `git worktree add` would leave a half tree, reused later
        source = checkout(at_commit, state.cache_dir)
    cell = dataclasses.replace(state.cell, id=folder, source=at_commit)
    devices = tuple(range(cell.topology.devices)) if state.config.devices else None
    return CellJob(state.config, cell, state.store, state.progress, limit=state.record.limit, source=source, devices=devices)


def _run_end(state: _Search, end: EndRecord, control: CellControl) -> Path:
    """Run one end as a full cell, unless a finished cell.json is there already (a resume)."""
    folder = Path(end.cell_dir) if Path(end.cell_dir).is_absolute() else state.folder / end.cell_dir
    done = folder / "cell.json"
    if not done.is_file():
        started = time.monotonic()
        record = run_cell(_job(state, end.sha, folder.name), control)
        state.record.engine_starts += 1
        end.wall_s = round(time.monotonic() - started, 3)
        if record.status not in ("ok", "error"):  # interrupted: run_cell wrote nothing
            raise Interrupted("bisect interrupted")
    record = CellRecord.load(done)
    end.status, end.message = record.status, record.message
    state.save()
    return folder


def _search(state: _Search, control: CellControl) -> None:
    record = state.record
    assert record.good is not None
    good_dir = _run_end(state, record.good, control)
    if record.good.status != "ok":
        _finish(state, "ends_not_as_claimed", f"the good end {record.good.sha[:12]} did not run: {record.good.message}")
        return
    bad_commit = record.commits[-1]
    record.bad = record.bad or EndRecord(**bad_commit.model_dump(), cell_dir=f"bad-{bad_commit.sha[:12]}")
    bad_dir = _run_end(state, record.bad, control)
    ends = judge_ends(state.config, good_dir, bad_dir, record.alpha)
    record.ends = ends.to_dict()
    if not ends.bad:
        _finish(state, "ends_not_as_claimed", f"ends not as claimed: {ends.reason}")
        return
    state.save()
    n = len(record.commits)
    while (index := search.next_probe(n, record.verdicts())) is not None:
        record.steps.append(_step(state, index, good_dir, ends, control))
        state.save()
    _conclude(state)


def _step(state: _Search, index: int, good_dir: Path, ends: Ends, control: CellControl) -> StepRecord:
    commit = state.record.commits[index]
    job = _job(state, commit.sha, f"step-{commit.sha[:12]}")
    state.progress.update(job.cell.id, "step", f"{commit.subject[:60]} ({len(state.record.steps) + 1} of at most "
                                             f"{search.max_steps(len(state.record.commits))} without skips)")
    state.record.engine_starts += 1
    outcome = run_step(job, control, good_dir, ends, seed=state.seed)
    if control.stop.is_set():
        raise Interrupted("bisect interrupted")
    return StepRecord(**commit.model_dump(), index=index, verdict=outcome.verdict, reason=outcome.reason,
                      questions=outcome.questions, generations=outcome.generations,
                      generation_tokens=outcome.generation_tokens, evidence=outcome.evidence,
                      wall_s=round(outcome.wall_s, 3), cell_dir=job.cell.id)


def _conclude(state: _Search) -> None:
    record = state.record
    result = search.conclude(len(record.commits), record.verdicts())
    if result.status == "found":
        first = record.commits[result.hi]
        record.first_bad = first.sha
        record.excerpt = _excerpt(state)
        _finish(state, "found", f"first bad commit {first.sha[:12]} {first.subject}")
        return
    record.untestable = [c.sha for c in record.commits[result.lo:result.hi + 1]]
    _finish(state, "untestable", f"only untestable commits left: the first bad commit is one of "
                               f"{len(record.untestable)} ({record.untestable[0][:12]}..{record.untestable[-1][:12]})")


def _excerpt(state: _Search) -> dict[str, Any] | None:
    """One collapse for the report: the first bad step's own, else the bad end's first new one."""
    record = state.record
    step = next((s for s in record.steps if s.sha == record.first_bad), None)
    if step is not None and isinstance(found := step.evidence.get("excerpt"), dict):
        return {"sha": step.sha, "id": found.get("id"), "onset": found.get("onset"), "text": found.get("excerpt")}
    metric = (record.ends or {}).get("count_metric")
    new = (((record.ends or {}).get("evidence") or {}).get(metric) or {}).get("new_collapses") or []
    ev = state.config.evals.evalset.eval_of(metric) if metric else None
    if not new or ev is None or record.bad is None:
        return None
    path = state.folder / record.bad.cell_dir / ev.samples_file
    row = next((r for r in read_jsonl(path) if r.get("id") == new[0]["id"]), None) if path.is_file() else None
    if row is None:
        return None
    evidence = row.get("evidence") or {}
    return {"sha": record.bad.sha, "id": row["id"], "onset": evidence.get("onset"),
            "text": evidence.get("excerpt") or str(row.get("text", ""))[:200]}


def _finish(state: _Search, status: BisectStatus, message: str) -> None:
    state.record.status = status
    state.record.message = message
    state.progress.update(state.record.cell, status, message)
