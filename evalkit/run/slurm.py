"""The Slurm executor: each cell of a run is one batch job that runs `evalkit cell`.

The driver (`evalkit matrix --executor slurm`) stays on the login node and only talks to Slurm:

1. For every cell to run it writes `<run>/<cell>/slurm-job.sh`, a two-line script that `exec`s
   `python -m evalkit.cli cell --run RUN --cell ID --results-dir ABS --cache-dir ABS` with the
   driver's own interpreter (the results folder is on the shared filesystem).
2. `sbatch --test-only` checks every submission first: a wrong partition or a GPU request no
   node can meet is bad input, reported before any job exists.
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

Why plain `sbatch` argv rather than submitit or pyslurm: the job is one CLI command that already
exists (`evalkit cell`), so pickling Python callables buys nothing; no extra dependency, no
version coupling to the cluster's libslurm; each job is an ordinary Slurm job a user can inspect
(`squeue`, `scontrol show job`, `sacct`) and cancel (`scancel ID`) with Slurm's own tools, and
its script in the cell folder can be resubmitted by hand.

Why a script file and not `sbatch --wrap`: `--wrap` takes one shell string, and sbatch has no
form that runs an argv directly (its positional arguments must name a `#!` script). The script
quotes every argv element with `shlex.quote`, so a path or cell id is always one word, and the
cell folder keeps an exact, re-runnable record of what the job ran.

Each cell's `slurm.json` holds the current job (id, attempt, state, node, cancelled) while the
run is under way; a driver that was killed hard (SIGKILL, lost session) leaves its jobs running,
and `--resume` watches those jobs again instead of submitting the cells twice.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig
from evalkit.errors import ConfigError, Interrupted
from evalkit.matrix import Cell
from evalkit.redact import scrub, scrub_file, secret_values
from evalkit.run.runner import FINISHED, Progress, RunOptions
from evalkit.run.scheduler import device_need
from evalkit.store import RunStore, read_json, write_json

SCRIPT_NAME = "slurm-job.sh"
STATE_NAME = "slurm.json"
SQUEUE_FORMAT = "%i|%T|%N|%r|%j"
"""job id | state | node list | reason | job name (last: the only field we did not choose)."""
COMMAND_TIMEOUT_S = 60.0
CANCEL_WAIT_S = 60.0
"""How long an interrupted driver waits for cancelled jobs to leave the queue (Slurm's KillWait)."""
TAIL_LINES = 40

TERMINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
    "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT",
})
KILLED_STATES = frozenset({"BOOT_FAIL", "CANCELLED", "DEADLINE", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"})
"""Slurm ended the job from outside: the cell's error is Slurm's reason, and `retries` resubmit it.

A job that ended by itself (COMPLETED, FAILED) is never resubmitted: `evalkit cell` exits non-zero
only after writing its own error, or on bad input, and running it again would fail the same way.
"""
GONE = "UNKNOWN"
"""Neither squeue, scontrol nor sacct knows the job any more (no accounting, MinJobAge passed)."""
SACCT_FIELDS = "JobID,JobName,Partition,State,ExitCode,Elapsed,Start,End,NodeList,AllocTRES,MaxRSS"


# --- what a job is -------------------------------------------------------------------------------


def job_name(run_id: str, cell_id: str) -> str:
    return f"evalkit-{run_id}-{cell_id}"


def cell_command(store: RunStore, cell_id: str, cache_dir: Path) -> list[str]:
    """The job's argv: this interpreter and absolute paths, so the job runs what the driver would."""
    return [
        sys.executable, "-m", "evalkit.cli", "cell", "--run", store.run_id, "--cell", cell_id,
        "--results-dir", str(store.results_dir.resolve()), "--cache-dir", str(cache_dir.resolve()),
    ]


def job_script(argv: list[str]) -> str:
    """A POSIX sh script that execs `argv`: every element quoted, so none is ever split or expanded.

    `exec` makes evalkit the job's main process, so Slurm's SIGTERM (scancel, time limit) reaches
    it directly and it stops its engine before exiting.
    """
    return "#!/bin/sh\n# Written by evalkit (Slurm executor): one cell of a run.\nexec " + shlex.join(argv) + "\n"


def sbatch_argv(config: MatrixConfig, cell: Cell, run_id: str, cell_dir: Path, script: Path) -> list[str]:
    """sbatch's argv for one cell: the cell's resources, the config's placement, then extra_args.

    `--no-requeue`: Slurm would otherwise silently rerun a job after a node failure under the same
    id; evalkit resubmits itself (`slurm.retries`) so every attempt is counted and recorded.
    """
    slurm = config.executor.slurm
    cell_dir = cell_dir.resolve()
    argv = [
        "sbatch", "--parsable", f"--job-name={job_name(run_id, cell.id)}",
        f"--output={_slurm_pattern(cell_dir)}/slurm-%j.out", f"--chdir={Path.cwd()}",
        "--export=ALL", "--no-requeue", f"--nodes={slurm.nodes}",
    ]
    optional = {
        "--partition": slurm.partition, "--account": slurm.account, "--qos": slurm.qos,
        "--constraint": slurm.constraint, "--time": slurm.time_limit, "--cpus-per-task": slurm.cpus_per_task,
        "--mem": slurm.mem, "--gpus": device_need(cell.settings) if slurm.gpus else None,
    }
    argv += [f"{flag}={value}" for flag, value in optional.items() if value is not None]
    return [*argv, *slurm.extra_args, str(script)]


def _slurm_pattern(path: Path) -> str:
    """A literal path inside sbatch's filename pattern, where `%` starts a replacement."""
    return str(path).replace("%", "%%")


# --- talking to Slurm ----------------------------------------------------------------------------


class SlurmCommands:
    """Slurm's client commands, run as argv (never through a shell).

    Each runs in its own session: a Ctrl-C at the terminal goes to evalkit, which decides what to
    cancel, and never kills an sbatch halfway through a submission or an scancel halfway through.
    A missing binary or a controller that does not answer is a failed command, not an exception.
    """

    def __init__(self, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=self.timeout_s,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        except FileNotFoundError:
            return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]}: no answer in {self.timeout_s:g} s")


@dataclass(frozen=True)
class JobStatus:
    state: str
    node: str = ""
    reason: str = ""
    name: str = ""


def parse_squeue(text: str) -> dict[str, JobStatus]:
    """`squeue -h -o SQUEUE_FORMAT` lines -> {job id: status}."""
    found: dict[str, JobStatus] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 4)
        if len(parts) == 5:
            job_id, state, node, reason, name = parts
            found[job_id] = JobStatus(state.split()[0] if state else GONE, node, reason, name)
    return found


