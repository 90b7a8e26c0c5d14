"""Around an engine's life, its GPUs (run/gpus.py `EngineGpus`, devices/telemetry.py), read in this
process through a fake `nvidia-smi` first on PATH (tests/helpers/gpus.py) whose state stands for
the engine: its devices' UUIDs and used memory before it starts, telemetry while the evals run,
then the wait until its memory is back, or the cell's error naming who still holds it. The same
around a real engine process is tests/test_gpu_matrix.py's (`e2e`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import MatrixConfig, parse_config
from evalkit.errors import GpuMemoryHeld
from evalkit.run.gpus import CellGpus
from tests.helpers.gpus import install
from tests.test_gpu_devices import UUIDS, box

ENGINE = {"pid": 4242, "name": "python3", "gpu": 1, "mib": 70000, "util": 90}


def config(release_s: float) -> MatrixConfig:
    return parse_config({"model": "m", "engine": {"profile": "sim"}, "devices": {"count": 2},
                         "timeouts": {"gpu_release": release_s}}, "gpus.yaml")


@pytest.fixture
def gpu_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Sets what the fake nvidia-smi reports from now on."""
    def set_state(state: dict[str, Any]) -> None:
        for name, value in install(tmp_path / "bin", tmp_path / "gpu.json", state, "nvidia-smi").items():
            monkeypatch.setenv(name, value)
    set_state(box())
    return set_state


def test_an_engine_s_devices_telemetry_and_memory_given_back_are_its_cell_s_gpu_record(gpu_state: Any) -> None:
    watch = CellGpus(config(release_s=30), (1,)).watch(threading.Event())
    with watch:
        gpu_state(box(foreign=[ENGINE]))  # the engine loaded its weights
        with watch.sampling():
            time.sleep(0.7)  # the sampler reads at 2 Hz
        gpu_state(box(foreign=[{**ENGINE, "until": time.time() + 0.5}]))  # stopped; its memory comes back
    part = watch.part()
    assert part is not None
    assert part.uuids == [UUIDS[1]] and part.before_mib == {"1": 1}
    assert part.telemetry is not None and part.telemetry["samples"] >= 1
    assert part.telemetry["devices"] == [{"index": 1, "uuid": UUIDS[1], "peak_used_mib": 70001, "mean_util_pct": 90.0}]
    assert part.release is not None and part.release["released"] and part.release_wait_s == part.release["wait_s"]


def test_memory_never_given_back_is_the_cell_s_error_naming_its_holder(gpu_state: Any) -> None:
    watch = CellGpus(config(release_s=1), (1,)).watch(threading.Event())
    with pytest.raises(GpuMemoryHeld, match=r"GPU memory not given back 1 s after the engine stopped \(GPU 1 \+70000 MiB\): "
                                            r"held by pid 4242 python3 \(70000 MiB on GPU 1\)"):
        with watch:
            gpu_state(box(foreign=[ENGINE]))
    part = watch.part()
    assert part is not None and part.release is not None and not part.release["released"]
    assert part.telemetry is None  # no evals ran: nothing sampled


def test_without_a_gpu_tool_or_for_an_external_server_nothing_is_watched(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    external = CellGpus(config(release_s=1), (0,), base_url="http://127.0.0.1:8000").watch(threading.Event())
    with external, external.sampling():
        pass
    assert external.part() is None
    monkeypatch.setenv("PATH", str(tmp_path))
    no_tool = CellGpus(config(release_s=1), (0,)).watch(threading.Event())
    with no_tool, no_tool.sampling():
        pass
    assert no_tool.part() is None


def test_declared_cpus_are_not_gpus_to_watch(gpu_state: Any) -> None:
    """`devices.kind: cpu`: a cell's devices are CPU ids; an engine whose profile uses no GPUs
    (the simulator) has none watched, even with a GPU tool on PATH."""
    cpus = parse_config({"model": "m", "engine": {"profile": "sim"}, "devices": {"count": 2, "kind": "cpu"}},
                        "cpus.yaml")
    watch = CellGpus(cpus, (1,)).watch(threading.Event())
    with watch, watch.sampling():
        gpu_state(box(foreign=[ENGINE]))
    assert watch.part() is None
