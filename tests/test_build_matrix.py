"""A matrix over commits of an engine that needs a build step (tests/toy_engine.py), real processes.

Each cell checks out its commit, runs the source's setup once per worktree, and starts the engine
from the built tree with fresh caches and its own internal port; a commit whose build fails is
that cell's error, and the other cells still run. `evalkit prepare` builds without any engine.

The module's matrix starts engines, so every test (each reads it) is in the `e2e` tier. The CLI
runs as its own process, the toy engine's profile (`tests.toy_engine:PROFILE`) imported by that
new interpreter from this checkout (tests/helpers/cli.py, `evalkit_process`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import evalkit_process
from tests.toy_engine import SETUP, make_toy_repo

pytestmark = pytest.mark.usefixtures("engine_processes")

ROOT = Path(__file__).resolve().parents[1]


def config_text(repo: Path, shas: list[str]) -> str:
    values = "\n".join(f"    {name}: {{source: {{repo: \"{repo}\", ref: \"{sha}\", setup: {SETUP}}}}}"
                       for name, sha in zip(("one", "two", "broken"), shas))
    return f"""
model: toy/model
engine:
  profile: tests.toy_engine:PROFILE
  cache: fresh  # each launch's own empty cache (keyed caches: tests/test_engine_caches_e2e.py)
devices: {{count: 3}}
axes:
  tree:
{values}
evals:
  repetition: {{enabled: false}}
"""


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.repo, self.shas = make_toy_repo(root)
        self.config = root / "toy.yaml"
        self.config.write_text(config_text(self.repo, self.shas))
        self.cache = root / "cache"

    def matrix(self, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return evalkit_process("matrix", "--config", str(self.config), "--run-id", run_id, "--results-dir",
                       str(self.root / "results"), "--cache-dir", str(self.cache), "--limit", "8", "--no-lock",
                       "--max-parallel", "3", *extra, cwd=self.root, timeout=600)

    def cell(self, run_id: str, cell: str) -> dict[str, Any]:
        return json.loads((self.root / "results" / run_id / cell / "cell.json").read_text())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    world = World(tmp_path_factory.mktemp("build-matrix"))
    first = world.matrix("first")
    assert first.returncode == 3, first.stderr  # the broken commit's cell failed; the others ran
    return world


def test_each_cell_runs_its_own_built_tree(world: World) -> None:
    for name, sha, minor in (("one", world.shas[0], 1), ("two", world.shas[1], 2)):
        cell = world.cell("first", name)
        assert cell["status"] == "ok", cell.get("error")
        assert cell["source"]["sha"] == sha
        assert cell["engine_version"] == f"0.1.{minor}+g{sha[:12]}"  # written by this commit's build only
        assert cell["engine_check"]["status"] == "match"
        assert cell["setup"]["status"] == "built" and cell["setup"]["argv"] == [sys.executable, "build.py"]
        assert f"building toyengine at {sha}" in Path(cell["setup"]["log"]).read_text()
        worktree = world.cache.resolve() / "worktrees" / sha
        assert f"from {worktree}/toyengine" in (world.root / "results" / "first" / name / "engine.log").read_text()


def test_a_commit_whose_setup_fails_is_a_cell_error_naming_its_log(world: World) -> None:
    cell = world.cell("first", "broken")
    log = Path(cell["setup"]["log"])
    assert cell["status"] == "error" and cell["setup"]["status"] == "failed"
    assert cell["error"]["message"] == (f"source {world.repo}@{world.shas[2]}: setup exited with 1; log {log}")
    assert cell["error"]["log_tail"].splitlines()[-1] == "error: toyengine/_C.c:12: unknown type name 'half2'"
    assert "launch" not in cell  # no engine was started
    assert not Path(cell["setup"]["marker"]).exists()


def test_each_launch_gets_an_empty_cache_of_its_own_removed_after(world: World) -> None:
    caches = {}
    for name in ("one", "two"):
        cell = world.cell("first", name)
        isolation = cell["isolation"]
        caches[name] = isolation["cache_env"]["TOY_CACHE"]
        assert isolation["cache_root"] == str(world.root / "results" / "first" / name / "engine-cache")
        log = (world.root / "results" / "first" / name / "engine.log").read_text()
        assert f"cache {caches[name]} held at start: []" in log  # empty at launch
        assert not Path(isolation["cache_root"]).exists()  # removed once the engine stopped
        assert cell["launch"]["env"]["TOY_CACHE"] == caches[name]
    assert caches["one"] != caches["two"]


def test_side_by_side_launches_get_distinct_internal_ports(world: World) -> None:
    ports = [world.cell("first", name)["isolation"]["internal_ports"]["--port"] for name in ("one", "two")]
    argvs = [world.cell("first", name)["launch"]["argv"] for name in ("one", "two")]
    assert ports[0] != ports[1]
    for port, argv in zip(ports, argvs):
        assert argv[argv.index("--port") + 1] == port


def test_a_second_run_reuses_the_build(world: World) -> None:
    marker = Path(world.cell("first", "one")["setup"]["marker"])
    log = Path(world.cell("first", "one")["setup"]["log"])
    stamps = (marker.stat().st_mtime_ns, log.stat().st_mtime_ns)
    again = world.matrix("again", "--only", "tree=one")
    assert again.returncode == 0, again.stderr
    cell = world.cell("again", "one")
    assert cell["status"] == "ok" and cell["setup"]["status"] == "reused"
    assert (marker.stat().st_mtime_ns, log.stat().st_mtime_ns) == stamps  # not run again
    assert cell["engine_version"] == world.cell("first", "one")["engine_version"]


def test_prepare_builds_every_tree_without_starting_an_engine(world: World, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    done = evalkit_process("prepare", "--config", str(world.config), "--cache-dir", str(cache), cwd=tmp_path)
    assert done.returncode == 3, done.stderr  # one tree's build failed
    lines = done.stdout.splitlines()
    one, two, broken = (next(line for line in lines if line.startswith(sha[:12])) for sha in world.shas)
    assert "[one]: setup built" in one and "[two]: setup built" in two
    assert broken.endswith("setup exited with 1; log "
                           f"{cache.resolve() / 'worktrees' / world.shas[2]}.setup-{broken.split('.setup-')[1]}")
    for sha in world.shas[:2]:
        assert (cache.resolve() / "worktrees" / sha / "toyengine" / "_built.py").is_file()
    assert not (tmp_path / "results").exists()
    again = evalkit_process("prepare", "--config", str(world.config), "--cache-dir", str(cache), "--only", "tree=one",
                    cwd=tmp_path)
    assert again.returncode == 0 and "[one]: setup reused" in again.stdout, again.stdout + again.stderr


def test_plan_says_how_each_tree_is_built_and_which_caches_are_fresh(world: World) -> None:
    done = evalkit_process("plan", "--config", str(world.config), "--cache-dir", str(world.cache), "--only", "tree=one|broken",
                   cwd=world.root)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "  cache:  TOY_CACHE=<fresh cache>/TOY_CACHE (empty at each launch, removed after)" in lines
    assert sum("--port '<internal port>'" in line for line in lines) == 2
    assert f"{world.repo}@{world.shas[0]}: setup {sys.executable} build.py: already built" in done.stdout
    broken = world.cache.resolve() / "worktrees" / world.shas[2]
    assert f"{world.repo}@{world.shas[2]}: setup {sys.executable} build.py: runs once in {broken} " in done.stdout
