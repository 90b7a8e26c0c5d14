"""Talking to Slurm: what a cell's job is (its script and sbatch argv) and Slurm's client commands.

Everything here is a pure function of the config and the run, or one call of `sbatch`, `squeue`,
`scontrol` or `sacct` and a parser of its answer; the driver that decides what to submit, watch,
retry and cancel is run/slurm.py.

Why plain `sbatch` argv rather than submitit or pyslurm: the job is one CLI command that already
exists (`evalkit cell`), so pickling Python callables buys nothing; no extra dependency, no
version coupling to the cluster's libslurm; each job is an ordinary Slurm job a user can inspect
(`squeue`, `scontrol show job`, `sacct`) and cancel (`scancel ID`) with Slurm's own tools, and
its script in the cell folder can be resubmitted by hand.

Why a script file and not `sbatch --wrap`: `--wrap` takes one shell string, and sbatch has no
form that runs an argv directly (its positional arguments must name a `#!` script). The script
quotes every argv element with `shlex.quote`, so a path or cell id is always one word, and the
cell folder keeps an exact, re-runnable record of what the job ran.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.run.scheduler import device_need
from evalkit.store import RunStore

SQUEUE_FORMAT = "%i|%T|%N|%r|%j"
"""job id | state | node list | reason | job name (last: the only field we did not choose)."""
COMMAND_TIMEOUT_S = 60.0

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

    A cell whose topology spans several nodes is one job of that many nodes (its batch step
    starts each part on its node: run/slurm_nodes.py), asking on every node for the devices of
    its busiest node (`--gpus-per-node`), since Slurm gives each node the same.
    """
    slurm = config.executor.slurm
    cell_dir = cell_dir.resolve()
    topology = cell.topology
    nodes = max(slurm.nodes, topology.nodes)
    argv = [
        "sbatch", "--parsable", f"--job-name={job_name(run_id, cell.id)}",
        f"--output={_slurm_pattern(cell_dir)}/slurm-%j.out", f"--chdir={Path.cwd()}",
        "--export=ALL", "--no-requeue", f"--nodes={nodes}",
    ]
    if not slurm.gpus:
        gpus: dict[str, int | None] = {}
    elif topology.nodes > 1:
        gpus = {"--gpus-per-node": max(topology.devices_on(i) for i in range(topology.nodes))}
    else:
        gpus = {"--gpus": device_need(cell.settings)}
    optional = {
        "--partition": slurm.partition, "--account": slurm.account, "--qos": slurm.qos,
        "--constraint": slurm.constraint, "--time": slurm.time_limit, "--cpus-per-task": slurm.cpus_per_task,
        "--mem": slurm.mem, **gpus,
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


def exit_status(exit_code: str | None) -> int | None:
    """Slurm's `ExitCode=143:0` (status:signal) -> 143."""
    head = (exit_code or "").partition(":")[0]
    return int(head) if head.isdigit() else None


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

