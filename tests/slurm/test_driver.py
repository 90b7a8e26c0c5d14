"""The Slurm driver's decisions, against a scripted Slurm: collect, retry, fail, cancel.

`FakeSlurm` answers sbatch, squeue, scontrol, sacct and scancel the way Slurm 22.05 does (shapes
taken from scripts/slurm-local.sh's cluster); each job walks through a scripted list of states,
and a job that "runs" writes the cell.json `evalkit cell` would. No Slurm needed.
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import load_config
from evalkit.config.cells import expand
from evalkit.errors import ConfigError, Interrupted
from evalkit.run.options import RunOptions
from evalkit.run.signals import interrupts_raise, signals_held
from evalkit.run.slurm import SlurmExecutor
from evalkit.store import RunStore
from tests.slurm.conftest import demo_config


@dataclass
class Life:
    """One job as Slurm would show it on successive polls; the last state sticks."""

    states: tuple[str, ...] = ("PENDING", "RUNNING", "COMPLETED")
    writes: str | None = "ok"
    """The cell.json status the job writes when it ends (None: it writes nothing)."""
    exit_code: str = "0:0"
    reason: str = "None"
    output: str = "[12:00:00] cell  ok\n"


def done(code: int = 0, out: str = "", err: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], code, out, err)


@dataclass
class FakeSlurm:
    lives: list[Life]
    refuse: str = ""
    """sbatch --test-only's error, if Slurm would refuse every job."""
    full_after: int | None = None
    """Submissions accepted before sbatch starts failing (e.g. a queue limit)."""
    on_poll: Any = None
    calls: list[tuple[str, ...]] = field(default_factory=list)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        command = {"sbatch": self.sbatch, "squeue": self.squeue, "scontrol": self.scontrol, "sacct": self.sacct,
                   "scancel": self.scancel}[argv[0]]
        return command(list(argv[1:]))

    def sbatch(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        if args == ["--version"]:
            return done(0, "slurm-wlm 22.05.8\n")
        if "--test-only" in args:
            return done(1, err=self.refuse) if self.refuse else done(0, err="sbatch: Job 1 to start at ...")
        if self.full_after is not None and len(self.jobs) >= self.full_after:
            return done(1, err="sbatch: error: Batch job submission failed: Job violates accounting/QOS policy\n")
        job_id = str(100 + len(self.jobs))
        option = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith("--") and "=" in a}
        cell_dir = Path(option["--output"]).parent
        self.jobs[job_id] = {"life": self.lives[len(self.jobs)], "step": -1, "name": option["--job-name"],
                             "cell_dir": cell_dir, "cancelled": False}
        return done(0, f"{job_id}\n")

    def state(self, job_id: str) -> str:
        job = self.jobs[job_id]
        return "CANCELLED" if job["cancelled"] else job["life"].states[max(job["step"], 0)]

    def squeue(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        if self.on_poll:
            self.on_poll(self)
        lines = []
        for job_id in args[args.index("-j") + 1].split(","):
            job = self.jobs[job_id]
            job["step"] = min(job["step"] + 1, len(job["life"].states) - 1)
            if self.state(job_id) in ("COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED"):
                self._end(job_id)
            lines.append(f"{job_id}|{self.state(job_id)}|node1|{job['life'].reason}|{job['name']}")
        return done(0, "\n".join(lines) + "\n")

    def _end(self, job_id: str) -> None:
        job = self.jobs[job_id]
        if job.get("ended"):
            return
        job["ended"] = True
        (job["cell_dir"] / f"slurm-{job_id}.out").write_text(job["life"].output)
        if job["life"].writes and not job["cancelled"]:
            record = {"id": job["cell_dir"].name, "axes": {}, "status": job["life"].writes, "metrics": {},
                      "timings": {}, "error": {"message": "eval failed"} if job["life"].writes == "error" else None}
            (job["cell_dir"] / "cell.json").write_text(json.dumps(record))

    def scontrol(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        job_id = args[-1]
        job = self.jobs[job_id]
        return done(0, f"JobId={job_id} JobName={job['name']} JobState={self.state(job_id)} "
                       f"Reason={job['life'].reason} ExitCode={job['life'].exit_code} TimeLimit=00:01:00 "
                       f"NodeList=node1 StdOut={job['cell_dir']}/slurm-{job_id}.out\n")

    def sacct(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        return done(1, err="Slurm accounting storage is disabled\n")

    def scancel(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        for job_id in args:
            self.jobs[job_id]["cancelled"] = True
            self._end(job_id)
        return done(0)

    def submitted(self) -> list[str]:
        return [a[-1] for a in self.calls if a[0] == "sbatch" and "--test-only" not in a and "--version" not in a]


class Recorder:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str]] = []

    def update(self, cell_id: str, state: str, detail: str = "") -> None:
        self.lines.append((cell_id, state, detail))


def executor(tmp_path: Path, slurm: FakeSlurm, **settings: str) -> SlurmExecutor:
    """The Slurm executor of run r1 of the demo config (1/100 s polls), talking to `slurm`."""
    config = load_config(demo_config(tmp_path, poll_s="0.01", **settings))  # type: ignore[arg-type]  # str settings only
    store = RunStore(tmp_path / "results", "r1")
    options = RunOptions(results_dir=store.results_dir, cache_dir=tmp_path / "cache", run_id="r1")
    return SlurmExecutor(config, store, options, Recorder(), cli=slurm)  # type: ignore[arg-type]


def drive(tmp_path: Path, slurm: FakeSlurm, cells: int = 1, **settings: str) -> tuple[RunStore, list[dict[str, Any]]]:
    """Preflight, create the run folder, run the first `cells` demo cells: the store and what
    on_cell_done received."""
    slurm_executor = executor(tmp_path, slurm, **settings)
    todo = expand(slurm_executor.config)[:cells]
    slurm_executor.preflight(todo)
    slurm_executor.store.create()
    done_cells: list[dict[str, Any]] = []
    slurm_executor.run(todo, done_cells.append)
    return slurm_executor.store, done_cells


def test_a_finished_job_s_own_cell_json_is_the_result_with_slurms_record_added(tmp_path: Path) -> None:
    store, collected = drive(tmp_path, FakeSlurm([Life(), Life(writes="error", states=("RUNNING", "FAILED"),
                                                                  exit_code="3:0")]), cells=2)
    ok, error = store.read_cell("tp8-full-fixon"), store.read_cell("tp8-full-fixoff")
    assert ok and ok["status"] == "ok" and ok["slurm"]["job_id"] == "100" and ok["slurm"]["state"] == "COMPLETED"
    assert ok["slurm"]["scontrol"]["JobState"] == "COMPLETED" and ok["slurm"]["sacct"] is None
    assert ok["slurm"]["sacct_note"] == "Slurm accounting storage is disabled"
    assert error and error["error"]["message"] == "eval failed"  # the cell's own error, untouched
    assert [c["id"] for c in collected] == ["tp8-full-fixoff", "tp8-full-fixon"]  # as their jobs end


def test_a_job_slurm_killed_is_resubmitted_while_retries_allow(tmp_path: Path) -> None:
    slurm = FakeSlurm([Life(states=("RUNNING", "NODE_FAIL"), writes=None, reason="NodeDown"),
                       Life(states=("RUNNING", "PREEMPTED"), writes=None), Life()])
    store, _ = drive(tmp_path, slurm, retries="2")
    record = store.read_cell("tp8-full-fixon")
    assert record and record["status"] == "ok"
    assert record["slurm"]["attempt"] == 3
    assert [(a["job_id"], a["state"]) for a in record["slurm"]["earlier_attempts"]] == [("100", "NODE_FAIL"),
                                                                                       ("101", "PREEMPTED")]


def test_a_job_killed_with_no_retries_left_is_the_cells_error_with_slurms_reason_and_log_tail(tmp_path: Path) -> None:
    slurm = FakeSlurm([Life(states=("RUNNING", "TIMEOUT"), writes=None, reason="TimeLimit", exit_code="0:15",
                            output="started\n*** JOB 100 ON node1 CANCELLED DUE TO TIME LIMIT ***\n")] * 2)
    store, collected = drive(tmp_path, slurm, retries="1")
    record = store.read_cell("tp8-full-fixon")
    assert record and record["status"] == "error" and record["error"]["slurm_state"] == "TIMEOUT"
    assert record["error"]["message"] == "Slurm ended job 101 on node1: TIMEOUT (TimeLimit), time limit 00:01:00"
    assert record["error"]["log_tail"].endswith("DUE TO TIME LIMIT ***")
    assert slurm.submitted() == [str(tmp_path / "results/r1/tp8-full-fixon/slurm-job.sh")] * 2
    assert collected == [record]


def test_a_killed_attempts_own_error_is_set_aside_and_the_retry_is_the_result(tmp_path: Path) -> None:
    slurm = FakeSlurm([Life(states=("RUNNING", "TIMEOUT"), writes="error"), Life()])
    store, _ = drive(tmp_path, slurm, retries="1")
    record = store.read_cell("tp8-full-fixon")
    assert record and record["status"] == "ok" and record["slurm"]["attempt"] == 2
    first = json.loads((tmp_path / "results/r1/tp8-full-fixon/cell.attempt1.json").read_text())
    assert first["status"] == "error"


def test_a_submission_sbatch_rejects_is_that_cells_error_and_the_others_run(tmp_path: Path) -> None:
    store, _ = drive(tmp_path, FakeSlurm([Life()], full_after=1), cells=2)
    assert (store.read_cell("tp8-full-fixon") or {})["status"] == "ok"
    rejected = store.read_cell("tp8-full-fixoff") or {}
    assert rejected["status"] == "error"
    assert rejected["error"]["message"] == ("sbatch failed: sbatch: error: Batch job submission failed: "
                                            "Job violates accounting/QOS policy")


def test_a_job_that_exits_without_a_result_is_an_error_and_never_retried(tmp_path: Path) -> None:
    slurm = FakeSlurm([Life(states=("RUNNING", "FAILED"), writes=None, exit_code="2:0",
                            output="error: config changed since run r1 started\n")])
    store, _ = drive(tmp_path, slurm, retries="3")
    record = store.read_cell("tp8-full-fixon")
    assert record and record["status"] == "error"
    assert record["error"]["message"] == "Slurm job 100 on node1 ended FAILED without a result (exit code 2:0)"
    assert record["error"]["exit_code"] == 2 and "config changed" in record["error"]["log_tail"]
    assert len(slurm.submitted()) == 1


def test_an_interrupt_cancels_every_queued_or_running_job_by_id_and_records_it(tmp_path: Path) -> None:
    def ctrl_c_on_second_poll(slurm: FakeSlurm) -> None:
        if sum(1 for a in slurm.calls if a[0] == "squeue") == 2:
            raise Interrupted("SIGINT")

    slurm = FakeSlurm([Life(states=("RUNNING",)), Life(states=("PENDING",)), Life(states=("PENDING",))],
                      on_poll=ctrl_c_on_second_poll)
    with pytest.raises(Interrupted):
        drive(tmp_path, slurm, cells=3)
    assert ("scancel", "100", "101", "102") in slurm.calls
    for cell_id, job_id in (("tp8-full-fixon", "100"), ("tp8-full-fixoff", "101"), ("tp8-piecewise-fixon", "102")):
        state = json.loads((tmp_path / "results/r1" / cell_id / "slurm.json").read_text())
        assert (state["job_id"], state["cancelled"], state["state"]) == (job_id, True, "CANCELLED")
        assert not (tmp_path / "results/r1" / cell_id / "cell.json").exists()  # --resume runs them


def test_a_job_slurm_would_refuse_is_bad_input_before_anything_is_submitted_or_created(tmp_path: Path) -> None:
    slurm = FakeSlurm([Life()], refuse="sbatch: error: invalid partition specified: nosuch\n")
    with pytest.raises(ConfigError, match=r"cell tp8-full-fixon: Slurm refuses the job \(sbatch: error: invalid "
                                          r"partition specified: nosuch\); nothing was submitted"):
        drive(tmp_path, slurm)
    assert slurm.submitted() == []
    assert not (tmp_path / "results").exists()


def test_the_preflight_asks_slurm_about_the_very_job_it_will_submit(tmp_path: Path) -> None:
    slurm = FakeSlurm([Life()])
    store, _ = drive(tmp_path, slurm)
    tested = next(a for a in slurm.calls if "--test-only" in a)
    submitted = next(a for a in slurm.calls if a[0] == "sbatch" and "--test-only" not in a and "--version" not in a)
    assert tested[:2] == ("sbatch", "--test-only") and tested[2:-1] == submitted[1:-1]  # but the script's folder
    assert submitted[-1] == str((store.cell_dir("tp8-full-fixon") / "slurm-job.sh").resolve())


def test_no_sbatch_is_bad_input(tmp_path: Path) -> None:
    class NoSlurm(FakeSlurm):
        def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
            return done(127, err=f"{argv[0]}: command not found")

    with pytest.raises(ConfigError, match="sbatch does not run here"):
        drive(tmp_path, NoSlurm([]))
    assert not (tmp_path / "results").exists()


def test_a_ctrl_c_during_a_submission_arrives_after_the_job_is_on_record() -> None:
    recorded: list[str] = []
    with pytest.raises(Interrupted), interrupts_raise(), signals_held():
        signal.raise_signal(signal.SIGINT)  # as if Ctrl-C hit while sbatch was answering
        recorded.append("job 42")
    assert recorded == ["job 42"]
