"""Keyed compile caches through real simulator processes (engine/caches.py, sim/compiled.py).

Two runs of one matrix (FULL and PIECEWISE cells) share one results folder: in the first each
engine compiles and writes its artifact into a folder of its own key (a miss); in the second each
engine finds its own artifact (a hit). The simulator names its artifact without the graph mode, as
ATOM keys its torch.compile cache, so a shared folder would hand PIECEWISE the FULL cell's
artifact: only evalkit's key keeps them apart, which the PIECEWISE engine's log shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalkit import MatrixRequest, run_matrix

CONFIG = """
model: sim/caches
engine:
  profile: sim
  args: ["--sim-compile-seconds", "0.5"]
axes:
  graph:
    full: {settings: {graph_mode: FULL}}
    piecewise: {settings: {graph_mode: PIECEWISE}}
evals:
  gsm8k: {num_fewshot: 0}
  repetition: {enabled: false}
timeouts: {startup: 60, stop_grace: 5}
"""

pytestmark = pytest.mark.usefixtures("engine_processes")


def run(tmp: Path, run_id: str) -> dict[str, tuple[dict[str, Any], str]]:
    """Each cell's `isolation.cache` record and engine log."""
    outcome = run_matrix(MatrixRequest(config_path=tmp / "caches.yaml", limit=2, results_dir=tmp / "results",
                                       cache_dir=tmp / "cache", lock=False, history=False, run_id=run_id))
    out = {}
    for cell in ("full", "piecewise"):
        folder = outcome.run_path / cell
        out[cell] = (json.loads((folder / "cell.json").read_text())["isolation"]["cache"],
                     (folder / "engine.log").read_text())
    return out


def test_a_second_launch_with_the_same_key_hits_and_another_graph_mode_never_does(tmp_path: Path) -> None:
    (tmp_path / "caches.yaml").write_text(CONFIG)
    cold, warm = run(tmp_path, "cold"), run(tmp_path, "warm")
    keys = {cell: cache["key"] for cell, (cache, _) in cold.items()}
    assert keys["full"] != keys["piecewise"]
    for cell in ("full", "piecewise"):
        (cold_cache, cold_log), (warm_cache, warm_log) = cold[cell], warm[cell]
        assert cold_cache["mode"] == "keyed" and cold_cache["hit"] is False
        assert warm_cache == {**cold_cache, "hit": True}
        assert Path(cold_cache["path"]).parent == tmp_path / ".evalkit-cache" / "engine-caches"
        assert "sim: compiling (simulated, 0.5 s)" in cold_log and "compile cache miss, wrote" in cold_log
        assert "compiling" not in warm_log
        mode = cell.upper()
        assert f"compile cache hit {cold_cache['path']}" in warm_log
        assert f"(built for graph mode {mode}, running {mode})" in warm_log  # never another mode's artifact
