"""Shared fixtures, and the rule that sorts every test into its tier by what it needs.

Tiers (README.md, Tests; docs/tests.md says how to write a test for each):

* default (`python3 -m pytest`): tests that run in this process, plus the few marked `smoke` that
  cross each real boundary once (the CLI as a process, the simulator over a real port, lm-eval's
  CLI, git);
* `e2e`: every other test that starts a process of evalkit's or an engine. Not marked by hand: a
  test that asks for one of the fixtures in `E2E_FIXTURES` (a simulator process, the CLI as a
  process, a run whose cells start engines) is put there by `pytest_collection_modifyitems`;
* `slow`, `slurm`, `real_engine`: by marker, as before.

Every test and every process it starts sees `EVALKIT_WAIT_SCALE=0` (evalkit/waits.py) unless the
environment sets it (.ci/run runs the slow tier at 1, the product's own waits): evalkit's retry
back-offs and poll slow-downs take no time; a test about them sets the scale back.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from hypothesis import settings

from evalkit import waits
from evalkit.config.loader import _UniqueKeyLoader
from tests.helpers import cli
from tests.helpers.sim import SimServer

# Property tests check behaviour, never speed (benchmarks/ measures that): Hypothesis' default
# 200 ms deadline per example failed detector properties on a loaded 2-core machine (3 s for one
# example while other jobs ran), a timing verdict no test here should give.
settings.register_profile("evalkit", deadline=None)
settings.load_profile("evalkit")

os.environ.setdefault(waits.ENV, "0")  # before any test, so every process a test starts inherits it
# A test reads the same width whether it runs in pytest's process or in an xdist worker (whose
# environment says COLUMNS=80): without a TTY, evalkit then prints PIPED_WIDTH wide unless the
# test sets COLUMNS itself.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


def demo_without_consistency() -> str:
    """configs/demo.yaml without the consistency eval and its thresholds, for tests that require
    two runs of one matrix (side by side and one by one, local and on Slurm) to agree exactly:
    that eval measures how outputs depend on which requests share a step, which is timing, and
    the buggy cell's race differs run to run by design."""
    text = re.sub(r"\n  consistency:\n(    .*\n)+", "\n", (CONFIGS / "demo.yaml").read_text(encoding="utf-8"))
    kept = "".join(line for line in text.splitlines(keepends=True) if "consistency." not in line)
    assert "consistency" not in kept, "configs/demo.yaml names consistency where this cannot remove it"
    return kept


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    return tmp_path / "results"


