"""The Slurm executor: each cell of a run is one batch job that runs `evalkit cell`.

The driver (`evalkit matrix --executor slurm`) stays on the login node and only talks to Slurm
(the commands and what a job is: run/slurm_commands.py):

1. `preflight`, before the run folder exists: sbatch must answer, and `sbatch --test-only` checks
   every submission (its job script written to a temporary folder), so a wrong partition or a
   GPU request no node can meet is bad input that leaves nothing behind.
2. For every cell to run it writes `<run>/<cell>/slurm-job.sh`, a two-line script that `exec`s
   `python -m evalkit.cli cell --run RUN --cell ID --results-dir ABS --cache-dir ABS` with the
   driver's own interpreter (the results folder is on the shared filesystem).
3. It submits the jobs (`sbatch --parsable`, argv, never a shell string) and polls `squeue`
   every `slurm.poll_s` seconds, showing each cell's job id, state and node as progress.
4. When a job ends, the cell.json the job wrote is the cell's result; the driver adds a `slurm`
   key (job id, node, state, exit code, `scontrol show job` and, where accounting is on, `sacct`).
   A job that Slurm ended from outside (time limit, node failure, preemption, someone's scancel)
   or that exited without a cell.json becomes that cell's error, with Slurm's reason and the tail
   of `slurm-<jobid>.out`; Slurm kills are resubmitted while `slurm.retries` allows.
5. On Ctrl-C or SIGTERM (`Interrupted`) every job still queued or running is `scancel`led by job
   id, each cell's `slurm.json` records it, and `Interrupted` goes on up: `evalkit matrix --resume`
   then submits only the cells without a finished cell.json.

Each cell's `slurm.json` holds the current job (id, attempt, state, node, cancelled) while the
run is under way; a driver that was killed hard (SIGKILL, lost session) leaves its jobs running,
and `--resume` watches those jobs again instead of submitting the cells twice.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.errors import ConfigError, Interrupted
from evalkit.redact import scrub, scrub_file, secret_values
from evalkit.run.executor import OnCellDone
from evalkit.run.options import Progress, RunOptions
from evalkit.run.signals import signals_held
from evalkit.run.slurm_commands import (
    GONE,
    KILLED_STATES,
    TERMINAL_STATES,
    JobStatus,
    SlurmCommands,
    cell_command,
    exit_status,
    final_status,
    job_name,
    job_script,
    parse_scontrol,
    query_states,
    sacct_rows,
    sbatch_argv,
)
from evalkit.store import RunStore, read_json, write_json
from evalkit.store.records import FINISHED, CellError, CellRecord, failed_cell, now

SCRIPT_NAME = "slurm-job.sh"
STATE_NAME = "slurm.json"
CANCEL_WAIT_S = 60.0
"""How long an interrupted driver waits for cancelled jobs to leave the queue (Slurm's KillWait)."""
TAIL_LINES = 40


# --- one cell's job ------------------------------------------------------------------------------


@dataclass
class Job:
    """The current Slurm job of one cell, mirrored in the cell's slurm.json."""

    cell: Cell
    job_id: str
    attempt: int
    sbatch: list[str]
    submitted_at: str
    state: str = "PENDING"
    node: str = ""
    reason: str = ""
    cancelled: bool = False
    earlier: list[dict[str, Any]] = field(default_factory=list)
    """slurm records of this cell's earlier attempts (jobs Slurm killed, then resubmitted)."""

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_STATES or self.state == GONE

    def describe(self) -> str:
        if self.state == "PENDING":
            where = f" ({self.reason})" if self.reason not in ("", "None") else ""
        else:
            where = f" ({self.node})" if self.node else ""
        retry = f", attempt {self.attempt}" if self.attempt > 1 else ""
        return f"job {self.job_id} {self.state}{where}{retry}"

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "job_name": _job_name_of(self.sbatch), "attempt": self.attempt,
                "state": self.state, "node": self.node, "reason": self.reason, "cancelled": self.cancelled,
                "submitted_at": self.submitted_at, "sbatch": self.sbatch, "earlier_attempts": self.earlier}


def _job_name_of(sbatch: list[str]) -> str:
    return next((a.partition("=")[2] for a in sbatch if a.startswith("--job-name=")), "")


def _save(store: RunStore, job: Job) -> None:
    write_json(store.cell_dir(job.cell.id) / STATE_NAME, job.to_json())



def _submit(cli: SlurmCommands, store: RunStore, cell: Cell, sbatch: list[str], attempt: int,
            earlier: list[dict[str, Any]]) -> Job | str:
    """Submit one cell; its Job, or sbatch's error message."""
    out = cli.run(*sbatch)
    job_id = out.stdout.strip().split(";")[0] if out.returncode == 0 else ""
    if not job_id.isdigit():
        return (out.stderr.strip() or out.stdout.strip() or f"sbatch exited {out.returncode}").splitlines()[-1]
    job = Job(cell, job_id, attempt, sbatch, now(), earlier=earlier)
    _save(store, job)
    return job


