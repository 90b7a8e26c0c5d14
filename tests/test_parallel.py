"""Cells side by side on disjoint device sets give the same results and verdicts as one by one
(the CLI in this process, every cell's engine a simulator process: the `e2e` tier)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from evalkit.evals.engine_figures import TIMING_DEPENDENT
from tests.conftest import demo_without_consistency
from tests.helpers.cli import evalkit_cli

PARALLEL = demo_without_consistency().replace("tensor_parallel: 8", "tensor_parallel: 2").replace(
    "count: 64", "count: 12") + "devices: {count: 4}\n"


def run(tmp_path: Path, name: str, *args: str) -> dict:
    (tmp_path / "cfg.yaml").write_text(PARALLEL)
    done = evalkit_cli("matrix", "--config", "cfg.yaml", "--run-id", name, "--limit", "60", "--only", "graph=piecewise",
                       "--json", "--lock-file", str(tmp_path / "devices.lock"), *args, cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    return json.loads(done.stdout)


def comparable(summary: dict) -> list[tuple]:
    """What two runs of the same matrix agree on: everything but the wall-clock figures."""
    def steady(values: dict | None) -> str:
        return json.dumps({k: v for k, v in (values or {}).items() if k not in TIMING_DEPENDENT}, sort_keys=True)

    return [(c["id"], c["status"], steady(c["metrics"]), steady(c.get("vs_ab")),
             json.dumps([f["message"] for f in c["flags"] if f["check"] != "faster_while_collapsing"]))
            for c in summary["cells"]]


@pytest.mark.usefixtures("engine_processes")
def test_parallel_equals_serial_and_devices_are_disjoint(tmp_path: Path) -> None:
    serial = run(tmp_path, "serial", "--max-parallel", "1")
    parallel = run(tmp_path, "parallel")
    assert comparable(serial) == comparable(parallel)
    flagged = [c["id"] for c in parallel["cells"] if c["flags"]]
    assert flagged == ["dp8-piecewise-fixoff"]
    cells = [json.loads(p.read_text()) for p in (tmp_path / "results" / "parallel").glob("*/cell.json")]
    spans = []
    for cell in cells:
        assert cell["launch"]["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, cell["devices"]))
        spans.append((datetime.fromisoformat(cell["started_at"]), datetime.fromisoformat(cell["finished_at"]),
                      set(cell["devices"])))
    overlapping = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:] if a[0] < b[1] and b[0] < a[1]]
    assert overlapping, "some cells ran at the same time"
    assert all(not (a[2] & b[2]) for a, b in overlapping), "cells that overlap in time never share a device"