def parse_scontrol(line: str) -> dict[str, str]:
    """`scontrol show job -o` -> {field: value}; a token without `=` continues the previous value."""
    fields: dict[str, str] = {}
    key: str | None = None
    for token in line.strip().split(" "):
        name, eq, value = token.partition("=")
        if eq and name:
            key, fields[name] = name, value
        elif key is not None:
            fields[key] += " " + token
    return fields


def parse_sacct(text: str) -> list[dict[str, str]]:
    """`sacct -P` output with its header line -> one dict per job step."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"))) for line in lines[1:]]


def query_states(cli: SlurmCommands, job_ids: list[str]) -> dict[str, JobStatus] | None:
    """Every listed job squeue still knows (finished ones too, for MinJobAge); None: no answer now."""
    out = cli.run("squeue", "-h", "--states=all", "-j", ",".join(job_ids), "-o", SQUEUE_FORMAT)
    if out.returncode == 0:
        return parse_squeue(out.stdout)
    if "Invalid job id" in out.stderr:  # a single id squeue no longer knows
        return {}
    return None


def final_status(cli: SlurmCommands, job_id: str) -> JobStatus:
    """The state of a job squeue dropped: scontrol while the controller remembers it, then sacct."""
    shown = cli.run("scontrol", "show", "job", "-o", job_id)
    if shown.returncode == 0 and shown.stdout.strip():
        fields = parse_scontrol(shown.stdout.splitlines()[0])
        return JobStatus(fields.get("JobState", GONE), fields.get("NodeList", ""), fields.get("Reason", ""),
                         fields.get("JobName", ""))
    rows, _ = sacct_rows(cli, job_id)
    if rows:
        state = rows[0].get("State", "").split()  # "CANCELLED by 0"
        return JobStatus(state[0] if state else GONE, rows[0].get("NodeList", ""), "", rows[0].get("JobName", ""))
    return JobStatus(GONE, reason="not known to squeue, scontrol or sacct")


def sacct_rows(cli: SlurmCommands, job_id: str) -> tuple[list[dict[str, str]] | None, str]:
    """Slurm's accounting record of a job, or None and why (e.g. accounting storage is disabled)."""
    out = cli.run("sacct", "-j", job_id, "-P", "-o", SACCT_FIELDS)
    if out.returncode != 0:
        return None, (out.stderr.strip() or f"sacct exited {out.returncode}").splitlines()[0]
    return parse_sacct(out.stdout) or None, "" if out.stdout.strip() else "no sacct record"


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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM for the moment of a submission or a cancellation, then deliver them.

    A Ctrl-C between sbatch accepting a job and evalkit recording its id would leave a job that
    nobody cancels. A signal that arrives inside the block is raised again when it ends, so the
    usual handler (`Interrupted`) runs with the job already on record.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if held:
            signal.raise_signal(held[0])


