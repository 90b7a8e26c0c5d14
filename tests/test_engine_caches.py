"""Keyed compile caches (evalkit/engine/caches.py): the key, the folders, the index, eviction.

A keyed folder is reused only by a launch with the same key: these tests pin what changes the key
(the graph mode, the tree, an argument, a variable that reaches compilation) and what never does
(ports, hosts, the cell's folder, where the cache lives, device visibility); that only a folder
whose launch became ready is a hit; that eviction goes by the index's last use and never takes a
folder in use; and that two processes sharing the index lose no entry. Everything runs on a real
filesystem in this process (and one forked worker for the index).
"""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from evalkit.config import load_config
from evalkit.config.cells import expand
from evalkit.engine import PortBook, build_launch
from evalkit.engine.caches import INDEX, CacheKey, acquire, cache_key, caches_root, read_index, would_hit
from evalkit.engine.isolation import describe_isolation, isolate
from evalkit.errors import ConfigError
from evalkit.store import read_json, write_json
from evalkit.store.comparability import compare_keys, key_of
from evalkit.store.records import CellRecord
from tests.conftest import write_config
from tests.helpers.cli import evalkit_cli
from tests.helpers.runs import CellSpec, write_run
from tests.test_comparability import cell_record, run_record
from tests.test_isolation import VLLM  # the two-cell vLLM config, one copy

SHA = "0123456789abcdef0123456789abcdef01234567"
GIB = 1 << 30


def vllm(tmp_path: Path, engine: str = "") -> tuple[object, dict[str, object]]:
    config = load_config(write_config(tmp_path, VLLM.format(engine=engine)))
    return config, {cell.id: cell for cell in expand(config)}


def key_for(tmp_path: Path, cell: str = "full", port: int = 8000, engine: str = "", sha: str | None = None,
            cwd: str = "cell") -> CacheKey:
    config, cells = vllm(tmp_path, engine)
    return cache_key(build_launch(config, cells[cell], port, cwd=tmp_path / cwd / "engine_cwd"), config, sha)


def test_what_never_decides_a_cache_leaves_the_key_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another port, another cell folder, a cache variable inherited with another value, device
    visibility and an unrelated variable: the same folder."""
    first = key_for(tmp_path)
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/elsewhere")  # where a cache lives, not what it holds
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("LANG", "C.UTF-8")
    assert key_for(tmp_path, port=41234, cwd="another-cell").digest == first.digest


@pytest.mark.parametrize("change", ["graph mode", "tree", "argument", "inherited inductor variable",
                                    "inherited vllm variable", "variable the config sets"])
def test_what_decides_a_cache_changes_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    first = key_for(tmp_path, sha=SHA)
    if change == "graph mode":
        other = key_for(tmp_path, cell="piecewise", sha=SHA)
        assert other.graph_mode == "PIECEWISE"
    elif change == "tree":
        other = key_for(tmp_path, sha="f" * 40)
    elif change == "argument":
        other = key_for(tmp_path, engine=', args: ["--max-model-len", "2048"]', sha=SHA)
    elif change == "inherited inductor variable":
        monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")
        other = key_for(tmp_path, sha=SHA)
    elif change == "inherited vllm variable":
        monkeypatch.setenv("VLLM_CPU_CI_ENV", "1")  # platforms/cpu.py: the eager backend instead of Inductor
        other = key_for(tmp_path, sha=SHA)
    else:
        other = key_for(tmp_path, engine=", env: {TORCH_COMPILE_DEBUG: '1'}", sha=SHA)
    assert other.digest != first.digest


def test_a_local_model_is_keyed_by_the_folder_it_really_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link re-pointed at a rebuilt model is another model to compile for."""
    monkeypatch.chdir(tmp_path)
    for name in ("build-a", "build-b"):
        (tmp_path / name).mkdir()
    (tmp_path / "m").symlink_to(tmp_path / "build-a")
    first = key_for(tmp_path)
    (tmp_path / "m").unlink()
    (tmp_path / "m").symlink_to(tmp_path / "build-b")
    assert first.model.endswith("build-a") and key_for(tmp_path).digest != first.digest


