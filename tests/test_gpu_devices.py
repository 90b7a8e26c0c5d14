"""evalkit/devices read GPUs through the vendors' tools: here small fakes on PATH (tests/helpers/gpus.py)
that print the real `nvidia-smi --query-...--format=csv` and `amd-smi ... --json` formats (issue 31)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from evalkit.devices.amd import AmdSmi
from evalkit.devices.busy import require_free
from evalkit.devices.nvidia import NvidiaSmi
from evalkit.devices.probe import find_backend
from evalkit.devices.release import wait_released
from evalkit.devices.telemetry import Sampler
from evalkit.errors import GpusBusy
from tests.helpers.gpus import install

UUIDS = ["GPU-4a8f3f0e-1c2d-3b4a-9e8f-0123456789ab", "GPU-7d1c2b3a-5e6f-4a8b-8c9d-abcdef012345"]


def box(**extra: Any) -> dict[str, Any]:
    return {"driver": "550.54.15", "runtime": "12.4",
            "gpus": [{"uuid": u, "name": "NVIDIA H200", "total_mib": 143771, "base_mib": 1} for u in UUIDS], **extra}


@pytest.fixture(params=["nvidia-smi", "amd-smi"])
def tool(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install the fake of one vendor; returns a function that sets the box's state."""
    def set_state(state: dict[str, Any]) -> None:
        for name, value in install(tmp_path / "bin", tmp_path / "gpu.json", state, request.param).items():
            monkeypatch.setenv(name, value)
    set_state(box())
    set_state.name = request.param  # type: ignore[attr-defined]
    return set_state


def test_without_a_gpu_tool_on_path_there_is_no_backend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_backend() is None
    require_free(None, None, 0)  # nothing to check, nothing raised


@pytest.mark.parametrize("first", ["nvidia-smi", "amd-smi"])
def test_the_tool_first_on_path_is_read_when_both_vendors_tools_are_there(first: str, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake first on PATH wins over a real tool later on it: on an NVIDIA box, NVIDIA-first made
    the AMD tests read the real nvidia-smi instead of the fake amd-smi they put first."""
    other = "amd-smi" if first == "nvidia-smi" else "nvidia-smi"
    later = install(tmp_path / "later", tmp_path / "later.json", box(), other)["PATH"]
    monkeypatch.setenv("PATH", later)
    monkeypatch.setenv("PATH", install(tmp_path / "first", tmp_path / "first.json", box(), first)["PATH"])
    backend = find_backend()
    assert backend is not None and backend.name == first


def test_the_vendor_tool_on_path_is_read_for_memory_processes_and_provenance(tool: Any) -> None:
    tool(box(foreign=[{"pid": 4242, "name": "python3", "gpu": 1, "mib": 70000, "util": 87}], wrapped=True))
    backend = find_backend()
    assert backend is not None and backend.name == tool.name
    assert isinstance(backend, NvidiaSmi if tool.name == "nvidia-smi" else AmdSmi)
    snap = backend.snapshot()
    assert [(d.index, d.uuid, d.used_mib, d.total_mib, d.util_pct) for d in snap.devices] == [
        (0, UUIDS[0], 1.0, 143771.0, 0.0), (1, UUIDS[1], 70001.0, 143771.0, 87.0)]
    assert [(p.pid, p.name, p.device, p.used_mib) for p in snap.processes] == [(4242, "python3", 1, 70000.0)]
    inv = backend.inventory().dump()
    assert (inv["driver"], inv["runtime_version"], inv["count"]) == ("550.54.15", "12.4", 2)
    assert inv["runtime"] == ("CUDA" if tool.name == "nvidia-smi" else "ROCm")
    assert [(d["uuid"], d["name"]) for d in inv["devices"]] == [(u, "NVIDIA H200") for u in UUIDS]


def test_amd_smi_before_7_prints_a_bare_list_and_says_no_running_processes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in install(tmp_path / "bin", tmp_path / "gpu.json", box(wrapped=False), "amd-smi").items():
        monkeypatch.setenv(name, value)
    snap = AmdSmi().snapshot()
    assert [d.used_mib for d in snap.devices] == [1.0, 1.0] and snap.processes == []


def test_busy_gpus_refuse_in_one_line_naming_the_process_unless_they_free_up_within_the_wait(tool: Any) -> None:
    tool(box(foreign=[{"pid": 4242, "name": "python3", "gpu": 1, "mib": 70000}]))
    with pytest.raises(GpusBusy) as refused:
        require_free(find_backend(), None, 0)
    message = str(refused.value)
    assert "\n" not in message and "GPU 1 (70001 MiB used; pid 4242 python3 (70000 MiB on GPU 1))" in message
    assert "GPU 0" not in message and "--wait-for-gpus" in message
    require_free(find_backend(), [0], 0)  # a run on GPU 0 only does not care about GPU 1
    tool(box(foreign=[{"pid": 4242, "name": "python3", "gpu": 1, "mib": 70000, "until": time.time() + 1.0}]))
    t0 = time.monotonic()
    heard: list[tuple[str, str]] = []
    require_free(find_backend(), None, 30, report=lambda *said: heard.append(said))  # waits until it is gone
    assert 0.5 < time.monotonic() - t0 < 10
    assert heard[0] == ("waiting", "up to 30 s for GPUs in use: GPU 1 (70001 MiB used; pid 4242 python3 "
                                   "(70000 MiB on GPU 1))")
    assert len(heard) == 2 and heard[1][0] == "ok" and heard[1][1].startswith("GPUs free after ")


def test_memory_not_given_back_is_waited_for_and_on_timeout_its_holders_are_named(tool: Any) -> None:
    tool(box(foreign=[{"pid": 777, "name": "VLLM::Worker", "gpu": 0, "mib": 60000, "until": time.time() + 1.0}]))
    backend = find_backend()
    assert backend is not None
    released = wait_released(backend, {0: 1.0, 1: 1.0}, timeout_s=30)
    assert released.released and 0.5 < released.wait_s < 10
    tool(box(foreign=[{"pid": 777, "name": "VLLM::Worker", "gpu": 0, "mib": 60000}]))
    held = wait_released(backend, {0: 1.0, 1: 1.0}, timeout_s=1.0)
    assert not held.released and held.wait_s >= 1.0 and held.over_mib == {0: 60000.0}
    assert held.message(1.0) == ("GPU memory not given back 1 s after the engine stopped (GPU 0 +60000 MiB): "
                                 "held by pid 777 VLLM::Worker (60000 MiB on GPU 0)")
    assert wait_released(backend, {0: 60001.0, 1: 1.0}, timeout_s=1.0).released  # its own level before


def test_telemetry_keeps_each_devices_peak_memory_and_mean_utilisation(tool: Any) -> None:
    tool(box(foreign=[{"pid": 9, "name": "python3", "gpu": 0, "mib": 50000, "util": 80}]))
    backend = find_backend()
    assert backend is not None
    sampler = Sampler(backend, [0], interval_s=0.05)
    sampler.sample()
    tool(box(foreign=[{"pid": 9, "name": "python3", "gpu": 0, "mib": 90000, "util": 40}]))
    sampler.sample()
    tool(box())
    sampler.sample()
    assert sampler.summary() == {"interval_s": 0.05, "samples": 3, "devices": [
        {"index": 0, "uuid": UUIDS[0], "peak_used_mib": 90001, "mean_util_pct": 40.0}]}
