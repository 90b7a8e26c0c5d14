"""cell.json and run.json as typed records: every shape evalkit writes reads back to exactly itself.

The shapes below are real files (trimmed: fewer argv words, metrics and log lines), one per
writer: the cell lifecycle (ok, engine error, internal error), the local executor (skipped), the
Slurm driver (a job's own record with `slurm` added, a job Slurm killed, a submission sbatch
refused) and run.json (new and resumed).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import EngineSettings
from evalkit.config.cells import Cell
from evalkit.errors import ConfigError
from evalkit.store.records import SCHEMA_VERSION, CellError, CellRecord, RunRecord, failed_cell

AXES = {"parallel": "tp8", "graph": "full", "fix": "fixon"}
LAUNCH = {"argv": ["python3", "-m", "evalkit.sim", "--server-port", "41927"], "env": {"HF_TOKEN": "***"},
          "host": "127.0.0.1", "port": 41927, "health_path": "/health"}
SLURM = {"job_id": "100", "job_name": "evalkit-r1-tp8-full-fixon", "attempt": 1, "state": "TIMEOUT", "node": "node1",
         "reason": "TimeLimit", "cancelled": False, "submitted_at": "2026-12-04T01:43:44+00:00",
         "sbatch": ["sbatch", "--parsable", "--job-name=evalkit-r1-tp8-full-fixon", "/r1/tp8-full-fixon/slurm-job.sh"],
         "earlier_attempts": [], "exit_code": "0:15", "time_limit": "00:01:00",
         "output": "/r1/tp8-full-fixon/slurm-100.out",
         "scontrol": {"JobId": "100", "JobState": "TIMEOUT", "Reason": "TimeLimit", "ExitCode": "0:15"},
         "sacct": None, "sacct_note": "Slurm accounting storage is disabled"}

CELLS: dict[str, dict[str, Any]] = {
    "ok": {
        "schema_version": 1, "id": "tp8-full-fixon", "axes": AXES, "status": "ok",
        "started_at": "2026-12-04T01:17:38+00:00", "source": None, "devices": None,
        "timings": {"engine_start_s": 0.84, "engine_ready_s": 0.951, "warmup_attempts": 1, "gsm8k_s": 1.083,
                    "repetition_s": 0.915, "engine_stop_s": 0.155, "engine_wall_s": 3.252, "total_s": 3.253},
        "metrics": {"gsm8k": {"strict": 0.94, "flexible": 0.94, "n": 1319, "task_version": 3.0, "chat_template": None},
                    "repetition": {"collapse_rate": 0.0, "collapsed": 0, "n": 64}},
        "launch": LAUNCH, "engine_pid": 2646, "effective_mode": "FULL", "finished_at": "2026-12-04T01:17:41+00:00",
    },
    "ok on devices, from a source tree": {
        "schema_version": 1, "id": "fixoff", "axes": {"fix": "fixoff"}, "status": "ok",
        "started_at": "2026-12-04T01:17:38+00:00",
        "source": {"repo": "/src/engine", "ref": "HEAD~1", "sha": "0e9804c21aa"}, "devices": [2, 3],
        "timings": {"total_s": 3.2}, "metrics": {}, "launch": LAUNCH, "engine_pid": 7, "effective_mode": None,
        "finished_at": "2026-12-04T01:17:41+00:00",
    },
    "engine error": {
        "schema_version": 1, "id": "faulty", "axes": {"case": "faulty"}, "status": "error",
        "started_at": "2026-12-04T01:43:52+00:00", "source": None, "devices": None,
        "timings": {"engine_wall_s": 0.449, "total_s": 0.45}, "metrics": {}, "launch": LAUNCH, "engine_pid": 29474,
        "error": {"type": "EngineExited", "message": "engine exited with code 3 after 0.4 s", "exit_code": 3,
                  "log_tail": "sim: fatal: simulated start-up failure (--sim-fault crash-startup)"},
        "finished_at": "2026-12-04T01:43:52+00:00",
    },
    "internal error": {
        "schema_version": 1, "id": "external", "axes": {}, "status": "error",
        "started_at": "2026-12-04T01:43:52+00:00", "source": None, "devices": None, "timings": {"total_s": 0.1},
        "metrics": {}, "launch": {"base_url": "http://127.0.0.1:8000", "note": "external server: not started by evalkit"},
        "traceback": "Traceback (most recent call last):\nRuntimeError: boom",
        "error": {"type": "RuntimeError", "message": "internal error: RuntimeError: boom", "exit_code": None,
                  "log_tail": ""},
        "finished_at": "2026-12-04T01:43:52+00:00",
    },
    "skipped": {
        "schema_version": 1, "id": "healthy", "axes": {"case": "healthy"}, "status": "skipped", "timings": {},
        "metrics": {}, "error": {"message": "the run budget was used up before this cell started"},
        "finished_at": "2026-12-04T01:43:52+00:00",
    },
    "slurm job's own record": {
        "schema_version": 1, "id": "tp8-full-fixon", "axes": AXES, "status": "ok",
        "started_at": "2026-12-04T01:17:38+00:00", "source": None, "devices": None, "timings": {"total_s": 3.2},
        "metrics": {}, "launch": LAUNCH, "engine_pid": 2646, "effective_mode": "FULL",
        "finished_at": "2026-12-04T01:17:41+00:00", "slurm": {**SLURM, "state": "COMPLETED", "exit_code": "0:0"},
    },
    "slurm killed the job": {
        "schema_version": 1, "id": "tp8-full-fixon", "axes": AXES, "status": "error", "started_at": None,
        "source": None, "devices": None, "timings": {}, "metrics": {},
        "error": {"type": "SlurmJob", "message": "Slurm ended job 100 on node1: TIMEOUT (TimeLimit), time limit 00:01:00",
                  "exit_code": 0, "log_tail": "*** JOB 100 ON node1 CANCELLED DUE TO TIME LIMIT ***",
                  "slurm_state": "TIMEOUT"},
        "finished_at": "2026-12-04T01:43:44+00:00", "slurm": SLURM,
    },
    "sbatch refused the submission": {
        "schema_version": 1, "id": "tp8-full-fixon", "axes": AXES, "status": "error", "source": None, "devices": None,
        "timings": {}, "metrics": {},
        "error": {"type": "SlurmSubmit", "message": "sbatch failed: sbatch: error: Job violates accounting/QOS policy",
                  "exit_code": None, "log_tail": ""},
        "finished_at": "2026-12-04T01:43:44+00:00",
        "slurm": {"sbatch": SLURM["sbatch"], "job_id": None, "earlier_attempts": []},
    },
}

RUN: dict[str, Any] = {
    "schema_version": 1, "run_id": "r", "status": "complete", "model": "sim/faults", "served_name": "faulty",
    "engine": "sim", "simulated": True, "config_path": "/tmp/cfg.yaml",
    "config": {"model": "sim/faults", "engine": {"profile": "sim", "env": {"HF_TOKEN": "***"}}, "axes": {}},
    "cells": ["faulty", "healthy"], "limit": 5, "only": ["case=faulty|healthy"], "base_url": None,
    "listen_host": "127.0.0.1", "command": ["evalkit", "matrix", "--limit", "5"], "evalkit_version": "0.1.0",
    "evalkit_git_sha": "052117e41e01232c8a1a52d23a1b28e4f60cb17f", "lm_eval_version": "0.4.13", "python": "3.11.7",
    "host": {"hostname": "vm", "platform": "Linux-6.18-x86_64-with-glibc2.36", "cpus": 2},
    "started_at": "2026-12-04T01:43:52+00:00", "finished_at": "2026-12-04T01:43:58+00:00",
}


def cell(axes: dict[str, str] | None = None) -> Cell:
    return Cell("tp8-full-fixon", axes or AXES, EngineSettings(), (), {}, None)


@pytest.mark.parametrize("shape", list(CELLS))
def test_every_cell_json_shape_reads_back_to_exactly_itself(tmp_path: Path, shape: str) -> None:
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(CELLS[shape]))
    record = CellRecord.load(path)
    assert record.dump() == CELLS[shape]
    assert list(record.dump()) == list(CELLS[shape])  # and in the order written


def test_every_run_json_shape_reads_back_to_exactly_itself(tmp_path: Path) -> None:
    resumed = {**RUN, "resumed_at": ["2026-12-04T02:00:00+00:00"]}
    for shape in (RUN, resumed, {**RUN, "status": "interrupted", "finished_at": None}):
        path = tmp_path / "run.json"
        path.write_text(json.dumps(shape))
        assert RunRecord.load(path).dump() == shape


def test_a_file_written_before_schema_versions_is_version_1_and_says_so_when_written_again(tmp_path: Path) -> None:
    old = {k: v for k, v in CELLS["engine error"].items() if k != "schema_version"}
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(old))
    record = CellRecord.load(path)
    assert record.schema_version == SCHEMA_VERSION == 1
    assert record.dump() == {"schema_version": 1, **old}
    assert RunRecord.model_validate({k: v for k, v in RUN.items() if k != "schema_version"}).dump()["schema_version"] == 1


def test_a_file_from_a_newer_evalkit_or_not_a_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    path.write_text(json.dumps({**CELLS["ok"], "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(ConfigError, match="schema_version 2 is newer than this evalkit's 1"):
        CellRecord.load(path)
    path.write_text(json.dumps({**CELLS["ok"], "status": "finished"}))
    with pytest.raises(ConfigError, match=r"cell.json: not a CellRecord \(\('status',\)"):
        CellRecord.load(path)


def test_keys_a_newer_writer_added_survive_a_read_and_a_rewrite() -> None:
    data = copy.deepcopy(CELLS["slurm killed the job"])
    data["future"] = {"x": 1}
    data["error"]["hint"] = "resubmit with more time"
    assert CellRecord.model_validate(data).dump() == data


def test_the_record_of_a_cell_without_a_result_is_built_one_way() -> None:
    skipped = failed_cell(cell(), CellError(message="budget"), status="skipped").dump()
    assert list(skipped) == ["schema_version", "id", "axes", "status", "timings", "metrics", "error", "finished_at"]
    assert skipped["error"] == {"message": "budget"} and skipped["status"] == "skipped"
    refused = failed_cell(cell(), CellError(type="SlurmSubmit", message="sbatch failed: x", exit_code=None,
                                            log_tail=""), source=None, devices=None, slurm={"job_id": None}).dump()
    assert set(refused) == set(CELLS["sbatch refused the submission"])
    running = CellRecord.begin(cell(), started_at="t0", source=None, devices=[0, 1])
    running.launch, running.engine_pid = LAUNCH, 42
    running.timings["engine_wall_s"] = 0.4
    failed = failed_cell(cell(), CellError(type="EngineExited", message="exited", exit_code=3, log_tail="tail"),
                         base=running).dump()
    assert failed["status"] == "error" and failed["started_at"] == "t0" and failed["devices"] == [0, 1]
    assert failed["launch"] == LAUNCH and failed["engine_pid"] == 42 and failed["timings"] == {"engine_wall_s": 0.4}
    assert set(failed) == set(CELLS["engine error"])