def test_a_folder_is_a_hit_only_after_a_launch_that_became_ready(tmp_path: Path) -> None:
    key = key_for(tmp_path)
    root = tmp_path / "caches"
    lease = acquire(root, key)
    assert lease is not None and not lease.hit and json.loads((lease.path / "key.json").read_text())["graph_mode"] == "FULL"
    (lease.path / "VLLM_CACHE_ROOT").mkdir()
    (lease.path / "VLLM_CACHE_ROOT" / "half-written").write_text("x")
    lease.finish(ready=False, max_bytes=GIB)  # the engine never served: nothing of it is reused
    assert not lease.path.exists() and read_index(root) == {} and not would_hit(root, key)
    lease = acquire(root, key)
    assert lease is not None and not lease.hit
    (lease.path / "artifact").write_text("compiled" * 100)
    lease.finish(ready=True, max_bytes=GIB)
    key_file = (lease.path / "key.json").stat().st_size
    assert would_hit(root, key) and read_index(root)[key.digest]["size"] == 800 + key_file
    again = acquire(root, key)
    assert again is not None and again.hit and (again.path / "artifact").read_text().startswith("compiled")
    again.finish(ready=True, max_bytes=GIB)


def test_a_damaged_index_trusts_no_folder(tmp_path: Path) -> None:
    """A folder the index does not vouch for is a miss, emptied before the launch: never reused."""
    key, root = key_for(tmp_path), tmp_path / "caches"
    fill(root, key, 100)
    (root / INDEX).write_text("{not json")
    lease = acquire(root, key)
    assert lease is not None and not lease.hit and not (lease.path / "blob").exists()
    lease.finish(ready=True, max_bytes=GIB)
    assert would_hit(root, key)


def test_a_folder_in_use_is_not_given_to_a_second_launch(tmp_path: Path) -> None:
    key, root = key_for(tmp_path), tmp_path / "caches"
    held = acquire(root, key)
    assert held is not None and acquire(root, key) is None
    held.finish(ready=True, max_bytes=GIB)
    second = acquire(root, key)
    assert second is not None
    second.finish(ready=True, max_bytes=GIB)


def fill(root: Path, key: CacheKey, size: int, max_bytes: int = GIB) -> list[str]:
    lease = acquire(root, key)
    assert lease is not None
    (lease.path / "blob").write_bytes(b"x" * size)
    return lease.finish(ready=True, max_bytes=max_bytes)


def test_least_recently_used_folders_go_until_the_rest_fit(tmp_path: Path) -> None:
    """Last use is the index's: reading a folder's files (atime) does not make it recent."""
    root = tmp_path / "caches"
    a, b, c = (key_for(tmp_path, engine=f', args: ["--seed", "{i}"]') for i in range(3))
    fill(root, a, 40_000)
    fill(root, b, 40_000)
    lease = acquire(root, a)  # a used again: b is now the least recently used
    assert lease is not None and lease.hit
    lease.finish(ready=True, max_bytes=GIB)
    (root / b.digest / "blob").read_bytes()
    assert fill(root, c, 40_000, max_bytes=90_000) == [b.digest]
    assert sorted(read_index(root)) == sorted([a.digest, c.digest]) and not (root / b.digest).exists()


def test_eviction_skips_a_folder_another_launch_holds(tmp_path: Path) -> None:
    root = tmp_path / "caches"
    a, b = (key_for(tmp_path, engine=f', args: ["--seed", "{i}"]') for i in range(2))
    fill(root, a, 60_000)
    held = acquire(root, a)
    assert held is not None
    assert fill(root, b, 60_000, max_bytes=70_000) == [b.digest]  # a is older but in use: the newest goes instead
    assert (root / a.digest / "blob").exists()
    held.finish(ready=True, max_bytes=GIB)


def _fill_many(root: str, prefix: str, count: int) -> None:
    for i in range(count):
        key = CacheKey(engine="sim", model=f"{prefix}{i}", argv=(), env=(), graph_mode=None, source=None,
                       versions=(), device="cpu")
        lease = acquire(Path(root), key)
        assert lease is not None
        (lease.path / "x").write_text(prefix)
        lease.finish(ready=True, max_bytes=GIB)


def test_two_processes_filling_one_index_lose_no_entry(tmp_path: Path) -> None:
    """Each acquire and finish rewrites the whole index under its fcntl lock: 2 x 25 folders, 50 entries."""
    root = tmp_path / "caches"
    worker = multiprocessing.get_context("fork").Process(target=_fill_many, args=(str(root), "other", 25))
    worker.start()
    _fill_many(str(root), "mine", 25)
    worker.join(60)
    assert worker.exitcode == 0
    entries = json.loads((root / INDEX).read_text())
    assert len(entries) == 50 and all(e["ready"] for e in entries.values())
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted(entries)


