"""Each cell runs its own tree, and evalkit proves it (issue 25 item 3, issue 26 items 1 and 3).

One real matrix (module-scoped) of a throwaway engine laid out like SGLang (tests/tree_engine.py:
package under `python/`, two commits `one` and `two`), started by `evalkit matrix` from a
directory that holds a decoy `fakeserve/` package, as evalkit run from an engine checkout would.
The matrix is the real program (`python -m evalkit.cli`, its working directory the decoy's, its
profile `tests.tree_engine:PROFILE` imported by that new interpreter) and its cells start engines:
every test that reads it asks for `engine_processes`, so it runs in the e2e tier:

    one       commit one
    two       commit two
    nosafe    commit two, PYTHONSAFEPATH switched off: only the neutral working directory protects it
    wrapped   commit three, whose entry point runs a launch_server.py outside its tree
    wrongdir  commit one with `subdir: ""` (the checkout's root, where there is no package) and an
              installed `fakeserve` on PYTHONPATH: the SGLang case of issue 26 item 1
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from evalkit.engine.imports import prove
from evalkit.gitinfo import MISMATCH_WORDS
from evalkit.profiles.sglang import SGLANG_STARTUP_FILE
from evalkit.profiles.vllm import VLLM_STARTUP_FILE
from evalkit.render import render
from tests.helpers.cli import evalkit_process
from tests.tree_engine import make_tree_repo, write_package

DECOY = '''from pathlib import Path
Path(__file__).with_name("IMPORTED").touch()
'''



@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("tree")
    repo, shas = make_tree_repo(root)
    decoy = root / "checkout"  # where the user runs evalkit: it holds a fakeserve/ of its own
    (write_package(decoy, "decoy", "raise SystemExit('DECOY ran')\n") / "__init__.py").write_text(DECOY)
    site = root / "site"  # an installed fakeserve, outside every tree
    write_package(site, "installed")
    config = root / "tree.yaml"
    config.write_text(f"""
model: sim/tree-test
served_name: tree-test
engine:
  profile: tests.tree_engine:PROFILE
  args: ["--sim-startup-seconds", "0", "--sim-version", "0.5.23"]
axes:
  tree:
    one: {{source: {{repo: "{repo}", ref: "{shas['one']}"}}}}
    two: {{source: {{repo: "{repo}", ref: "{shas['two']}"}}}}
    nosafe: {{source: {{repo: "{repo}", ref: "{shas['two']}"}}, env: {{PYTHONSAFEPATH: ""}}}}
    wrapped: {{source: {{repo: "{repo}", ref: "{shas['three']}"}},
               env: {{FAKESERVE_ELSEWHERE: "{site}/fakeserve/launch_server.py"}}}}
    wrongdir: {{source: {{repo: "{repo}", ref: "{shas['one']}", subdir: ""}}, env: {{PYTHONPATH: "{site}"}}}}
evals:
  gsm8k: {{num_fewshot: 0}}
  repetition: {{count: 4, max_tokens: 128}}