def _test_only(cli: SlurmCommands, config: MatrixConfig, store: RunStore, cells: list[Cell], cache_dir: Path) -> None:
    """`sbatch --test-only` every submission: what Slurm would refuse is bad input, caught now.

    The run folder does not exist yet, so each job script is written to a temporary folder;
    everything else in the argv is what the real submission will be.
    """
    with tempfile.TemporaryDirectory(prefix="evalkit-sbatch-") as scratch:
        for cell in cells:
            script = Path(scratch) / f"{cell.id}.sh"
            script.write_text(job_script(cell_command(store, cell.id, cache_dir)), encoding="utf-8")
            sbatch = sbatch_argv(config, cell, store.run_id, store.cell_dir(cell.id), script)
            out = cli.run(sbatch[0], "--test-only", *sbatch[1:])
            if out.returncode != 0:
                why = "; ".join(line.strip() for line in out.stderr.splitlines() if line.strip()) or f"exit {out.returncode}"
                raise ConfigError(f"cell {cell.id}: Slurm refuses the job ({why}); nothing was submitted")


def _adoptable(cli: SlurmCommands, store: RunStore, cells: list[Cell]) -> dict[str, Job]:
    """Jobs an earlier driver of this run left queued or running (it was killed): watched, not resubmitted.

    A job counts only if squeue shows it active under this cell's job name, so a job id reused by
    another cluster (or a restarted one) is never mistaken for ours.
    """
    recorded = {cell.id: state for cell in cells if (state := _recorded_job(store, cell))}
    live = query_states(cli, [str(s["job_id"]) for s in recorded.values()]) if recorded else {}
    adopted: dict[str, Job] = {}
    for cell in cells:
        state = recorded.get(cell.id)
        status = (live or {}).get(str(state["job_id"])) if state else None
        if state and status and status.state not in TERMINAL_STATES and status.name == job_name(store.run_id, cell.id):
            adopted[cell.id] = Job(cell, str(state["job_id"]), int(state.get("attempt", 1)), list(state["sbatch"]),
                                   str(state.get("submitted_at", "")), status.state, status.node, status.reason,
                                   earlier=list(state.get("earlier_attempts", [])))
    return adopted


def _recorded_job(store: RunStore, cell: Cell) -> dict[str, Any] | None:
    """The cell's slurm.json, if it names a job that may still be alive (not ended, not cancelled)."""
    path = store.cell_dir(cell.id) / STATE_NAME
    state: dict[str, Any] | None = read_json(path) if path.is_file() else None
    if not state or state.get("cancelled") or state.get("state") in TERMINAL_STATES or not state.get("job_id"):
        return None
    return state


def _own_record(store: RunStore, cell: Cell) -> CellRecord | None:
    """The finished cell.json the cell's job wrote itself, if any."""
    path = store.cell_dir(cell.id) / "cell.json"
    own = CellRecord.load(path) if path.is_file() else None
    return own if own and own.status in FINISHED else None


def _slurm_record(cli: SlurmCommands, job: Job, cell_dir: Path) -> dict[str, Any]:
    """What Slurm knows about a finished job, for cell.json's `slurm` key."""
    shown = cli.run("scontrol", "show", "job", "-o", job.job_id)
    fields = parse_scontrol(shown.stdout.splitlines()[0]) if shown.returncode == 0 and shown.stdout.strip() else None
    rows, why = sacct_rows(cli, job.job_id)
    record = job.to_json()
    record.update({
        "node": job.node or (fields or {}).get("NodeList", ""),
        "exit_code": (fields or {}).get("ExitCode") or (rows[0].get("ExitCode") if rows else None),
        "time_limit": (fields or {}).get("TimeLimit"),
        "output": (fields or {}).get("StdOut") or str(cell_dir / f"slurm-{job.job_id}.out"),
        "scontrol": fields,
        "sacct": rows,
    })
    if rows is None:
        record["sacct_note"] = why
    return record


def _tail(path: Path, secrets: list[str]) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return scrub("\n".join(lines[-TAIL_LINES:]), secrets)


