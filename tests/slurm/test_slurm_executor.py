"""The Slurm executor on a real Slurm (scripts/slurm-local.sh): one job per cell, same verdicts.

Every test drives `evalkit matrix --executor slurm` as a user would, through the CLI, with the
simulated engine; jobs run `evalkit cell` on the cluster's node and write into the run folder.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from evalkit.evals.engine_figures import TIMING_DEPENDENT
from tests.slurm.conftest import SUBSET, Driver, demo_config, evalkit, squeue_names

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

FOUR_CELLS = ("--only", "graph=full", "--limit", "30")
ONE_CELL = ("--only", "parallel=tp8,graph=full,fix=fixon", "--limit", "30")
SLOW_START = ("--sim-startup-seconds", "6")
"""Keeps a job RUNNING long enough for a test to act on it (argparse: the last value wins)."""


def matrix(config: Path, results: Path, run_id: str, *args: str) -> list[str]:
    return ["matrix", "--config", str(config), "--results-dir", str(results), "--run-id", run_id, "--json", *args]


def verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """What a run concluded, without what legitimately differs (timings and the engine figures that
    depend on them, run id, start times)."""
    return {
        "exit_code": summary["exit_code"],
        "broken_thresholds": summary["broken_thresholds"],
        "cells": {c["id"]: {"status": c["status"],
                            "metrics": {k: v for k, v in c["metrics"].items() if k not in TIMING_DEPENDENT},
                            "flags": [f for f in c["flags"] if f["check"] != "faster_while_collapsing"]}
                  for c in summary["cells"]},
    }


def node_cpus() -> str:
    """The CPUs of the cluster's first node (slurm-local.sh's nodes each declare the machine's)."""
    out = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.split()[0]


def cell_json(run: Path, cell_id: str) -> dict[str, Any]:
    return json.loads((run / cell_id / "cell.json").read_text())


def slurm_json(run: Path, cell_id: str) -> dict[str, Any]:
    return json.loads((run / cell_id / "slurm.json").read_text())


def responses(run: Path, cell_id: str) -> list[str]:
    lines = (run / cell_id / "gsm8k.samples.jsonl").read_text().splitlines()
    return [json.loads(line)["response"] for line in lines]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_config(tmp_path_factory.mktemp("config"))


@pytest.fixture(scope="module")
def local_run(config: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, float]:
    """The subset on this machine (the reference): summary, run folder, wall seconds."""
    results = tmp_path_factory.mktemp("local")
    started = time.monotonic()
    done = evalkit(*matrix(config, results, "local", "--executor", "local", *SUBSET))
    assert done.returncode == 1, done.stderr  # the extra collapse threshold breaks on the buggy cell
    return json.loads(done.stdout), results / "local", time.monotonic() - started


@pytest.fixture(scope="module")
def slurm_run(config: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, float, str]:
    """The same subset as Slurm jobs: summary, run folder, wall seconds, progress lines."""
    results = tmp_path_factory.mktemp("slurm")
    started = time.monotonic()
    done = evalkit(*matrix(config, results, "slurm", *SUBSET))
    assert done.returncode == 1, done.stderr
    return json.loads(done.stdout), results / "slurm", time.monotonic() - started, done.stderr


def test_the_subset_on_slurm_reaches_exactly_the_verdict_of_a_local_run(local_run: Any, slurm_run: Any) -> None:
    local, local_path, local_s = local_run
    remote, remote_path, remote_s, _ = slurm_run
    print(f"wall time of the subset: local {local_s:.1f} s, slurm {remote_s:.1f} s")
    assert verdict(remote) == verdict(local)
    flagged = [c["id"] for c in remote["cells"] if c["flags"]]
    assert flagged == ["dp8-piecewise-fixoff"]
    for cell in remote["cells"]:
        assert responses(remote_path, cell["id"]) == responses(local_path, cell["id"])


def test_each_cell_runs_as_its_own_job_and_cell_json_keeps_slurms_record(slurm_run: Any) -> None:
    summary, run, _, progress = slurm_run
    job_ids = set()
    for cell in summary["cells"]:
        record = cell_json(run, cell["id"])["slurm"]
        job_ids.add(record["job_id"])
        assert record["state"] == "COMPLETED" and record["exit_code"] == "0:0" and record["node"]
        assert record["job_name"] == f"evalkit-slurm-{cell['id']}"
        assert record["scontrol"]["JobState"] == "COMPLETED"
        assert record["scontrol"]["StdOut"] == str((run / cell["id"] / f"slurm-{record['job_id']}.out").resolve())
        assert record["sacct"] is None and "accounting" in record["sacct_note"]  # no slurmdbd here
        assert "--gpus" not in " ".join(record["sbatch"])  # slurm.gpus: false
        assert f"job {record['job_id']} RUNNING ({record['node']})" in progress
        script = (run / cell["id"] / "slurm-job.sh").read_text()
        assert script.startswith("#!/bin/sh\n") and "exec " in script and f"--cell {cell['id']} " in script
    assert len(job_ids) == len(summary["cells"])
    assert not squeue_names("evalkit-slurm-")