""")
    # module-scoped, so the process helper itself: each test that reads the run asks for engine_processes
    done = evalkit_process("matrix", "--config", str(config), "--run-id", "t", "--results-dir", str(root / "results"),
                           "--cache-dir", str(root / "cache"), "--json", "--limit", "5", "--no-history", cwd=decoy,
                           timeout=300)
    path = root / "results" / "t"
    cells = {d.name: json.loads((d / "cell.json").read_text()) for d in path.iterdir() if (d / "cell.json").exists()}
    return {"done": done, "path": path, "cells": cells, "shas": shas, "cache": (root / "cache").resolve(),
            "decoy": decoy, "site": site, "summary": json.loads(done.stdout) if done.stdout.strip() else None}


def log(run: dict[str, Any], cell: str) -> str:
    return (run["path"] / cell / "engine.log").read_text()


def tree(run: dict[str, Any], mark: str) -> Path:
    return run["cache"] / "worktrees" / run["shas"][mark] / "python"


def test_each_cell_runs_its_own_commit_proven_from_cell_json(run: dict[str, Any], engine_processes: None) -> None:
    assert run["done"].returncode == 3, run["done"].stderr  # wrongdir failed: one failed cell
    cells = run["cells"]
    assert {c: cells[c]["status"] for c in cells} == {"one": "ok", "two": "ok", "nosafe": "ok", "wrapped": "ok",
                                                       "wrongdir": "error"}
    assert cells["one"]["source"]["sha"] == run["shas"]["one"] != cells["two"]["source"]["sha"] == run["shas"]["two"]
    for cell, mark in (("one", "one"), ("two", "two"), ("nosafe", "two")):
        found = cells[cell]["imports"]
        assert found == {"package": "fakeserve", "origin": str(tree(run, mark) / "fakeserve" / "__init__.py"),
                         "tree": str(tree(run, mark)), "inside": True, "error": None}
        # and the engine itself says which code ran, from where
        assert f"fakeserve {mark} running {tree(run, mark)}/fakeserve/launch_server.py" in log(run, cell)


def test_the_package_subdirectory_of_the_checkout_goes_on_pythonpath(run: dict[str, Any], engine_processes: None) -> None:
    """The profile's `source_subdir` ("python", as SGLang's) unless the source names its own."""
    env = run["cells"]["one"]["launch"]["env"]
    assert env["PYTHONPATH"].split(":")[0] == str(tree(run, "one"))


def test_a_decoy_in_evalkit_s_working_directory_is_never_imported(run: dict[str, Any], engine_processes: None) -> None:
    assert not (run["decoy"] / "fakeserve" / "IMPORTED").exists()
    for cell in ("one", "two", "nosafe", "wrapped"):
        assert "DECOY" not in log(run, cell)
        launch = run["cells"][cell]["launch"]
        assert launch["cwd"] == str(run["path"].resolve() / cell / "engine_cwd")
    assert run["cells"]["one"]["launch"]["env"]["PYTHONSAFEPATH"] == "1"
    assert run["cells"]["nosafe"]["launch"]["env"]["PYTHONSAFEPATH"] == ""  # the neutral directory alone


def test_a_cell_whose_package_imports_from_outside_its_tree_fails_before_its_engine_starts(
        run: dict[str, Any], engine_processes: None) -> None:
    cell = run["cells"]["wrongdir"]
    root = run["cache"] / "worktrees" / run["shas"]["one"]
    installed = run["site"] / "fakeserve" / "__init__.py"
    assert cell["error"]["type"] == "TreeNotProven"
    assert cell["error"]["message"] == (f"engine package 'fakeserve' would import from {installed}, not from the "
                                        f"cell's source tree {root} ({run['shas']['one'][:12]}): the engine was not "
                                        "started; set engine.package to the package the tree holds (a plugin or a "
                                        "fix module, not the engine), or the source's subdir to the folder it lives in")
    assert cell["imports"] == {"package": "fakeserve", "origin": str(installed), "tree": str(root), "inside": False,
                               "error": None}
    assert "engine_pid" not in cell and not (run["path"] / "wrongdir" / "engine.log").exists()


def test_the_import_path_proves_the_tree_when_the_version_names_no_commit(run: dict[str, Any], engine_processes: None) -> None:
    """SGLang reports its installed distribution's version (here 0.5.23, as the sim is told to):
    no commit, never a false mismatch; the logged file is the third witness."""
    check = run["cells"]["one"]["engine_check"]
    assert check["status"] == "match" and run["cells"]["one"]["engine_version"] == "0.5.23"
    assert [(w["kind"], w["status"]) for w in check["witnesses"]] == [
        ("import", "match"), ("version", "unknown"), ("log", "match")]
    assert check["witnesses"][2]["message"] == (f"the engine logged its file "
                                                f"{tree(run, 'one')}/fakeserve/launch_server.py")


def test_an_engine_that_logs_a_file_outside_its_tree_is_a_loud_mismatch(run: dict[str, Any], engine_processes: None) -> None:
    check = run["cells"]["wrapped"]["engine_check"]
    elsewhere = run["site"] / "fakeserve" / "launch_server.py"
    assert check["status"] == "mismatch"
    assert check["message"] == (f"{MISMATCH_WORDS}: the engine logged its file {elsewhere}, outside its tree "
                                f"{tree(run, 'three')}")
    assert [(w["kind"], w["status"]) for w in check["witnesses"]] == [
        ("import", "match"), ("version", "unknown"), ("log", "mismatch")]
    progress = [line for line in run["done"].stderr.splitlines() if MISMATCH_WORDS in line]
    assert len(progress) == 1 and " wrapped " in progress[0] and " warning " in progress[0]


def test_the_report_shows_each_cell_s_import_origin_without_local_paths(run: dict[str, Any], engine_processes: None) -> None:
    # cell.json keeps the whole path (above); a report is pasted where others read it, so it
    # keeps the path's last two parts (render/text.py no_local_paths) and says inside or OUTSIDE.
    summary = run["summary"]
    md = render(summary, "markdown") or ""
    assert ("- engine package `fakeserve` imported from `…/fakeserve/__init__.py` "
            "(inside its source tree): one, two, nosafe, wrapped") in md
    assert f"({MISMATCH_WORDS}" not in md and f"warn wrapped: {MISMATCH_WORDS}" in md
    assert f"(OUTSIDE its source tree …/worktrees/{run['shas']['one']}): wrongdir" in md
    assert str(run["cache"]) not in md.split("```")[0]  # the command that reproduces the run names its dirs
    rows = {row["cell"]: row for row in csv.DictReader(io.StringIO(render(summary, "csv") or ""))}
    assert rows["two"]["import_origin"] == "…/fakeserve/__init__.py"
    html = render(summary, "html") or ""
    assert "engine imports" in html


# The engines' own start-up lines, as their wheels write them.

def test_the_startup_patterns_read_the_file_sglang_and_vllm_log() -> None:
    # sglang 0.5.23 wheel, sglang/launch_server.py:71-77: warnings.warn(..., UserWarning, stacklevel=1)
    sglang = ("/opt/venv/lib/python3.11/site-packages/sglang/launch_server.py:71: UserWarning: 'python -m "
              "sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.")
    # vllm 0.34.0 wheel, vllm/entrypoints/openai/api_server.py:24-30: warnings.warn(..., DeprecationWarning)
    vllm = ("/src/vllm wt/vllm/entrypoints/openai/api_server.py:24: DeprecationWarning: "
            "`vllm.entrypoints.openai.api_server` is deprecated and will likely be unsupported in a future version.")
    found = re.search(SGLANG_STARTUP_FILE, "INFO starting\n" + sglang)
    assert found and found.group("path") == "/opt/venv/lib/python3.11/site-packages/sglang/launch_server.py"
    found = re.search(VLLM_STARTUP_FILE, vllm)
    assert found and found.group("path") == "/src/vllm wt/vllm/entrypoints/openai/api_server.py"


# The proof itself: the engine's interpreter asked, with its env and working directory.

def test_python_puts_the_working_directory_first_unless_pythonsafepath_is_set(tmp_path: Path) -> None:
    """The fact behind the neutral directory (CPython PyConfig.safe_path, 3.11): what the probe
    sees from a directory holding a package is that package, ahead of PYTHONPATH."""
    here, there = tmp_path / "checkout", tmp_path / "tree"
    write_package(here, "here")
    write_package(there, "there")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(there)}
    assert prove(sys.executable, "fakeserve", env, here).origin == str(here / "fakeserve" / "__init__.py")
    safe = prove(sys.executable, "fakeserve", {**env, "PYTHONSAFEPATH": "1"}, here)
    assert safe.origin == str(there / "fakeserve" / "__init__.py") and safe.outside(there) is None
    assert not (here / "fakeserve" / "IMPORTED").exists()  # find_spec imports nothing


def test_a_package_found_nowhere_or_by_no_interpreter_is_outside_every_tree(tmp_path: Path) -> None:
    missing = prove(sys.executable, "no_such_package_xyz", {"PATH": "/usr/bin:/bin"}, tmp_path)
    assert missing.origin is None and missing.outside(tmp_path) == (
        f"nowhere ({sys.executable} finds no package 'no_such_package_xyz')")
    broken = prove(str(tmp_path / "no-python"), "fakeserve", {}, tmp_path)
    assert broken.origin is None and broken.outside(tmp_path).startswith(f"nowhere (cannot run {tmp_path}/no-python")


def test_a_namespace_package_must_lie_wholly_inside_the_tree(tmp_path: Path) -> None:
    inner, outer = tmp_path / "tree" / "ns", tmp_path / "site" / "ns"
    inner.mkdir(parents=True)
    outer.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path / 'tree'}:{tmp_path / 'site'}", "PYTHONSAFEPATH": "1"}
    proof = prove(sys.executable, "ns", env, tmp_path)
    assert proof.origin == str(inner) and proof.locations == (str(inner), str(outer))
    assert proof.outside(tmp_path / "tree") == str(outer)