def _submit(cli: SlurmCommands, store: RunStore, cell: Cell, sbatch: list[str], attempt: int,
            earlier: list[dict[str, Any]]) -> Job | str:
    """Submit one cell; its Job, or sbatch's error message."""
    out = cli.run(*sbatch)
    job_id = out.stdout.strip().split(";")[0] if out.returncode == 0 else ""
    if not job_id.isdigit():
        return (out.stderr.strip() or out.stdout.strip() or f"sbatch exited {out.returncode}").splitlines()[-1]
    job = Job(cell, job_id, attempt, sbatch, _now(), earlier=earlier)
    _save(store, job)
    return job


def _preflight(cli: SlurmCommands, plans: dict[str, list[str]]) -> None:
    """`sbatch --test-only` every submission: what Slurm would refuse is bad input, caught now."""
    for cell_id, sbatch in plans.items():
        out = cli.run(sbatch[0], "--test-only", *sbatch[1:])
        if out.returncode != 0:
            why = "; ".join(line.strip() for line in out.stderr.splitlines() if line.strip()) or f"exit {out.returncode}"
            raise ConfigError(f"cell {cell_id}: Slurm refuses the job ({why}); nothing was submitted")


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


def _exit_status(exit_code: str | None) -> int | None:
    """Slurm's `ExitCode=143:0` (status:signal) -> 143."""
    head = (exit_code or "").partition(":")[0]
    return int(head) if head.isdigit() else None


def _failure(job: Job, slurm: dict[str, Any], tail: str, own: dict[str, Any] | None) -> dict[str, Any]:
    """The error cell.json of a job that left no result of its own (or that Slurm killed)."""
    where = f" on {slurm['node']}" if slurm.get("node") else ""
    if job.state in KILLED_STATES:
        reason = f" ({job.reason})" if job.reason not in ("", "None", job.state) else ""
        limit = f", time limit {slurm['time_limit']}" if job.state == "TIMEOUT" and slurm.get("time_limit") else ""
        message = f"Slurm ended job {job.job_id}{where}: {job.state}{reason}{limit}"
    elif job.state == GONE:
        message = f"Slurm job {job.job_id} ended without a cell.json, and Slurm no longer knows how (no accounting)"
    else:
        message = f"Slurm job {job.job_id}{where} ended {job.state} without a result (exit code {slurm.get('exit_code')})"
    if own and own.get("error"):
        message += f"; the cell reported: {own['error'].get('message', '')}"
    return {
        "id": job.cell.id, "axes": job.cell.axes, "status": "error",
        "started_at": (slurm.get("scontrol") or {}).get("StartTime"), "source": None, "devices": None,
        "timings": {}, "metrics": {}, "finished_at": _now(),
        "error": {"type": "SlurmJob", "message": message, "slurm_state": job.state,
                  "exit_code": _exit_status(slurm.get("exit_code")), "log_tail": tail},
    }


# --- the driver ----------------------------------------------------------------------------------


