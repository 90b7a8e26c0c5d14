"""`evalkit bisect` through real processes: a throwaway engine repo, the real simulator, real git.

One repo for the whole module: every branch forks from one healthy root commit and drops the fix
at its own commit k (tests/helpers/git.py), so one `evalkit matrix` run of the root is the good
end of every bisect (`--good-run`), and each bisect starts engines only for its bad end and its
steps. The engine starts are counted from what is on disk: every cell folder with an engine.log.
"""

from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.cli import checkout_env, evalkit_process
from tests.helpers.git import add_branch, config_text, make_repo

# ~6 min. One xdist worker runs the whole module: its tests share the module's `world` (the report
# test reads the bisects the five-seeds test ran).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("bisect-world")]
NAME = "bisect-e2e"
"""The served model of this module's engines: `sim_processes` tells them from another module's
engines running beside them (test_bisect_on_regression's are `bisect-test`)."""

N = 64
LIMIT = "200"


def sim_processes() -> list[psutil.Process]:
    """This module's simulators anywhere on the box: an engine whose evalkit was SIGKILLed is no
    longer a descendant of this process, where conftest's `engine_processes` looks."""
    return [p for p in psutil.process_iter(["cmdline"])
            if "evalkit.sim" in (cmd := p.info["cmdline"] or []) and NAME in cmd]