def test_a_keyed_launch_points_its_cache_variable_into_the_folder_and_records_the_key(tmp_path: Path) -> None:
    config, cells = vllm(tmp_path)
    results = tmp_path / "results"
    planned = isolate(build_launch(config, cells["full"], 8000), config, None, None, results)
    assert planned.launch.env["VLLM_CACHE_ROOT"] == "<keyed cache>/VLLM_CACHE_ROOT"  # a plan holds nothing
    assert planned.record["cache"]["hit"] is False and not (tmp_path / ".evalkit-cache").exists()
    assert "would miss" in describe_isolation(planned, {})[0]
    ran = isolate(build_launch(config, cells["full"], 8000), config, PortBook(), tmp_path / "full", results)
    cache = ran.record["cache"]
    root = caches_root(config, results)
    assert root == tmp_path / ".evalkit-cache" / "engine-caches"
    assert cache == {"mode": "keyed", "key": planned.record["cache"]["key"], "hit": False, "path": str(root / cache["key"])}
    assert ran.launch.env["VLLM_CACHE_ROOT"] == f"{cache['path']}/VLLM_CACHE_ROOT"
    assert Path(ran.launch.env["VLLM_CACHE_ROOT"]).is_dir()
    busy = isolate(build_launch(config, cells["full"], 8001), config, PortBook(), tmp_path / "again", results)
    assert busy.record["cache"]["mode"] == "fresh" and "in use by another launch" in busy.record["cache"]["why"]
    assert busy.launch.env["VLLM_CACHE_ROOT"] == str(tmp_path / "again" / "engine-cache" / "VLLM_CACHE_ROOT")
    busy.finish(ready=True, max_gib=1)
    ran.finish(ready=True, max_gib=1)
    assert "would hit" in describe_isolation(isolate(build_launch(config, cells["full"], 8000), config, None, None,
                                                     results), {})[0]


def test_keyed_is_refused_for_an_engine_whose_cache_no_variable_moves(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, "model: m\nengine: {profile: atom, cache: keyed}\n"))
    with pytest.raises(ConfigError, match="engine.cache: keyed"):
        isolate(build_launch(config, expand(config)[0], 8000), config, None, None, tmp_path / "results")


def test_cells_keyed_apart_or_fresh_stay_comparable() -> None:
    """Where a cache lived and whether it was warm decide no figure: never a difference."""
    keyed = cell_record(run_id="r1", env={"VLLM_CACHE_ROOT": "/c/engine-caches/0f1e2d3c4b5a6978/VLLM_CACHE_ROOT"},
                        isolation={"cache": {"mode": "keyed", "key": "0f1e2d3c4b5a6978", "hit": True,
                                             "path": "/c/engine-caches/0f1e2d3c4b5a6978"}})
    fresh = cell_record(run_id="r2", env={"VLLM_CACHE_ROOT": "/results/r2/dp8-piecewise-fixon/engine-cache/VLLM_CACHE_ROOT"},
                        isolation={"cache": {"mode": "fresh"}})
    assert isinstance(keyed, CellRecord) and compare_keys(key_of(run_record("r1"), keyed),
                                                          key_of(run_record("r2"), fresh)) == []


def test_the_default_folder_sits_beside_the_results_folder_unless_the_config_names_one(tmp_path: Path) -> None:
    config, _ = vllm(tmp_path)
    assert caches_root(config, Path("results")) == Path(os.getcwd()) / ".evalkit-cache" / "engine-caches"
    named, _ = vllm(tmp_path, engine=f", cache_dir: {tmp_path / 'shared'}")
    assert caches_root(named, Path("results")) == tmp_path / "shared"


def test_the_report_says_each_keyed_cache_hit_or_miss_in_the_engine_section(tmp_path: Path) -> None:
    run, _ = write_run(tmp_path / "results", "r", {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec()})
    caches = {"tp8-fixon": {"mode": "keyed", "key": "0f1e2d3c4b5a6978", "hit": True, "path": "/c/0f1e2d3c4b5a6978"},
              "tp8-fixoff": {"mode": "fresh", "why": "keyed folder 1a2b3c4d5e6f7a8b in use by another launch"}}
    for cell, cache in caches.items():
        record = read_json(run / cell / "cell.json")
        write_json(run / cell / "cell.json", {**record, "isolation": {"cache": cache}})
    markdown = evalkit_cli("report", "r", "--format", "markdown", "--results-dir", str(tmp_path / "results"))
    assert markdown.returncode in (0, 1), markdown.stderr
    assert "1/1 keyed compile caches warm" in markdown.stdout
    assert "- tp8-fixon: cache hit 0f1e2d3c4b5a6978" in markdown.stdout
    assert "- tp8-fixoff: cache fresh (keyed folder 1a2b3c4d5e6f7a8b in use by another launch)" in markdown.stdout
    document = evalkit_cli("report", "r", "--format", "json", "--results-dir", str(tmp_path / "results"))
    cells = {c["id"]: c for c in json.loads(document.stdout)["cells"]}
    assert cells["tp8-fixon"]["cache"] == caches["tp8-fixon"]
