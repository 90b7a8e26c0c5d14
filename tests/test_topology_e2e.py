"""The PD demo end to end: `evalkit matrix --model demo-pd` on real simulator processes (each PD
cell a prefill worker, a decode worker and the router), judged against each PD cell's aggregated
twin; only the cell whose prefill TP is not its decode TP is flagged, and every part of every cell
is recorded and gone afterwards."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.cli import checkout_env, evalkit_cli

LIMIT = "100"
"""Questions and prompts per eval: the handoff bug's loss (GSM8K about -7 points, loops in about a
third of the long generations) shows at this n; the healthy pair's does not."""


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.usefixtures("engine_processes")
def test_the_pd_demo_flags_exactly_the_cell_whose_prefill_tp_is_not_its_decode_tp(tmp_path: Path) -> None:
    done = evalkit_cli("matrix", "--model", "demo-pd", "--limit", LIMIT, "--json", "--run-id", "pd",
                       "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # a threshold broke, no cell failed to run
    summary = json.loads(done.stdout)
    cells = {c["id"]: c for c in summary["cells"]}
    assert {c["id"]: c["status"] for c in summary["cells"]} == {"off": "ok", "1p1d": "ok", "1p1d_tp8tp4": "ok"}
    assert [cell for cell, c in cells.items() if c["flags"]] == ["1p1d_tp8tp4"]
    assert {f["reference"] for f in cells["1p1d_tp8tp4"]["flags"] if "reference" in f} <= {"off"}
    run = tmp_path / "results" / "pd"
    for cell in ("1p1d", "1p1d_tp8tp4"):
        record = json.loads((run / cell / "cell.json").read_text())
        parts = {p["part"]: p for p in record["parts"]}
        assert list(parts) == ["prefill0", "decode0", "router"] and record["launch"]["topology"] == "pd"
        assert all(not psutil.pid_exists(p["pid"]) or psutil.Process(p["pid"]).status() == psutil.STATUS_ZOMBIE
                   for p in parts.values())
        assert parts["router"]["ready_s"] > max(parts["prefill0"]["ready_s"], parts["decode0"]["ready_s"])
        assert parts["prefill0"]["metrics"]["requests"] > 0 and parts["decode0"]["metrics"]["generation_tokens"] > 0
        assert all((run / cell / p["log"]).is_file() for p in parts.values())
    prefill_tp = json.loads((run / "1p1d_tp8tp4" / "cell.json").read_text())["parts"][0]["argv"]
    assert prefill_tp[prefill_tp.index("-tp") + 1] == "8"


@pytest.mark.usefixtures("engine_processes")
def test_a_decode_worker_that_dies_mid_eval_is_the_cells_error_with_its_log_tail(tmp_path: Path) -> None:
    config = tmp_path / "pd-crash.yaml"
    config.write_text("""
model: sim/pd-crash
engine: {profile: sim, args: ["--sim-startup-seconds", "0.1"]}
axes:
  disagg:
    crash:
      topology: {pd: {decode: {args: ["--sim-fault", "crash-after", "--sim-fault-after", "5"]}}}
evals:
  repetition: {enabled: false}
""")
    done = evalkit_cli("matrix", "--config", str(config), "--limit", "30", "--json", "--run-id", "crash",
                       "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert done.returncode == 3, done.stderr  # the cell failed to run
    record = json.loads((tmp_path / "results" / "crash" / "crash" / "cell.json").read_text())
    assert record["status"] == "error" and record["error"]["message"].startswith("decode0: engine exited with code 1")
    assert "sim: fault crash-after" in record["error"]["log_tail"]
    parts = {p["part"]: p for p in record["parts"]}
    assert parts["decode0"]["exit_code"] == 1 and "crash-after" in parts["decode0"]["log_tail"]
    assert parts["prefill0"]["exit_code"] != 1 and parts["router"]["stop_s"] is not None


def _parts_in(folder: Path) -> list[psutil.Process]:
    """Every process on the box whose working directory is inside `folder` (each part starts in its
    own folder of its cell's), orphans included: an orphan is no longer this test's descendant."""
    found = []
    for process in psutil.process_iter():
        try:
            if Path(process.cwd()).is_relative_to(folder):
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.mark.usefixtures("engine_processes")
def test_ctrl_c_while_a_pd_cell_runs_its_evals_stops_every_part(tmp_path: Path) -> None:
    config = tmp_path / "pd-int.yaml"
    config.write_text("""
model: sim/pd-interrupt
engine: {profile: sim, args: ["--sim-startup-seconds", "0.1"]}
axes: {disagg: [1p1d]}
evals: {repetition: {count: 8, max_tokens: 2048, concurrency: 4}}
""")
    run = subprocess.Popen([sys.executable, "-m", "evalkit.cli", "matrix", "--config", str(config), "--run-id", "int",
                            "--results-dir", str(tmp_path / "results")], cwd=tmp_path, env=checkout_env(None),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    router_log = tmp_path / "results" / "int" / "1p1d" / "router.log"
    deadline = time.monotonic() + 120
    while not (router_log.is_file() and "ready on" in router_log.read_text()) and run.poll() is None:
        assert time.monotonic() < deadline, "the router never became ready"
        time.sleep(0.2)
    time.sleep(2.0)  # the evals are running through the router now
    parts = tmp_path / "results" / "int" / "1p1d" / "engine_cwd"
    assert len(_parts_in(parts)) == 3
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    _, alive = psutil.wait_procs(_parts_in(parts), timeout=5)
    assert not alive, f"parts left running: {[p.pid for p in alive]}"
    assert not (tmp_path / "results" / "int" / "1p1d" / "cell.json").exists()  # interrupted: --resume runs it again
