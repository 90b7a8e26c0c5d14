"""Each launch's caches and internal ports (engine/isolation.py), and cells that share what no flag moves.

ATOM's own argument parser cannot run here, so its launches are checked on the argv evalkit builds
(the flags are cited in profiles/atom.py); the caches are checked on a real filesystem.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evalkit.config import load_config
from evalkit.config.cells import expand
from evalkit.engine import PortBook, build_launch
from evalkit.engine.isolation import isolate, release, shared_resources
from evalkit.run.scheduler import DevicePool
from tests.conftest import write_config

RESULTS = Path("results-unused")
"""The results folder of launches whose caches are fresh or the engine's: no keyed folder is made."""

ATOM = """
model: deepseek-ai/DeepSeek-V4-Pro
engine: {{profile: atom{engine}}}
axes:
  parallel:
    tp8: {{settings: {{tensor_parallel: 8}}}}
    dp8: {{settings: {{tensor_parallel: 8, dp_attention: true}}}}
  graph:
    full: {{settings: {{graph_mode: FULL}}}}
    piecewise: {{settings: {{graph_mode: PIECEWISE}}}}
"""


def atom_cells(tmp_path: Path, engine: str = "") -> tuple[object, dict[str, object]]:
    config = load_config(write_config(tmp_path, ATOM.format(engine=engine)))
    return config, {cell.id: cell for cell in expand(config)}


def flag(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, argv
    return argv[argv.index(name) + 1]


def test_side_by_side_atom_launches_get_distinct_internal_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config, cells = atom_cells(tmp_path)
    book = PortBook()
    launches = [isolate(build_launch(config, cells[c], book.take("127.0.0.1")), config, book, tmp_path / c, RESULTS).launch
                for c in ("tp8-full", "tp8-piecewise", "dp8-piecewise")]
    http = [flag(launch.argv, "--server-port") for launch in launches]
    internal = [flag(launch.argv, "--port") for launch in launches]  # ATOM's MASTER_PORT (arg_utils.py --port)
    assert len(set(http + internal)) == 6


def test_a_port_flag_the_config_passes_itself_is_left_alone(tmp_path: Path) -> None:
    config, cells = atom_cells(tmp_path, engine=', args: ["--port", "9123"], cache: engine')
    argv = isolate(build_launch(config, cells["tp8-full"], 8000), config, PortBook(), tmp_path, RESULTS).launch.argv
    assert flag(argv, "--port") == "9123"


def test_atom_dp_cells_share_the_fixed_dp_master_port_and_the_fixed_cache(tmp_path: Path) -> None:
    config, cells = atom_cells(tmp_path)
    dp, tp = shared_resources(config, cells["dp8-full"]), shared_resources(config, cells["tp8-full"])
    assert set(dp) == {"port 29500", "cache ~/.cache/atom"} and set(tp) == {"cache ~/.cache/atom"}
    assert "atom/config.py:761" in dp["port 29500"]
    opted_out, cells = atom_cells(tmp_path, engine=", cache: engine")
    assert set(shared_resources(opted_out, cells["tp8-full"])) == set()  # evalkit empties nothing then


def test_cells_holding_one_resource_never_run_side_by_side() -> None:
    pool = DevicePool(count=16, max_parallel=4)
    first = pool.try_acquire(8, frozenset({"port 29500"}))
    assert first is not None
    assert pool.try_acquire(8, frozenset({"port 29500"})) is None  # free devices, but the port is held
    assert pool.busy(frozenset({"port 29500", "cache x"})) == {"port 29500"}
    pool.release(first, frozenset({"port 29500"}))
    assert pool.try_acquire(8, frozenset({"port 29500"})) is not None


def test_atom_fixed_cache_is_emptied_before_each_launch_and_nothing_outside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """~/.cache/atom (atom/utils/backends.py:475) has no variable: its contents go, as in ATOM's CI."""
    home = tmp_path / "home"
    atom_cache = home / ".cache" / "atom"
    (atom_cache / "torch_compile_cache" / "5f3c1e").mkdir(parents=True)
    (atom_cache / "torch_compile_cache" / "5f3c1e" / "vllm_compile_cache.py").write_text("stale")
    keep = tmp_path / "user-data"
    keep.mkdir()
    (keep / "precious.txt").write_text("mine")
    (atom_cache / "link").symlink_to(keep)
    (home / ".cache" / "huggingface").mkdir()
    monkeypatch.setenv("HOME", str(home))
    config, cells = atom_cells(tmp_path)
    isolated = isolate(build_launch(config, cells["tp8-full"], 8000), config, PortBook(), tmp_path / "cell", RESULTS)
    assert atom_cache.is_dir() and list(atom_cache.iterdir()) == []
    assert (keep / "precious.txt").read_text() == "mine"  # a symlink inside is unlinked, not followed
    assert (home / ".cache" / "huggingface").is_dir()
    assert isolated.record["emptied"] == [str(atom_cache)]
    assert "HOME" not in isolated.launch.env  # the engine keeps the user's home


def test_opted_out_caches_are_left_as_they_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".cache" / "atom" / "torch_compile_cache").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    config, cells = atom_cells(tmp_path, engine=", cache: engine")
    isolated = isolate(build_launch(config, cells["tp8-full"], 8000), config, PortBook(), tmp_path / "cell", RESULTS)
    assert (home / ".cache" / "atom" / "torch_compile_cache").is_dir()
    assert "emptied" not in isolated.record and isolated.cache_root is None