def write_config(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


E2E_FIXTURES = frozenset({"sim_process", "evalkit_process", "engine_processes", "program"})
"""The fixtures through which a test starts processes: asking for one puts it in the `e2e` tier,
unless it is marked `smoke` (one of the few default-tier tests that cross each boundary once)."""


OTHER_TIERS = ("slow", "slurm", "real_engine")
"""Tiers chosen by marker: a test there is never also `e2e`, so each tier runs it once."""

SHARED_RUNS = {"demo_runs": "session", "fault_matrix": "module", "world": "module"}
"""Fixtures that make a whole run once for many tests (the session's demo run, 60-80 s of a
worker; test_faults' matrix of every fault, test_bisect_step's repository and ends, ~55 s each):
every test that reads one is put in that fixture's xdist group (a module fixture's group is named
after its module too), so one worker makes it once, not each worker its own copy; and two copies of
test_faults' matrix never run at once (8 engines on 2 cores once starved a healthy engine's health
probe). A test already in a group keeps it."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        shared = sorted(set(SHARED_RUNS).intersection(fixtures))
        if shared and not item.get_closest_marker("xdist_group"):
            name = shared[0]
            item.add_marker(pytest.mark.xdist_group(name if SHARED_RUNS[name] == "session" else f"{item.path.stem}.{name}"))
        if any(item.get_closest_marker(name) for name in ("smoke", *OTHER_TIERS)):
            continue  # a smoke test stays in the default tier; a slow one runs once, in its own
        if E2E_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def sim_process() -> Iterator[Callable[..., SimServer]]:
    """Start simulator processes: `sim_process(*flags, model=..., env=..., wait=...)` is a started
    `SimServer` (tests/helpers/sim.py); every one is killed, process group and all, after the test."""
    started: list[SimServer] = []

    def start(*args: str, **options: object) -> SimServer:
        server = SimServer(*args, **options)  # type: ignore[arg-type]
        started.append(server)
        return server.__enter__()

    yield start
    for server in reversed(started):
        server.kill_group()


@pytest.fixture
def evalkit_process() -> Callable[..., object]:
    """`python -m evalkit.cli ARGS` as its own process (tests/helpers/cli.py, `evalkit_process`):
    for a test whose behaviour is the process boundary (signals, the real program's exit)."""
    return cli.evalkit_process


@pytest.fixture
def program() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run another program as a user would (a benchmark script, a shell script, a tool): `program(
    *argv, cwd=..., env=..., timeout=..., input=...)`, its output captured as text, never raising
    on a non-zero exit. For a test whose point is how that program starts or ends."""

    def run(*argv: str, cwd: Path | str = ROOT, env: dict[str, str] | None = None, timeout: float = 300,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              input=input, check=False)

    return run


def _engines() -> set[int]:
    """Simulator and evalkit processes alive now, descendants of this test process."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            command = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "evalkit.sim" in command or "evalkit.cli" in command:
            found.add(child.pid)
    return found


def _assert_gone(pids: set[int], what: str) -> None:
    """Each of `pids` ended, given 5 s to finish stopping; else fail naming the ones still alive."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=5)
    assert not alive, f"{what}: {sorted(p.pid for p in alive)}"


@pytest.fixture
def engine_processes() -> Iterator[None]:
    """For a test whose run starts engines (a matrix, a bisect step): after it, none of the engines
    it started is still alive; an orphan fails the test by pid and command line."""
    before = _engines()
    yield
    _assert_gone(_engines() - before, "engine processes left behind")


@pytest.fixture(scope="session")
def shared_sim() -> Iterator[SimServer]:
    """One simulator process with default flags for the whole session (a worker's, under xdist):
    for clients evalkit does not own, which need a real port (lm-eval's GSM8K). Read-only by
    convention: a test that needs other flags, faults or fresh stats starts its own
    (`sim_process`) or builds one in-process (tests/helpers/sim.py, `simulator`)."""
    with SimServer() as server:
        yield server


def demo_config(tmp: Path, name: str, seed: int, repetition: bool) -> Path:
    """configs/demo.yaml, faster, with 8 shorter long generations (or none), 8 divergence and 8
    consistency prompts (each eval's metrics and checks, at a quarter of the work), and a threshold that
    breaks at 40 questions (no alpha: any drop above 2 points of a fix-off cell against its twin)."""
    raw = yaml.load((CONFIGS / "demo.yaml").read_text(), Loader=_UniqueKeyLoader)  # YAML 1.2: `on:` is a key
    raw["engine"]["args"] = ["--sim-startup-seconds", "0.1", "--sim-seed", str(seed)]
    raw["evals"]["repetition"] = {"count": 8, "max_tokens": 1024, "concurrency": 8} if repetition else {"enabled": False}
    raw["evals"]["divergence"] = {"count": 8, "max_tokens": 256}
    raw["evals"]["consistency"] = {**raw["evals"]["consistency"], "count": 8}
    raw["thresholds"].append({"metric": "gsm8k.flexible", "max_drop_ab": 0.02})
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The session's one real demo run, made once (per xdist worker) and read by the report,
    compare, history and CLI tests: `evalkit matrix` on the simulator, in this process, its cells'
    engines real processes (5 engine starts, 10-20 s).

    Run A: the baseline pair tp8-full and the bug's pair dp8-piecewise (fix on/off), 40 questions
    and 8 long generations, run as a GitHub Actions step would: `step_summary` is its
    $GITHUB_STEP_SUMMARY, which held one line before, `a_stdout` its standard output (the
    annotations and the report: -q silences only the progress on stderr), `a_junit` its JUnit
    file. Run B: only dp8-piecewise-fixoff, another simulator seed, 30 questions and no
    repetition eval, so compare meets cells in one run only, pairs on the shared questions and
    meets a cell without collapse metrics."""
    tmp = tmp_path_factory.mktemp("demo-runs")
    results = tmp / "results"
    step_summary = tmp / "step-summary.md"
    step_summary.write_text("# an earlier step's summary\n")
    a = cli.evalkit_cli("matrix", "--config", str(demo_config(tmp, "demo-a", 0, repetition=True)), "--limit", "40",
                        "--only", "parallel=tp8,graph=full", "--only", "parallel=dp8,graph=piecewise",
                        "--run-id", "run-a", "--results-dir", str(results), "-q", "--junit", str(tmp / "run-a.junit.xml"),
                        cwd=tmp, env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(step_summary)})
    b = cli.evalkit_cli("matrix", "--config", str(demo_config(tmp, "demo-b", 1, repetition=False)), "--limit", "30",
                        "--only", "parallel=dp8,graph=piecewise,fix=fixoff", "--run-id", "run-b",
                        "--results-dir", str(results), "-q", cwd=tmp)
    for done, run_id in ((a, "run-a"), (b, "run-b")):  # exit 1 is a broken check, not a crash
        assert done.returncode in (0, 1) and (results / run_id / "summary.json").exists(), done.stderr[-3000:]
    (tmp / "run-a.stdout").write_text(a.stdout)
    return {"results": results, "a": results / "run-a", "b": results / "run-b", "step_summary": step_summary,
            "a_stdout": tmp / "run-a.stdout", "a_junit": tmp / "run-a.junit.xml"}


@pytest.fixture(scope="session", autouse=True)
def no_engine_outlives_the_session() -> Iterator[None]:
    """After the last test (of this xdist worker): no simulator or evalkit process started by any
    test, fixture or module-scoped run is still alive. `engine_processes` checks each test; this
    catches what a shared run (set up before any test's own check) left behind."""
    yield
    _assert_gone(_engines(), "engine processes outlived the test session")