def _failure(job: Job, slurm: dict[str, Any], tail: str, own: CellRecord | None) -> CellRecord:
    """The error record of a job that left no result of its own (or that Slurm killed)."""
    where = f" on {slurm['node']}" if slurm.get("node") else ""
    if job.state in KILLED_STATES:
        reason = f" ({job.reason})" if job.reason not in ("", "None", job.state) else ""
        limit = f", time limit {slurm['time_limit']}" if job.state == "TIMEOUT" and slurm.get("time_limit") else ""
        message = f"Slurm ended job {job.job_id}{where}: {job.state}{reason}{limit}"
    elif job.state == GONE:
        message = f"Slurm job {job.job_id} ended without a cell.json, and Slurm no longer knows how (no accounting)"
    else:
        message = f"Slurm job {job.job_id}{where} ended {job.state} without a result (exit code {slurm.get('exit_code')})"
    if own and own.error:
        message += f"; the cell reported: {own.error.message}"
    error = CellError(type="SlurmJob", message=message, slurm_state=job.state,
                      exit_code=exit_status(slurm.get("exit_code")), log_tail=tail)
    return failed_cell(job.cell, error, started_at=(slurm.get("scontrol") or {}).get("StartTime"), source=None,
                       devices=None)


@dataclass
class _Driver:
    """The state of one Slurm run: who to ask, what to report, which job each cell has."""

    cli: SlurmCommands
    config: MatrixConfig
    store: RunStore
    progress: Progress
    on_cell_done: OnCellDone | None
    plans: dict[str, list[str]]
    jobs: dict[str, Job] = field(default_factory=dict)

    def submit(self, cell: Cell, attempt: int = 1, earlier: list[dict[str, Any]] | None = None) -> None:
        with signals_held():
            job = _submit(self.cli, self.store, cell, self.plans[cell.id], attempt, earlier or [])
            if isinstance(job, Job):
                self.jobs[cell.id] = job
        if isinstance(job, Job):
            self.progress.update(cell.id, "slurm", job.describe())
        else:
            self.jobs.pop(cell.id, None)
            error = CellError(type="SlurmSubmit", message=f"sbatch failed: {job}", exit_code=None, log_tail="")
            self._record(cell, failed_cell(cell, error, source=None, devices=None, slurm={
                "sbatch": self.plans[cell.id], "job_id": None, "earlier_attempts": earlier or []}))

    def watch(self) -> None:
        """Poll until every job has ended; finished cells are collected as they end."""
        while active := [j for j in self.jobs.values() if not j.ended]:
            statuses = query_states(self.cli, [j.job_id for j in active])
            for job in active:
                if statuses is None:  # the controller is busy or restarting: ask again next poll
                    self.progress.update(job.cell.id, "slurm", job.describe() + " (squeue does not answer)")
                else:
                    self._observe(job, statuses.get(job.job_id) or final_status(self.cli, job.job_id))
            if any(not j.ended for j in self.jobs.values()):
                time.sleep(self.config.executor.slurm.poll_s)

    def _observe(self, job: Job, status: JobStatus) -> None:
        if (status.state, status.node, status.reason) == (job.state, job.node, job.reason):
            return
        job.state, job.node, job.reason = status.state, status.node or job.node, status.reason
        _save(self.store, job)
        if job.ended:
            self._conclude(job)
        else:
            self.progress.update(job.cell.id, "slurm", job.describe())

    def _conclude(self, job: Job) -> None:
        """A job ended: its cell.json is the result, or Slurm's reason is the error (or a retry)."""
        slurm = _slurm_record(self.cli, job, self.store.cell_dir(job.cell.id))
        secrets = secret_values(os.environ, self.config.secret_env)
        scrub_file(Path(slurm["output"]), secrets)
        own = _own_record(self.store, job.cell)
        killed = job.state in KILLED_STATES
        if own and (own.status == "ok" or not killed):
            record = own
        elif killed and job.attempt <= self.config.executor.slurm.retries:
            self.progress.update(job.cell.id, "slurm", f"job {job.job_id} {job.state}; resubmitting (retry {job.attempt})")
            self._set_aside(job)
            self.submit(job.cell, job.attempt + 1, [*job.earlier, _brief(slurm)])
            return
        else:
            record = _failure(job, slurm, _tail(Path(slurm["output"]), secrets), own)
        record.slurm = slurm
        self._record(job.cell, record)

    def _set_aside(self, job: Job) -> None:
        """A killed attempt's own cell.json (an error) is not the next attempt's result: keep it aside."""
        path = self.store.cell_dir(job.cell.id) / "cell.json"
        if path.is_file():
            path.replace(path.with_name(f"cell.attempt{job.attempt}.json"))

    def _record(self, cell: Cell, record: CellRecord) -> None:
        self.store.write_cell(cell.id, record.dump())
        self.progress.update(cell.id, record.status, record.message)
        if self.on_cell_done:
            self.on_cell_done(record.dump())

    def cancel_all(self) -> None:
        """scancel every job still queued or running, record it, wait (briefly) for them to end.

        A job may have written its cell.json just before the cancel reached it: that result is
        kept, as a local run keeps the cells finished before Ctrl-C.
        """
        active = [j for j in self.jobs.values() if not j.ended]
        if not active:
            return
        with signals_held():
            cancelled_at = time.time()
            out = self.cli.run("scancel", *[j.job_id for j in active])
            for job in active:
                job.cancelled = True
                _save(self.store, job)
                self.progress.update(job.cell.id, "interrupted", f"job {job.job_id} cancelled")
        if out.returncode != 0:
            print(f"evalkit: scancel failed ({out.stderr.strip()}); cancel by hand: scancel "
                  + " ".join(j.job_id for j in active), file=sys.stderr)
        try:
            self._wait_cancelled(active)
        except (KeyboardInterrupt, Interrupted):
            pass  # a second Ctrl-C only skips the wait: the jobs are cancelled already
        finally:
            for job in active:
                self._keep_result(job, cancelled_at)

    def _keep_result(self, job: Job, cancelled_at: float) -> None:
        """After a cancel: keep a result the job wrote before it was stopped; --resume runs the rest.

        An `ok` record is whole whenever it was written. An error written after the cancel may be
        the cancel's own doing (its engine killed first), so it is moved aside, like the local
        executor, which never records a non-ok cell once the run is stopping.
        """
        path = self.store.cell_dir(job.cell.id) / "cell.json"
        own = _own_record(self.store, job.cell)
        if not own or own.slurm is not None:
            return
        if own.status == "ok" or path.stat().st_mtime < cancelled_at:
            own.slurm = _slurm_record(self.cli, job, self.store.cell_dir(job.cell.id))
            self._record(job.cell, own)
        else:
            path.replace(path.with_name("cell.interrupted.json"))

    def _wait_cancelled(self, jobs: list[Job]) -> None:
        deadline = time.monotonic() + CANCEL_WAIT_S
        while (left := [j for j in jobs if not j.ended]) and time.monotonic() < deadline:
            time.sleep(min(1.0, self.config.executor.slurm.poll_s))
            statuses = query_states(self.cli, [j.job_id for j in left]) or {}
            for job in left:
                status = statuses.get(job.job_id) or final_status(self.cli, job.job_id)
                if status.state != job.state:
                    job.state, job.node = status.state, status.node or job.node
                    _save(self.store, job)