VLLM = """
model: m
engine: {{profile: vllm{engine}}}
axes:
  graph:
    full: {{settings: {{graph_mode: FULL}}}}
    piecewise: {{settings: {{graph_mode: PIECEWISE}}}}
"""


def test_fresh_vllm_launches_get_distinct_empty_cache_roots_removed_after(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, VLLM.format(engine=", cache: fresh")))
    made = []
    for cell in expand(config):
        (tmp_path / cell.id / "engine-cache" / "VLLM_CACHE_ROOT").mkdir(parents=True)  # a previous attempt's
        (tmp_path / cell.id / "engine-cache" / "VLLM_CACHE_ROOT" / "old").write_text("stale")
        isolated = isolate(build_launch(config, cell, 8000), config, PortBook(), tmp_path / cell.id, RESULTS)
        root = Path(isolated.launch.env["VLLM_CACHE_ROOT"])
        assert root.is_dir() and os.listdir(root) == []
        assert isolated.record["cache_env"] == {"VLLM_CACHE_ROOT": str(root)}
        made.append(isolated)
    assert made[0].launch.env["VLLM_CACHE_ROOT"] != made[1].launch.env["VLLM_CACHE_ROOT"]
    for isolated in made:
        release(isolated.cache_root)
        assert isolated.cache_root is not None and not isolated.cache_root.exists()


def test_a_cache_variable_the_config_sets_is_kept_and_said(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, VLLM.format(engine=', env: {VLLM_CACHE_ROOT: "/data/vllm-cache"}')))
    isolated = isolate(build_launch(config, expand(config)[0], 8000), config, PortBook(), tmp_path / "cell", RESULTS)
    assert isolated.launch.env["VLLM_CACHE_ROOT"] == "/data/vllm-cache"
    assert isolated.record == {"kept": {"VLLM_CACHE_ROOT": "/data/vllm-cache"}} and isolated.cache_root is None


SGLANG = """
model: m
engine: {profile: sglang}
axes:
  parallel:
    tp2: {settings: {tensor_parallel: 2}}
    dpa2: {settings: {tensor_parallel: 2, dp_attention: true}}
"""


def test_sglang_dp_attention_gets_a_dist_init_block_away_from_its_http_port(tmp_path: Path) -> None:
    """With DP attention SGLang derives ports from --port + 233 unless --dist-init-addr is given
    (srt/server_args.py PortArgs.init_new); every launch gets its own --nccl-port."""
    config = load_config(write_config(tmp_path, SGLANG))
    book = PortBook()
    cells = {cell.id: cell for cell in expand(config)}
    tp = isolate(build_launch(config, cells["tp2"], 8000), config, book, tmp_path / "a", tmp_path / "results").launch.argv
    dpa = isolate(build_launch(config, cells["dpa2"], 8001), config, book, tmp_path / "b", tmp_path / "results").launch.argv
    assert "--dist-init-addr" not in tp and flag(tp, "--nccl-port") != flag(dpa, "--nccl-port")
    host, port = flag(dpa, "--dist-init-addr").split(":")
    assert host == "127.0.0.1" and int(port) not in (8000, 8001)
