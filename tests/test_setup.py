"""A source tree's setup step (engine/setup.py), run for real in a real git worktree."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from evalkit.config import Source
from evalkit.engine.setup import describe_setup, ensure_built, setup_plan
from evalkit.engine.sources import ResolvedSource, checkout
from evalkit.errors import SetupFailed
from tests.test_sources import make_engine_repo


@pytest.fixture
def tree(tmp_path: Path) -> ResolvedSource:
    repo, before, _ = make_engine_repo(tmp_path)
    return checkout(Source(repo=str(repo), ref=before), tmp_path / "cache")


def script(code: str) -> list[str]:
    return ["{python}", "-c", code]


def test_setup_runs_in_the_worktree_once_and_logs_beside_it(tree: ResolvedSource) -> None:
    plan = setup_plan(script("import os; print('building in', os.getcwd()); open('built.txt', 'w').write('x')"),
                      tree.worktree, sys.executable)
    first = ensure_built(plan, tree)
    assert first["status"] == "built" and (tree.worktree / "built.txt").exists()
    assert plan.log.parent == plan.marker.parent == tree.worktree.parent  # beside the worktree, not in it
    assert f"building in {tree.worktree}" in plan.log.read_text()
    marked = plan.marker.stat().st_mtime_ns
    (tree.worktree / "built.txt").unlink()
    again = ensure_built(setup_plan(plan.argv, tree.worktree, sys.executable), tree)
    assert again["status"] == "reused" and not (tree.worktree / "built.txt").exists()  # not run again
    assert plan.marker.stat().st_mtime_ns == marked


def test_a_changed_setup_runs_again(tree: ResolvedSource) -> None:
    one = setup_plan(script("print('one')"), tree.worktree, sys.executable)
    two = setup_plan(script("print('two')"), tree.worktree, sys.executable)
    assert ensure_built(one, tree)["status"] == "built"
    assert one.marker != two.marker and not two.built
    assert ensure_built(two, tree)["status"] == "built" and "two" in two.log.read_text()
    other_python = setup_plan(script("print('one')"), tree.worktree, "/opt/other/python3")
    assert other_python.marker != one.marker  # another interpreter is another build


def test_a_failed_setup_names_source_ref_and_log_and_leaves_no_marker(tree: ResolvedSource) -> None:
    plan = setup_plan(script("import sys; print('compiling _C'); sys.exit(\"error: unknown type name 'half2'\")"),
                      tree.worktree, sys.executable)
    with pytest.raises(SetupFailed) as caught:
        ensure_built(plan, tree)
    error = caught.value
    assert str(error) == f"source {tree.repo}@{tree.ref}: setup exited with 1; log {plan.log}"
    assert error.info["status"] == "failed" and error.info["exit_code"] == 1
    assert error.log_tail.splitlines()[-1] == "error: unknown type name 'half2'"
    assert not plan.built


def test_a_missing_program_is_a_failed_setup_with_the_reason_in_its_log(tree: ResolvedSource) -> None:
    plan = setup_plan(["no-such-build-tool", "--all"], tree.worktree, sys.executable)
    with pytest.raises(SetupFailed):
        ensure_built(plan, tree)
    assert "no-such-build-tool" in plan.log.read_text() and not plan.built


def test_a_setup_killed_half_way_leaves_no_marker_and_runs_again(tree: ResolvedSource) -> None:
    """A crash mid-build (here the build is SIGKILLed after writing half its output)."""
    code = ("import os, pathlib, signal; p = pathlib.Path('runs.txt'); "
            "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); os.kill(os.getpid(), signal.SIGKILL)")
    plan = setup_plan(script(code), tree.worktree, sys.executable)
    for _ in range(2):
        with pytest.raises(SetupFailed, match="setup exited with -9"):
            ensure_built(plan, tree)
        assert not plan.built
    assert (tree.worktree / "runs.txt").read_text() == "xx"  # run again, not taken for built


def test_a_stop_kills_the_build_and_marks_nothing(tree: ResolvedSource) -> None:
    plan = setup_plan(script("import time; print('long build', flush=True); time.sleep(60)"), tree.worktree,
                      sys.executable)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    with pytest.raises(SetupFailed):
        ensure_built(plan, tree, stop)
    assert time.monotonic() - started < 15 and not plan.built


def test_two_cells_of_one_commit_side_by_side_build_it_once(tree: ResolvedSource) -> None:
    code = ("import pathlib, time; p = pathlib.Path('runs.txt'); "
            "p.write_text(p.read_text() + 'x' if p.exists() else 'x'); time.sleep(0.5)")
    plan = setup_plan(script(code), tree.worktree, sys.executable)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(ensure_built(plan, tree)["status"])) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["built", "reused"]  # type: ignore[type-var]
    assert (tree.worktree / "runs.txt").read_text() == "x"


def test_plan_says_what_will_be_built_and_warns_for_an_engine_that_needs_a_build(tree: ResolvedSource,
                                                                              tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    source = Source(repo=tree.repo, ref=tree.ref, setup=script("print('x')"))
    said = describe_setup(source, cache, sys.executable, builds_from_source=True)
    assert said.startswith("setup ") and f"runs once in {tree.worktree}" in said
    ensure_built(setup_plan(source.setup or [], tree.worktree, sys.executable), tree)
    assert "already built" in describe_setup(source, cache, sys.executable, builds_from_source=True)
    bare = Source(repo=tree.repo, ref=tree.ref)
    assert describe_setup(bare, cache, sys.executable, builds_from_source=True).startswith("WARNING: no source.setup")
    assert describe_setup(bare, cache, sys.executable, builds_from_source=False).startswith("no setup")
