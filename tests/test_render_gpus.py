"""The GPUs in a report (render/gpus.py): the box's provenance in the header (run.json `gpus`) and a
cell's devices, telemetry and memory release in its drill-down (cell.json `gpu`), read from a
stored run in this process. Recording them from vendor tools during a real run is
tests/test_gpu_matrix.py's (engines, `e2e`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.render.gpus import box_text, cell_rows
from evalkit.store import read_json, write_json
from tests.helpers.cli import evalkit_cli
from tests.helpers.runs import CellSpec, write_run

BOX = {"count": 2, "devices": [{"index": 0, "name": "NVIDIA H200"}, {"index": 1, "name": "NVIDIA H200"}],
       "driver": "550.54.15", "runtime": "CUDA", "runtime_version": "12.4"}
TELEMETRY = {"interval_s": 1.0, "samples": 12, "devices": [{"index": 0, "peak_used_mib": 70001, "mean_util_pct": 87},
                                                           {"index": 1, "peak_used_mib": 512, "mean_util_pct": None}]}
HELD = {"wait_s": 30.0, "released": False, "over_mib": {"1": 70000},
        "held": [{"pid": 4242, "name": "python3", "device": 1, "used_mib": 70000}]}


def test_the_box_is_its_count_models_driver_and_runtime() -> None:
    assert box_text(BOX) == "2x NVIDIA H200, driver 550.54.15, CUDA 12.4"
    assert box_text({"count": 1, "devices": [{"name": "AMD Instinct MI300X"}, {"name": "NVIDIA H100"}]}) == \
        "1x AMD Instinct MI300X + NVIDIA H100"
    assert box_text({"count": 0, "devices": []}) == "0x ?"
    assert box_text(None) == "" and box_text({}) == ""


def test_a_cell_s_gpus_are_its_uuids_telemetry_and_the_memory_given_back_or_who_held_it() -> None:
    rows = dict(cell_rows({"uuids": ["GPU-aa", "GPU-bb"], "telemetry": TELEMETRY, "release": HELD}))
    assert rows["GPUs"] == "GPU-aa, GPU-bb"
    assert rows["GPU telemetry"] == ("GPU 0: peak 70001 MiB, mean util 87%; GPU 1: peak 512 MiB, mean util ? "
                                     "(12 samples)")
    assert rows["GPU memory after stop"] == "NOT given back after 30.0 s, held by pid 4242 python3 (70000 MiB on GPU 1)"
    given_back = dict(cell_rows({"uuids": [], "release": {"wait_s": 1.5, "released": True}}))
    assert given_back == {"GPUs": "?", "GPU memory after stop": "given back in 1.5 s"}
    held_in_driver = dict(cell_rows({"release": {"wait_s": 30.0, "released": False, "held": []}}))
    assert held_in_driver["GPU memory after stop"] == "NOT given back after 30.0 s, held by no process listed"
    assert cell_rows(None) == [] and cell_rows({}) == []


def test_a_stored_run_s_reports_show_the_box_and_each_cell_s_gpus(tmp_path: Path) -> None:
    run, _ = write_run(tmp_path / "results", "r", {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec(right=10)})
    info: dict[str, Any] = read_json(run / "run.json")
    write_json(run / "run.json", {**info, "gpus": BOX})
    cell = read_json(run / "tp8-fixoff" / "cell.json")
    write_json(run / "tp8-fixoff" / "cell.json", {**cell, "gpu": {"uuids": ["GPU-aa"], "telemetry": TELEMETRY,
                                                                 "release": HELD}})
    markdown = evalkit_cli("report", "r", "--format", "markdown", "--results-dir", str(tmp_path / "results"))
    assert markdown.returncode in (0, 1) and "2x NVIDIA H200, driver 550.54.15, CUDA 12.4" in markdown.stdout
    html = evalkit_cli("report", "r", "--format", "html", "-o", str(tmp_path / "r.html"),
                       "--results-dir", str(tmp_path / "results"))
    assert html.returncode in (0, 1), html.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "GPU memory after stop" in page and "pid 4242 python3 (70000 MiB on GPU 1)" in page
    assert "GPU 0: peak 70001 MiB, mean util 87%" in page