class World:
    """The shared repo, config and good-end run; `bisect` runs the CLI against them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repo, self.good = make_repo(root)
        self.config = root / "bisect.yaml"
        self.config.write_text(config_text(self.repo, self.good, name=NAME))
        self.results = root / "results"
        self.cache = root / "cache"
        done = evalkit_process("matrix", "--config", str(self.config), "--run-id", "good", "--limit", LIMIT,
                       "--results-dir", str(self.results), "--cache-dir", str(self.cache), "--quiet", cwd=root)
        assert done.returncode == 0, done.stderr

    def args(self, *args: str, good_run: bool = True, config: Path | None = None, cache: Path | None = None) -> list[str]:
        return ["bisect", "--config", str(config or self.config), "--cell", "head", "--limit", LIMIT, "--quiet",
                "--results-dir", str(self.results), "--cache-dir", str(cache or self.cache),
                *(["--good-run", "good"] if good_run else []), *args]

    def argv(self, *args: str, good_run: bool = True, config: Path | None = None, cache: Path | None = None) -> list[str]:
        """`evalkit bisect ...` as a command line, for a process a test signals."""
        return [sys.executable, "-m", "evalkit.cli", *self.args(*args, good_run=good_run, config=config, cache=cache)]

    def bisect(self, *args: str, good_run: bool = True, config: Path | None = None) -> subprocess.CompletedProcess[str]:
        return evalkit_process(*self.args(*args, good_run=good_run, config=config), cwd=self.root)

    def record(self, bisect_id: str) -> dict[str, Any]:
        return json.loads((self.results / f"bisect-{bisect_id}" / "bisect.json").read_text())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("bisect"))


def engine_starts(world: World, bisect_id: str) -> dict[str, int]:
    folder = world.results / f"bisect-{bisect_id}"
    started = [p.parent.name.split("-")[0] for p in folder.glob("*/engine.log")]
    return {role: started.count(role) for role in ("good", "bad", "step")}


def test_five_seeds_name_exactly_the_commit_that_turned_the_bug_on(world: World) -> None:
    """Each seed: its own clone of the repo (the same root commit, so the same good-end run), its
    own branch of 64 commits with the bug from commit k on; the five bisects run side by side."""
    runs = {}
    for seed in range(5):
        k = random.Random(seed).randrange(1, N)
        clone = world.root / f"seed{seed}"
        subprocess.run(["git", "clone", "-q", str(world.repo), str(clone)], check=True)
        shas = add_branch(clone, "bug", N, first_bad=k)
        config = world.root / f"seed{seed}.yaml"
        config.write_text(config_text(clone, world.good, name=NAME))
        argv = world.argv("--good", world.good, "--bad", "bug", "--bisect-id", f"seed{seed}", "--json",
                          config=config, cache=world.root / f"cache{seed}")
        runs[seed] = (k, shas, subprocess.Popen(argv, cwd=world.root, env=checkout_env(), stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True))
    for seed, (k, shas, proc) in runs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        record = json.loads(stdout)
        assert record == world.record(f"seed{seed}")  # --json prints bisect.json
        assert (record["status"], record["first_bad"]) == ("found", shas[k]), (seed, k)
        assert len(record["commits"]) == N - 1 and record["commits"][-1]["sha"] == shas[-1]
        starts = engine_starts(world, f"seed{seed}")
        assert starts["good"] == 0 and starts["bad"] == 1  # the good end came from --good-run
        assert starts["step"] == len(record["steps"]) <= math.ceil(math.log2(N)) + 1, (seed, starts)
        assert {s["verdict"] for s in record["steps"]} <= {"good", "bad"}
        for step in record["steps"]:
            assert step["questions"] <= int(LIMIT) and step["wall_s"] > 0
            assert (step["verdict"] == "bad") == (shas.index(step["sha"]) >= k)
    assert not sim_processes()


def test_the_report_names_the_commit_with_its_subject_and_evidence(world: World) -> None:
    record = world.record("seed0")
    first = next(c for c in record["commits"] if c["sha"] == record["first_bad"])
    # the command it started with, plus --resume: the same terms are accepted
    done = world.bisect("--resume", "seed0", "--format", "markdown", config=world.root / "seed0.yaml")
    assert done.returncode == 0, done.stderr
    assert f"`{first['sha']}`" in done.stdout and "drop the ca\\_comm copy-in" in done.stdout
    assert first["author_date"] in done.stdout
    assert "gsm8k" in done.stdout and "p-value" in done.stdout
    assert engine_starts(world, "seed0")["step"] == len(record["steps"])  # resuming a finished bisect runs nothing


def test_an_untestable_probe_is_skipped_and_the_first_bad_commit_still_found(world: World) -> None:
    shas = add_branch(world.repo, "skips", 8, first_bad=5, broken=frozenset({3}))  # commit 3 is the first probe
    done = world.bisect("--good", world.good, "--bad", "skips", "--bisect-id", "skips", "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["first_bad"] == shas[5]
    untestable = [s for s in record["steps"] if s["verdict"] == "untestable"]
    assert [s["sha"] for s in untestable] == [shas[3]]
    assert "engine exited" in untestable[0]["reason"]
    assert "this commit does not build" in (world.results / "bisect-skips" / untestable[0]["cell_dir"] / "engine.log").read_text()


def test_only_untestable_commits_left_is_exit_3_with_the_range(world: World) -> None:
    shas = add_branch(world.repo, "stuck", 8, first_bad=5, broken=frozenset({3, 4}))
    done = world.bisect("--good", world.good, "--bad", "stuck", "--bisect-id", "stuck", "--json")
    assert done.returncode == 3, done.stderr
    record = json.loads(done.stdout)
    assert (record["status"], record["first_bad"]) == ("untestable", None)
    assert record["untestable"] == shas[3:6]  # 3 and 4 could not be tested: any of 3, 4, 5 may be first


def test_a_bad_end_that_is_not_bad_stops_with_exit_1(world: World) -> None:
    shas = add_branch(world.repo, "healthy", 4, first_bad=99)
    done = world.bisect("--good", world.good, "--bad", "healthy", "--bisect-id", "healthy", "--json")
    assert done.returncode == 1, done.stderr
    record = json.loads(done.stdout)
    assert record["status"] == "ends_not_as_claimed" and record["steps"] == []
    assert record["bad"]["sha"] == shas[-1] and "breaks no failing threshold" in record["message"]


def test_a_good_end_that_is_bad_too_stops_with_exit_1(world: World) -> None:
    shas = add_branch(world.repo, "early", 5, first_bad=2)
    done = world.bisect("--good", shas[3], "--bad", "early", "--bisect-id", "early", "--json", good_run=False)
    assert done.returncode == 1, done.stderr
    record = json.loads(done.stdout)
    assert record["status"] == "ends_not_as_claimed"
    assert engine_starts(world, "early") == {"good": 1, "bad": 1, "step": 0}


@pytest.mark.parametrize("args, message", [
    (["--good", "no-such-ref", "--bad", "main"], "error: --good no-such-ref: no such commit, branch or tag in {repo}"),
    (["--good", "main", "--bad", "v9"], "error: --bad v9: no such commit, branch or tag in {repo}"),
    (["--good", "{side}", "--bad", "{good}"], "is not an ancestor of --bad"),
    (["--cell", "nope", "--good", "{good}", "--bad", "seed0"], "error: --cell nope: not a cell of the matrix (cells: head)"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_starts(world: World, args: list[str], message: str) -> None:
    if "{side}" in args and not hasattr(world, "side"):
        world.side = add_branch(world.repo, "side", 2, first_bad=99)[-1]  # type: ignore[attr-defined]
    before = set(world.results.iterdir())
    done = world.bisect(*(a.format(good=world.good, side=getattr(world, "side", "")) for a in args), good_run=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message.format(repo=world.repo) in lines[0], lines
    assert set(world.results.iterdir()) == before


def wait_for_steps(world: World, bisect_id: str, count: int) -> None:
    path = world.results / f"bisect-{bisect_id}" / "bisect.json"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (path.is_file() and len(json.loads(path.read_text())["steps"]) >= count):
        time.sleep(0.02)


def test_sigkill_and_ctrl_c_keep_finished_steps_and_resume_runs_only_the_rest(world: World) -> None:
    """One bisect, stopped twice: SIGKILL after its first step (bisect.json stays whole, the engine
    dies with evalkit), Ctrl-C after the next (exit 130), then resumed to the end; no finished
    step is ever run again."""
    shas = add_branch(world.repo, "interrupt", 16, first_bad=11)
    popen = {"cwd": world.root, "env": checkout_env(), "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen(world.argv("--good", world.good, "--bad", "interrupt", "--bisect-id", "interrupt"), **popen)
    wait_for_steps(world, "interrupt", 1)
    proc.kill()
    proc.communicate(timeout=30)
    killed = world.record("interrupt")  # whole: written by rename, never in place
    assert killed["status"] == "running" and killed["steps"]
    deadline = time.monotonic() + 15
    while sim_processes() and time.monotonic() < deadline:  # the engine dies with its parent
        time.sleep(0.1)
    assert not sim_processes()

    proc = subprocess.Popen(world.argv("--resume", "interrupt", good_run=False), **popen)
    wait_for_steps(world, "interrupt", len(killed["steps"]) + 1)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "--resume interrupt" in stderr
    assert not sim_processes()
    interrupted = world.record("interrupt")
    assert interrupted["status"] == "interrupted" and interrupted["steps"][:len(killed["steps"])] == killed["steps"]
    kept = {s["cell_dir"]: (world.results / "bisect-interrupt" / s["cell_dir"] / "cell.json").stat().st_mtime_ns
            for s in interrupted["steps"]}

    done = world.bisect("--resume", "interrupt", "--json", good_run=False)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["first_bad"] == shas[11] and len(record["resumed_at"]) == 2
    assert record["steps"][:len(interrupted["steps"])] == interrupted["steps"]  # reused, not re-run
    for folder, mtime in kept.items():
        assert (world.results / "bisect-interrupt" / folder / "cell.json").stat().st_mtime_ns == mtime
    assert record["engine_starts"] >= 1 + len(record["steps"])  # the bad end and every step, over all three runs
    assert not sim_processes()

    before = (world.results / "bisect-interrupt" / "bisect.json").read_bytes()
    other = world.bisect("--resume", "interrupt", "--bad", "main", good_run=False)  # not the range it bisects
    assert other.returncode == 2
    assert other.stderr.strip().splitlines()[-1].endswith(
        "--bad main: --resume interrupt keeps the terms it started with (it has --bad interrupt);"
        " drop the option or start a new bisect")
    assert (world.results / "bisect-interrupt" / "bisect.json").read_bytes() == before
