"""The simulator's GPU workers (`--sim-gpu-gib`, evalkit/sim/gpu.py) on a machine without a GPU:
`--sim-gpu-on host` runs the same processes, pipes and lingering with host memory, stopped by
evalkit's own EngineProcess; without torch the flag refuses in one line. The real run, on a GPU,
is configs/gpu-linger.yaml (README "On a real GPU"). The workers are processes, so every test that
starts the simulator asks for `engine_processes` (e2e)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

from evalkit.engine import EngineProcess, free_port
from evalkit.sim.gpu import visible_devices
from tests.helpers.cli import checkout_env
from tests.helpers.sim import run_sim

WORKER_LINE = re.compile(r"sim-gpu: worker 0 pid (\d+) on device 0 uuid HOST-0 \(host memory\) holds 0.01 GiB")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _serve_and_stop(tmp_path: Path, *args: str) -> tuple[int, str]:
    """Start the simulator with a host-memory worker, stop it as evalkit stops an engine (SIGTERM
    to its group, then SIGKILL to the group and its descendants); the worker's pid and the log."""
    port, log = free_port(), tmp_path / "engine.log"
    argv = [sys.executable, "-m", "evalkit.sim", "--model", "gpu-sim", "--server-port", str(port),
            "--sim-gpu-on", "host", "--sim-gpu-gib", "0.01", *args]
    with EngineProcess(argv=argv, env=checkout_env(), log_path=log, base_url=f"http://127.0.0.1:{port}",
                       served_name="gpu-sim", stop_grace_s=5) as engine:
        engine.wait_ready(timeout_s=60)
        found = WORKER_LINE.search(log.read_text())
        assert found, log.read_text()
        assert "sim: 1 GPU worker(s) hold 0.01 GiB each" in log.read_text()
    return int(found.group(1)), log.read_text()


def test_a_worker_stops_with_its_engine(tmp_path: Path, engine_processes: None) -> None:
    pid, _ = _serve_and_stop(tmp_path)
    assert not _alive(pid)


@pytest.mark.smoke  # the default tier's one engine stopped by EngineProcess with a worker of its own (~5 s)
def test_a_lingering_worker_outlives_evalkits_stop_then_gives_its_memory_back(tmp_path: Path,
                                                                             engine_processes: None) -> None:
    pid, _ = _serve_and_stop(tmp_path, "--sim-gpu-linger", "2")
    stopped = time.monotonic()
    assert _alive(pid), "evalkit's stop reached the lingering worker"
    while _alive(pid) and time.monotonic() - stopped < 20:
        time.sleep(0.05)
    lingered = time.monotonic() - stopped
    assert 1.0 < lingered < 20
    log = (tmp_path / "engine.log").read_text()
    assert f"sim-gpu: worker 0 pid {pid}: server gone; keeping 0.01 GiB on HOST-0 for 2 s (--sim-gpu-linger)" in log
    assert f"sim-gpu: worker 0 pid {pid}: exits" in log


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is importable here")
def test_without_torch_the_flag_refuses_in_one_line(tmp_path: Path, engine_processes: None) -> None:
    done = run_sim("--model", "m", "--server-port", "0", "--sim-gpu-gib", "1", timeout=60, env=checkout_env(),
                   cwd=tmp_path)
    assert done.returncode == 4
    fatal = [line for line in done.stderr.splitlines() if "fatal" in line]
    assert fatal == [f"sim: fatal: --sim-gpu-gib needs torch with CUDA, which {sys.executable} cannot import "
                     "(--sim-gpu-on host holds host memory instead)"]
    assert "ready on" not in done.stdout


@pytest.mark.parametrize(("value", "count"), [(None, None), ("", 0), ("0", 1), ("2,3", 2), ("0,-1,1", 1),
                                              ("GPU-4a8f3f0e,GPU-7d1c2b3a", 2)])
def test_one_worker_per_device_that_cuda_visible_devices_leaves(value: str | None, count: int | None) -> None:
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert visible_devices(env) == count


def test_cpu_runs_of_the_simulator_start_no_worker(tmp_path: Path, engine_processes: None) -> None:
    """The default (`--sim-gpu-gib 0`): no worker, no torch, as in the demo and CI."""
    port = free_port()
    argv = [sys.executable, "-m", "evalkit.sim", "--model", "m", "--server-port", str(port)]
    log = tmp_path / "engine.log"
    with EngineProcess(argv=argv, env={**checkout_env(), "CUDA_VISIBLE_DEVICES": "0"}, log_path=log,
                       base_url=f"http://127.0.0.1:{port}", served_name="m", stop_grace_s=5) as engine:
        engine.wait_ready(timeout_s=60)
        assert not [p for p in psutil.Process(engine.pid or os.getpid()).children(recursive=True)
                    if "evalkit.sim.gpu" in " ".join(p.cmdline())]
    assert "sim-gpu" not in log.read_text() and "GPU worker" not in log.read_text()