@dataclass
class _Driver:
    """The state of one `run_on_slurm` call: who to ask, what to report, which job each cell has."""

    cli: SlurmCommands
    config: MatrixConfig
    store: RunStore
    progress: Progress
    on_cell_done: Callable[[dict[str, Any]], None] | None
    plans: dict[str, list[str]]
    jobs: dict[str, Job] = field(default_factory=dict)

    def submit(self, cell: Cell, attempt: int = 1, earlier: list[dict[str, Any]] | None = None) -> None:
        with _signals_held():
            job = _submit(self.cli, self.store, cell, self.plans[cell.id], attempt, earlier or [])
            if isinstance(job, Job):
                self.jobs[cell.id] = job
        if isinstance(job, Job):
            self.progress.update(cell.id, "slurm", job.describe())
        else:
            self.jobs.pop(cell.id, None)
            self._record(cell, self._unsubmitted(cell, job, earlier or []))

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
        cell_dir = self.store.cell_dir(job.cell.id)
        slurm = _slurm_record(self.cli, job, cell_dir)
        secrets = secret_values(os.environ, self.config.secret_env)
        scrub_file(Path(slurm["output"]), secrets)
        own = self.store.read_cell(job.cell.id)
        own = own if own and own.get("status") in FINISHED else None
        killed = job.state in KILLED_STATES
        if own and (own["status"] == "ok" or not killed):
            record = own
        elif killed and job.attempt <= self.config.executor.slurm.retries:
            self.progress.update(job.cell.id, "slurm", f"job {job.job_id} {job.state}; resubmitting (retry {job.attempt})")
            self._set_aside(job)
            self.submit(job.cell, job.attempt + 1, [*job.earlier, _brief(slurm)])
            return
        else:
            record = _failure(job, slurm, _tail(Path(slurm["output"]), secrets), own)
        record["slurm"] = slurm
        self._record(job.cell, record)

    def _set_aside(self, job: Job) -> None:
        """A killed attempt's own cell.json (an error) is not the next attempt's result: keep it aside."""
        path = self.store.cell_dir(job.cell.id) / "cell.json"
        if path.is_file():
            path.replace(path.with_name(f"cell.attempt{job.attempt}.json"))

    def _unsubmitted(self, cell: Cell, message: str, earlier: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": cell.id, "axes": cell.axes, "status": "error", "source": None, "devices": None,
                "timings": {}, "metrics": {}, "finished_at": _now(),
                "error": {"type": "SlurmSubmit", "message": f"sbatch failed: {message}", "exit_code": None,
                          "log_tail": ""},
                "slurm": {"sbatch": self.plans[cell.id], "job_id": None, "earlier_attempts": earlier}}

    def _record(self, cell: Cell, record: dict[str, Any]) -> None:
        self.store.write_cell(cell.id, record)
        self.progress.update(cell.id, record["status"], (record.get("error") or {}).get("message", ""))
        if self.on_cell_done:
            self.on_cell_done(record)

    def cancel_all(self) -> None:
        """scancel every job still queued or running, record it, wait (briefly) for them to end.

        A job may have written its cell.json just before the cancel reached it: that result is
        kept, as a local run keeps the cells finished before Ctrl-C.
        """
        active = [j for j in self.jobs.values() if not j.ended]
        if not active:
            return
        with _signals_held():
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
        runner, which never records a non-ok cell once the run is stopping.
        """
        path = self.store.cell_dir(job.cell.id) / "cell.json"
        own = self.store.read_cell(job.cell.id)
        if not own or own.get("status") not in FINISHED or "slurm" in own:
            return
        if own["status"] == "ok" or path.stat().st_mtime < cancelled_at:
            own["slurm"] = _slurm_record(self.cli, job, self.store.cell_dir(job.cell.id))
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


def run_on_slurm(
    config: MatrixConfig,
    store: RunStore,
    todo: list[Cell],
    options: RunOptions,
    progress: Progress,
    on_cell_done: Callable[[dict[str, Any]], None] | None = None,
    cli: SlurmCommands | None = None,
) -> None:
    """Run `todo` as one Slurm job per cell and return when every job has ended (module docstring).

    Raises ConfigError before submitting anything when Slurm is absent or refuses a job; on any
    exception, Interrupted included, cancels every job still queued or running, then re-raises.
    `cli` is the seam for tests: anything with SlurmCommands' `run`.
    """
    if options.base_url:
        raise ConfigError("--base-url evaluates a server that is already running: use --executor local")
    cli = cli or SlurmCommands()
    if cli.run("sbatch", "--version").returncode != 0:
        raise ConfigError("executor slurm: sbatch does not run here (run from a Slurm login node, or use --executor local)")
    plans = {cell.id: _plan(config, store, cell, options.cache_dir) for cell in todo}
    adopted = _adoptable(cli, store, todo)
    _preflight(cli, {cell_id: argv for cell_id, argv in plans.items() if cell_id not in adopted})
    driver = _Driver(cli, config, store, progress, on_cell_done, plans, dict(adopted))
    try:
        for cell in todo:
            if cell.id in adopted:
                progress.update(cell.id, "slurm", adopted[cell.id].describe() + " (from an earlier driver)")
            else:
                driver.submit(cell)
        driver.watch()
    except BaseException:
        driver.cancel_all()
        raise
