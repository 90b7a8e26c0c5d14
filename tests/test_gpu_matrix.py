"""A matrix on a box with GPUs (faked: tests/helpers/gpus.py on PATH, the simulator as the engine that
holds memory): busy GPUs refused before anything starts, each engine's memory waited for after it
stops, provenance in run.json and the report, each cell's UUIDs and telemetry (issue 31 parts 1-4).
A test whose matrix starts engines asks for `engine_processes` (the `e2e` tier); busy GPUs refused
before anything starts stay in the default tier."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from evalkit import MatrixRequest, run_matrix
from evalkit.errors import GpusBusy
from evalkit.render import render
from evalkit.store import read_json
from tests.helpers.gpus import install
from tests.test_gpu_devices import UUIDS, box

CONFIG = """
model: sim/gpu-test
served_name: {served}
engine:
  profile: sim
  args: ["--sim-startup-seconds", "0.2"]
devices: {{count: 1, visibility_env: [CUDA_VISIBLE_DEVICES]}}
axes:
  fix:
    fixon: {{args: ["--sim-fix", "on"]}}
    fixoff: {{args: ["--sim-fix", "off"]}}
evals:
  gsm8k: {{num_fewshot: 0}}
  repetition: {{enabled: false}}
  divergence: {{enabled: false}}
timeouts: {{startup: 60, stop_grace: 5, gpu_release: {release}}}
"""
SERVED = f"gpu-test-{os.getpid()}"
"""The served name on this test's engines' command line: the fake counts only them, not every
simulator another test process runs on the machine."""
ENGINE = {"engine_match": f"--served-model-name {SERVED}", "engine_mib": 70000, "engine_util": 87, "engine_gpus": [0]}


def matrix(root: Path, monkeypatch: pytest.MonkeyPatch, state: dict[str, Any], release: float,
           progress: Any = None, **fields: Any) -> tuple[Path, Any]:
    for name, value in install(root / "bin", root / "gpu.json", state, "nvidia-smi").items():
        monkeypatch.setenv(name, value)
    config = root / "gpu.yaml"
    config.write_text(CONFIG.format(release=release, served=SERVED))
    request = MatrixRequest(config_path=config, limit=3, run_id="r", results_dir=root / "results",
                            cache_dir=root / "cache", lock_file=root / "lock", history=False, **fields)
    return root / "results" / "r", run_matrix(request, progress)


@pytest.fixture(scope="module")  # starts engines: every test that reads it asks for `engine_processes`
def lingering(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two cells whose engine keeps its 70000 MiB for 2 s after it exits (released within 30 s)."""
    with pytest.MonkeyPatch.context() as mp:
        run, _ = matrix(tmp_path_factory.mktemp("gpu"), mp, box(**ENGINE, linger_s=2.0), release=30)
    return run


@pytest.mark.usefixtures("engine_processes")
def test_each_cell_waits_for_its_engines_memory_and_records_the_wait(lingering: Path) -> None:
    for cell in ("fixon", "fixoff"):
        record = read_json(lingering / cell / "cell.json")
        assert record["status"] == "ok"
        release = record["gpu"]["release"]
        assert release["released"] is True and 1.0 < release["wait_s"] < 30
        assert record["timings"]["gpu_release_s"] == release["wait_s"]
        assert 0 < record["timings"]["engine_stop_s"] < release["wait_s"], "the engine's stop is timed apart from the wait"
        assert record["gpu"]["before_mib"] == {"0": 1}


@pytest.mark.usefixtures("engine_processes")
def test_each_cell_records_its_devices_uuids_and_telemetry(lingering: Path) -> None:
    gpu = read_json(lingering / "fixon" / "cell.json")["gpu"]
    assert gpu["uuids"] == [UUIDS[0]]
    telemetry = gpu["telemetry"]
    assert telemetry["samples"] >= 1 and telemetry["interval_s"] == 0.5
    assert telemetry["devices"] == [{"index": 0, "uuid": UUIDS[0], "peak_used_mib": 70001, "mean_util_pct": 87.0}]


@pytest.mark.usefixtures("engine_processes")
def test_run_json_and_the_report_carry_the_gpus_provenance(lingering: Path) -> None:
    gpus = read_json(lingering / "run.json")["gpus"]
    assert (gpus["vendor"], gpus["driver"], gpus["runtime"], gpus["runtime_version"], gpus["count"]) == (
        "NVIDIA", "550.54.15", "CUDA", "12.4", 2)
    assert [d["uuid"] for d in gpus["devices"]] == UUIDS
    summary = read_json(lingering / "summary.json")
    text = render(summary, "markdown", lingering) or ""
    assert "2x NVIDIA H200, driver 550.54.15, CUDA 12.4" in text
    html = render(summary, "html", lingering) or ""
    assert UUIDS[0] in html and "70001 MiB" in html


@pytest.mark.usefixtures("engine_processes")
def test_memory_never_given_back_fails_the_cell_naming_its_holder(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run, outcome = matrix(tmp_path, monkeypatch, box(**ENGINE, linger_s=600.0), release=1, only=("fix=fixon",))
    record = read_json(run / "fixon" / "cell.json")
    assert record["status"] == "error" and record["error"]["type"] == "GpuMemoryHeld"
    message = record["error"]["message"]
    assert message.startswith("GPU memory not given back 1 s after the engine stopped (GPU 0 +70000 MiB): held by pid ")
    assert f"pid {record['engine_pid']} " in message and "(70000 MiB on GPU 0)" in message
    assert 0 < record["timings"]["engine_stop_s"] < 5, "a cell failed by its GPUs' memory still times its engine's stop"
    assert outcome.exit_code == 3


def test_a_gpu_used_by_another_process_stops_the_run_before_anything_is_created(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    foreign = box(foreign=[{"pid": 4242, "name": "python3", "gpu": 0, "mib": 70000}])
    with pytest.raises(GpusBusy, match=r"GPU 0 \(70001 MiB used; pid 4242 python3 \(70000 MiB on GPU 0\)\)"):
        matrix(tmp_path, monkeypatch, foreign, release=30)
    assert not (tmp_path / "results" / "r").exists()
    with pytest.raises(GpusBusy, match="after waiting 0.5 s"):
        matrix(tmp_path, monkeypatch, foreign, release=30, wait_for_gpus=0.5)


@pytest.mark.usefixtures("engine_processes")
def test_a_wait_for_busy_gpus_is_shown_then_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--wait-for-gpus was silent: on the H100 box a run waited 27 s for a foreign process with no line."""
    heard: list[tuple[str, str, str]] = []

    class Heard:
        def update(self, cell_id: str, state: str, detail: str = "") -> None:
            heard.append((cell_id, state, detail))

    foreign = box(foreign=[{"pid": 4242, "name": "python3", "gpu": 0, "mib": 70000, "until": time.time() + 1.5}])
    run, outcome = matrix(tmp_path, monkeypatch, foreign, release=30, progress=Heard(), wait_for_gpus=60,
                          only=("fix=fixon",))
    assert outcome.exit_code == 0
    waits = [(state, detail) for cell, state, detail in heard if cell == "gpus"]
    assert waits[0] == ("waiting", "up to 60 s for GPUs in use: GPU 0 (70001 MiB used; pid 4242 python3 "
                                   "(70000 MiB on GPU 0))")
    assert [state for state, _ in waits] == ["waiting", "ok"]
    assert heard.index(("gpus", "ok", waits[1][1])) < min(i for i, h in enumerate(heard) if h[0] == "fixon")