def _brief(slurm: dict[str, Any]) -> dict[str, Any]:
    """An earlier attempt, as kept in the final record: enough to see why it was retried."""
    keys = ("job_id", "attempt", "state", "node", "reason", "exit_code", "output", "submitted_at")
    return {k: slurm.get(k) for k in keys}


def _plan(config: MatrixConfig, store: RunStore, cell: Cell, cache_dir: Path) -> list[str]:
    """Write the cell's job script; sbatch's argv for it."""
    cell_dir = store.cell_dir(cell.id)
    cell_dir.mkdir(parents=True, exist_ok=True)
    script = (cell_dir / SCRIPT_NAME).resolve()
    script.write_text(job_script(cell_command(store, cell.id, cache_dir)), encoding="utf-8")
    script.chmod(0o755)
    return sbatch_argv(config, cell, store.run_id, cell_dir, script)


class SlurmExecutor:
    """One Slurm job per cell (the `Executor` protocol, run/executor.py; module docstring).

    `cli` is the seam for tests: anything with SlurmCommands' `run`.
    """

    def __init__(self, config: MatrixConfig, store: RunStore, options: RunOptions, progress: Progress,
                 cli: SlurmCommands | None = None) -> None:
        self.config = config
        self.store = store
        self.options = options
        self.progress = progress
        self.cli = cli or SlurmCommands()
        self._adopted: dict[str, Job] = {}

    def preflight(self, todo: list[Cell]) -> None:
        """sbatch must answer and accept every job not already running from an earlier driver."""
        if self.options.base_url:
            raise ConfigError("--base-url evaluates a server that is already running: use --executor local")
        if self.cli.run("sbatch", "--version").returncode != 0:
            raise ConfigError("executor slurm: sbatch does not run here (run from a Slurm login node, or use --executor local)")
        self._adopted = _adoptable(self.cli, self.store, todo)
        _test_only(self.cli, self.config, self.store, [c for c in todo if c.id not in self._adopted],
                   self.options.cache_dir)

    def run(self, todo: list[Cell], on_cell_done: OnCellDone | None = None) -> None:
        """Submit every cell (or watch its earlier driver's job), return when every job has ended;
        on any exception, Interrupted included, cancel every job still queued or running."""
        plans = {cell.id: _plan(self.config, self.store, cell, self.options.cache_dir) for cell in todo}
        driver = _Driver(self.cli, self.config, self.store, self.progress, on_cell_done, plans, dict(self._adopted))
        try:
            for cell in todo:
                if cell.id in self._adopted:
                    self.progress.update(cell.id, "slurm", self._adopted[cell.id].describe() + " (from an earlier driver)")
                else:
                    driver.submit(cell)
            driver.watch()
        except BaseException:
            driver.cancel_all()
            raise