def test_ctrl_c_cancels_every_job_and_resume_submits_only_the_unfinished_cells(
    tmp_path: Path, local_run: Any,
) -> None:
    """Each job takes a whole node, so that at least two of the four are still queued when the
    first ends (four jobs side by side end within a second of each other: none would be left)."""
    config = demo_config(tmp_path, sim_args=SLOW_START, cpus_per_task=node_cpus())
    results = tmp_path / "results"
    driver = Driver(*matrix(config, results, "stop", *FOUR_CELLS))
    driver.wait_line(r"\s(ok|error)$", timeout=150)  # one cell finished; the others queued or starting
    driver.process.send_signal(signal.SIGINT)
    assert driver.wait() == 130, driver.log
    run = results / "stop"
    assert not squeue_names("evalkit-stop-")  # no job left behind
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    cells = ["tp8-full-fixon", "tp8-full-fixoff", "dp8-full-fixon", "dp8-full-fixoff"]
    finished = {c: cell_json(run, c)["slurm"]["job_id"] for c in cells if (run / c / "cell.json").is_file()}
    cancelled = {c: slurm_json(run, c) for c in cells if c not in finished}
    assert finished and cancelled, driver.log
    for state in cancelled.values():
        assert state["cancelled"] and state["state"] == "CANCELLED"

    done = evalkit("matrix", "--resume", "stop", "--results-dir", str(results), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "complete" and all(c["status"] == "ok" for c in summary["cells"])
    for cell_id, job_id in finished.items():
        assert cell_json(run, cell_id)["slurm"]["job_id"] == job_id  # kept, not run again
    for cell_id, state in cancelled.items():
        assert cell_json(run, cell_id)["slurm"]["job_id"] != state["job_id"]  # a new job
    reference = verdict(local_run[0])["cells"]
    assert {c: verdict(summary)["cells"][c] for c in cells} == {c: reference[c] for c in cells}


def test_a_job_killed_by_its_time_limit_is_the_cells_error_with_slurms_reason(tmp_path: Path) -> None:
    """Slurm's limits have minute granularity: one minute, killed 60 to 90 s in (KillWait 10 s)."""
    config = demo_config(tmp_path, sim_args=("--sim-tokens-per-second", "5"), time_limit='"1"')
    done = evalkit(*matrix(config, tmp_path / "results", "slow", *ONE_CELL), timeout=200)
    assert done.returncode == 3, done.stderr
    record = cell_json(tmp_path / "results" / "slow", "tp8-full-fixon")
    assert record["status"] == "error"
    assert record["error"]["slurm_state"] == "TIMEOUT"
    assert "TIMEOUT (TimeLimit), time limit 00:01:00" in record["error"]["message"]
    assert "DUE TO TIME LIMIT" in record["error"]["log_tail"]  # the tail of slurm-<jobid>.out
    assert record["slurm"]["state"] == "TIMEOUT" and record["slurm"]["scontrol"]["Reason"] == "TimeLimit"
    summary = json.loads(done.stdout)
    assert summary["failed_cells"] == 1 and "TIMEOUT" in summary["cells"][0]["error"]


def test_a_job_someone_else_cancels_is_resubmitted_while_retries_allow(tmp_path: Path) -> None:
    config = demo_config(tmp_path, sim_args=SLOW_START, retries="1")
    driver = Driver(*matrix(config, tmp_path / "results", "retry", *ONE_CELL))
    first = driver.wait_line(r"job (\d+) RUNNING").group(1)
    subprocess.run(["scancel", first], check=True, timeout=30)
    assert driver.wait() == 0, driver.log
    record = cell_json(tmp_path / "results" / "retry", "tp8-full-fixon")
    assert record["status"] == "ok"
    assert record["slurm"]["attempt"] == 2 and record["slurm"]["job_id"] != first
    assert [(a["job_id"], a["state"]) for a in record["slurm"]["earlier_attempts"]] == [(first, "CANCELLED")]
    assert f"job {first} CANCELLED; resubmitting" in driver.log


def test_a_job_someone_else_cancels_is_the_cells_error_without_retries(tmp_path: Path) -> None:
    config = demo_config(tmp_path, sim_args=SLOW_START)
    driver = Driver(*matrix(config, tmp_path / "results", "noretry", *ONE_CELL))
    job = driver.wait_line(r"job (\d+) RUNNING").group(1)
    subprocess.run(["scancel", job], check=True, timeout=30)
    assert driver.wait() == 3, driver.log
    record = cell_json(tmp_path / "results" / "noretry", "tp8-full-fixon")
    assert record["status"] == "error" and record["error"]["slurm_state"] == "CANCELLED"
    assert record["error"]["message"].startswith(f"Slurm ended job {job} on ")


def test_a_job_slurm_refuses_is_bad_input_and_nothing_is_submitted_or_created(tmp_path: Path) -> None:
    config = demo_config(tmp_path, partition='"nosuch"')
    done = evalkit(*matrix(config, tmp_path / "results", "refused", *FOUR_CELLS))
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cell tp8-full-fixon: Slurm refuses the job (") and "nosuch" in last
    assert last.endswith("nothing was submitted")
    assert not squeue_names("evalkit-refused-")
    assert not (tmp_path / "results").exists()  # checked before the run folder is created


def test_resume_after_a_hard_killed_driver_watches_its_jobs_instead_of_submitting_twice(tmp_path: Path) -> None:
    config = demo_config(tmp_path, sim_args=SLOW_START)
    results = tmp_path / "results"
    driver = Driver(*matrix(config, results, "orphan", *ONE_CELL))
    job = driver.wait_line(r"job (\d+) RUNNING").group(1)
    driver.process.kill()  # SIGKILL: no chance to cancel anything
    driver.wait()
    assert squeue_names("evalkit-orphan-") == ["evalkit-orphan-tp8-full-fixon"]
    done = evalkit("matrix", "--resume", "orphan", "--results-dir", str(results), "--json")
    assert done.returncode == 0, done.stderr
    assert f"job {job} RUNNING (" in done.stderr and "(from an earlier driver)" in done.stderr
    assert cell_json(results / "orphan", "tp8-full-fixon")["slurm"]["job_id"] == job
