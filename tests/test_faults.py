"""Faults through real processes: every simulator fault ends as that cell's error within its
timeouts, the matrix goes on, and no engine process (nor its grandchild) is left running.

Every test here starts engines (the `e2e` tier, through `engine_processes`). A matrix whose process
is not what a test checks runs the CLI in this process (tests/helpers/cli.py); the signal tests,
SIGKILL and two matrices at once run `evalkit matrix` as a process of its own."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from evalkit.evals.engine_figures import TIMING_DEPENDENT
from tests.helpers.cli import Ran, checkout_env, evalkit_cli

HEALTHY = "[--sim-seed, '1']"
PACED = "[--sim-seed, '1', --sim-tokens-per-second, '100']"
"""A healthy cell slow enough for a signal to land inside the phase a test waits for."""
TIMEOUTS = "{startup: 20, warmup: 5, stop_grace: 2, hang: 10}"
"""Start-up 20 s, not 8: on a loaded 2-core box a simulator took longer than 8 s to import and exit
(crash-startup read as `not ready after 8 s`), and the never-ready cell still ends well inside 60 s.
Hang 10 s, not 4: with two of these matrices at once (one per test worker, 8 engines on 2 cores) a
busy healthy simulator once went 4 s without a /health answer, and the truncated-stream cell was
stopped as hung (CI, 2026-12-07); the hung cell still ends well inside 60 s."""


def matrix_text(cases: dict[str, str], *, timeouts: str = TIMEOUTS,
                gsm8k: str = "{num_fewshot: 3, max_retries: 2, timeout: 5}", extra: str = "") -> str:
    """A sim matrix with one cell per case (case name -> its `args` list as YAML)."""
    values = "\n".join(f"    {name}: {{args: {args}}}" for name, args in cases.items())
    return f"""
model: sim/faults
served_name: faulty
engine: {{profile: sim}}
axes:
  case:
{values}
evals:
  gsm8k: {gsm8k}
  repetition: {{count: 4, max_tokens: 256, concurrency: 4}}
timeouts: {timeouts}
{extra}
"""


def config_text(fault_args: str, *, healthy: str = HEALTHY, timeouts: str = TIMEOUTS,
                gsm8k: str = "{num_fewshot: 3, max_retries: 2, timeout: 5}", extra: str = "") -> str:
    """A `faulty` cell with `fault_args` and a `healthy` one."""
    return matrix_text({"faulty": fault_args, "healthy": healthy}, timeouts=timeouts, gsm8k=gsm8k, extra=extra)


def run(tmp_path: Path, text: str, *extra: str) -> tuple[Ran, dict]:
    """`evalkit matrix` of `text` as run `r`, the CLI in this process (its engines are processes)."""
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    done = evalkit_cli("matrix", "--config", str(path), "--run-id", "r", "--results-dir", str(tmp_path / "results"),
                       "--limit", "40", "--json", *extra, cwd=tmp_path)
    summary = json.loads(done.stdout) if done.stdout.strip() else {}
    return done, summary


def engine_pids(tmp_path: Path, cell_id: str = "*") -> list[int]:
    """Every engine and spawned child pid a run recorded (cell.json and the engine logs), of
    every cell or of `cell_id`'s."""
    pids: list[int] = []
    for cell in (tmp_path / "results" / "r").glob(f"{cell_id}/cell.json"):
        pid = json.loads(cell.read_text()).get("engine_pid")
        if pid:
            pids.append(pid)
    for log in (tmp_path / "results" / "r").glob(f"{cell_id}/engine.log"):
        pids += [int(p) for p in re.findall(r"(?:spawned child pid|\[evalkit\] engine pid) (\d+)", log.read_text())]
    return sorted(set(pids))


def assert_nothing_left(tmp_path: Path) -> None:
    deadline = time.monotonic() + 5
    alive = engine_pids(tmp_path)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    assert not alive, f"processes left running: {alive}"


def cell(summary: dict, cell_id: str) -> dict:
    return next(c for c in summary["cells"] if c["id"] == cell_id)


FAULTS = {
    # cell (axis value) name -> (fault args, expected words in the error, expected exit code of the engine or None)
    "crash_startup": ("[--sim-fault, crash-startup]", "exited with code 3", 3),
    "never_ready": ("[--sim-fault, never-ready]", "not ready after", None),
    "crash_after": ("[--sim-fault, crash-after, --sim-fault-after, '5']", "exited with code 1", 1),
    "hang_after": ("[--sim-fault, hang-after, --sim-fault-after, '5']", "engine hangs", None),
    "fatal_log": ("[--sim-fault, fatal-log, --sim-fault-after, '5']", "Memory access fault by GPU", None),
    "http_500_always": ("[--sim-fault, http-500, --sim-fault-rate, '1.0']", "completions still failing", None),
    # the evals of a cell run at once (run/wave.py): whichever meets its last retry first is the cell's error
    "http_500_mostly": ("[--sim-fault, http-500, --sim-fault-rate, '0.7']", ("gsm8k: lm-eval failed", "HTTP 500 (attempt"),
                        None),
    "malformed_json_always": ("[--sim-fault, malformed-json, --sim-fault-rate, '1.0']", "completions still failing", None),
    "truncated_stream_always": ("[--sim-fault, truncated-stream, --sim-fault-rate, '1.0']", "stream ended without [DONE]", None),
}


ORPHAN = "[--sim-fault, ignore-sigterm, --sim-fault, spawn-orphan]"
"""An engine that ignores SIGTERM and spawns a child that outlives it unless evalkit kills it too."""


@pytest.fixture(scope="module")  # starts engines: every test that reads it asks for `engine_processes`
def fault_matrix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Ran, dict]:
    """Every fault of FAULTS in one matrix, one faulty cell each, beside the ORPHAN cell and a
    healthy one: one run shared by the tests below instead of a matrix per fault. Four cells run at
    a time (declared devices), so each fault must still end as its own cell's error while engines
    of other cells come and go."""
    tmp = tmp_path_factory.mktemp("faults")
    cases = {name: args for name, (args, _, _) in FAULTS.items()} | {"orphan": ORPHAN, "healthy": HEALTHY}
    done, summary = run(tmp, matrix_text(cases, extra="devices: {count: 4}"), "--lock-file", str(tmp / "lock"))
    return tmp, done, summary


def seconds(record: dict) -> float:
    """A cell's wall time from its record."""
    return (datetime.fromisoformat(record["finished_at"]) - datetime.fromisoformat(record["started_at"])).total_seconds()


@pytest.mark.usefixtures("engine_processes")
@pytest.mark.parametrize("name", list(FAULTS))
def test_fault_becomes_the_cells_error_within_its_timeouts(fault_matrix: tuple[Path, Ran, dict], name: str) -> None:
    tmp, _, summary = fault_matrix
    _, words, code = FAULTS[name]
    faulty = cell(summary, name)
    said = (words,) if isinstance(words, str) else words
    assert faulty["status"] == "error" and any(w in faulty["error"] for w in said), faulty.get("error")
    record = json.loads((tmp / "results" / "r" / name / "cell.json").read_text())
    assert record["error"]["log_tail"], "the last lines of the engine log are kept"
    if code is not None:
        assert record["error"]["exit_code"] == code
    assert seconds(record) < 60


@pytest.mark.usefixtures("engine_processes")
def test_the_matrix_goes_on_past_every_fault_and_leaves_no_process(fault_matrix: tuple[Path, Ran, dict]) -> None:
    tmp, done, summary = fault_matrix
    assert done.returncode == 3, done.stderr[-2000:]
    assert [c["id"] for c in summary["cells"]] == [*FAULTS, "orphan", "healthy"]
    assert cell(summary, "healthy")["status"] == "ok", cell(summary, "healthy").get("error")
    assert summary["failed_cells"] == len(FAULTS)
    assert_nothing_left(tmp)


@pytest.mark.usefixtures("engine_processes")
def test_engine_ignoring_sigterm_and_its_orphan_child_are_killed(fault_matrix: tuple[Path, Ran, dict]) -> None:
    tmp, _, summary = fault_matrix
    assert cell(summary, "orphan")["status"] == "ok"
    assert len(engine_pids(tmp, "orphan")) == 2  # the engine and the orphan-to-be
    assert_nothing_left(tmp)


@pytest.mark.usefixtures("engine_processes")
def test_transient_http_errors_are_retried_and_counted(tmp_path: Path) -> None:
    done, _ = run(tmp_path, config_text("[--sim-fault, http-500, --sim-fault-rate, '0.1']",
                                              gsm8k="{num_fewshot: 3, max_retries: 5, timeout: 5}"),
                        "--only", "case=faulty")
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "results" / "r" / "faulty" / "cell.json").read_text())
    assert record["metrics"]["gsm8k"]["retries"] > 0
    assert record["metrics"]["gsm8k"]["n"] == 40


@pytest.mark.usefixtures("engine_processes")
def test_slow_engine_over_its_cell_budget_is_stopped(tmp_path: Path) -> None:
    text = config_text("[--sim-tokens-per-second, '20']",
                       timeouts="{startup: 20, stop_grace: 2, cell: 6}")
    started = time.monotonic()
    done, summary = run(tmp_path, text, "--only", "case=faulty")
    assert done.returncode == 3
    faulty = cell(summary, "faulty")
    assert faulty["status"] == "error" and "over the cell budget of 6 s" in faulty["error"]
    assert time.monotonic() - started < 90
    assert_nothing_left(tmp_path)


def taken_port() -> socket.socket:
    """A socket bound to a free port, so an engine's bind there fails with EADDRINUSE. It does not
    listen: a listener that never answers would hold each of evalkit's health polls for their whole
    10 s HTTP timeout before the exited engine is noticed, the test's cost and not what it checks."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    return taken


@pytest.mark.usefixtures("engine_processes")
def test_fixed_port_already_taken_is_the_cells_error(tmp_path: Path) -> None:
    with taken_port() as taken:
        port = taken.getsockname()[1]
        text = config_text("[--sim-seed, '2']").replace("engine: {profile: sim}",
                                                        f"engine: {{profile: sim, port: {port}}}")
        done, summary = run(tmp_path, text)
    assert done.returncode == 3
    assert all(c["status"] == "error" and "exited with code 1" in c["error"] for c in summary["cells"])
    log = (tmp_path / "results" / "r" / "faulty" / "engine.log").read_text()
    assert "Address already in use" in log


@pytest.mark.usefixtures("engine_processes")
def test_taken_port_is_retried_on_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: the first port handed out is taken by someone else; the cell still runs."""
    from evalkit import MatrixRequest, run_matrix
    from evalkit.run import cell as lifecycle

    taken = taken_port()
    real_take = lifecycle.PORTS.take
    handed = iter([taken.getsockname()[1]])
    monkeypatch.setattr(lifecycle.PORTS, "take", lambda host: next(handed, None) or real_take(host))
    path = tmp_path / "cfg.yaml"
    path.write_text(config_text("[--sim-seed, '3']"))
    lines: list[str] = []

    class Lines:
        def update(self, cell_id: str, state: str, detail: str = "") -> None:
            lines.append(f"{cell_id} {state} {detail}")

    request = MatrixRequest(config_path=path, only=("case=faulty",), limit=10, run_id="r",
                            results_dir=tmp_path / "results", cache_dir=tmp_path / "cache", history=False)
    try:
        outcome = run_matrix(request, Lines())
    finally:
        taken.close()
    assert [c.status for c in outcome.summary.cells] == ["ok"]
    assert any("taken, retrying" in line for line in lines)


@pytest.mark.usefixtures("engine_processes")
def test_two_matrices_at_once_use_different_ports(tmp_path: Path) -> None:
    """Two evalkit processes: each hands out ports only once in its own process, so it is the OS
    (a port bound is not free) that keeps them apart."""
    procs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        path = tmp_path / name / "cfg.yaml"
        path.write_text(config_text("[--sim-seed, '4']"))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "evalkit.cli", "matrix", "--config", str(path), "--run-id", "r",
             "--results-dir", str(tmp_path / name / "results"), "--limit", "40", "--quiet"],
            cwd=tmp_path / name, env=checkout_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        assert proc.wait(timeout=240) == 0, proc.stderr.read()  # type: ignore[union-attr]
    ports = set()
    for name in ("a", "b"):
        for cell_json in (tmp_path / name / "results" / "r").glob("*/cell.json"):
            ports.add(json.loads(cell_json.read_text())["launch"]["port"])
    assert len(ports) == 4


SIGNALLED = config_text("[--sim-fault, spawn-orphan, --sim-startup-seconds, '1']", healthy=PACED,
                        gsm8k="{num_fewshot: 3}", timeouts="{startup: 30, stop_grace: 3}")
"""The matrix the signal tests interrupt while its second (healthy) cell runs."""


def interrupt_at(tmp_path: Path, sig: signal.Signals, moment: str) -> None:
    """Run SIGNALLED as run `r`, send `sig` once its healthy cell reaches `moment`, and check what
    an interrupted run leaves: exit 130 within 15 s, no engine, the run `interrupted`, the finished
    cell kept, nothing of the cut one, no temp file."""
    path = tmp_path / "cfg.yaml"
    path.write_text(SIGNALLED)
    argv = [sys.executable, "-m", "evalkit.cli", "matrix", "--config", str(path), "--run-id", "r",
            "--results-dir", str(tmp_path / "results"), "--limit", "40"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=checkout_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    # Wait until the second cell reaches the moment, then signal evalkit.
    deadline = time.monotonic() + 120
    seen = ""
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if re.search(rf"healthy\s+{moment}", line):
            break
    assert re.search(rf"healthy\s+{moment}", seen), seen
    time.sleep(0.3)
    proc.send_signal(sig)
    stopped = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert time.monotonic() - stopped < 15
    assert_nothing_left(tmp_path)
    run_json = json.loads((tmp_path / "results" / "r" / "run.json").read_text())
    assert run_json["status"] == "interrupted"
    assert json.loads((tmp_path / "results" / "r" / "faulty" / "cell.json").read_text())["status"] == "ok"
    assert not (tmp_path / "results" / "r" / "healthy" / "cell.json").exists()
    assert not list((tmp_path / "results").rglob(".*.tmp")), "no temp file is left behind"


def resume(tmp_path: Path) -> Ran:
    """`--resume r` after `interrupt_at` (the CLI in this process): it finishes the cut cell, whole,
    and leaves no engine."""
    resumed = evalkit_cli("matrix", "--resume", "r", "--results-dir", str(tmp_path / "results"), "--json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)
    assert [c["status"] for c in summary["cells"]] == ["ok", "ok"]
    healthy = cell(summary, "healthy")["metrics"]
    assert healthy["gsm8k.n"] == 40 and healthy["repetition.n"] == 4
    assert_nothing_left(tmp_path)
    return resumed


@pytest.mark.usefixtures("engine_processes")
@pytest.mark.parametrize(("sig", "moment"), [(signal.SIGTERM, "gsm8k")])
def test_signal_stops_engines_keeps_finished_cells_and_resume_completes(tmp_path: Path, sig: signal.Signals, moment: str) -> None:
    """The fourth moment, SIGINT in gsm8k, is interrupted and resumed by the next test. Two more
    moments are `slow` (the next test): test_interrupts stops every phase in e2e at two moments and,
    in its slow sweep, at all of them."""
    interrupt_at(tmp_path, sig, moment)
    resume(tmp_path)


@pytest.mark.slow  # ~25 s each
@pytest.mark.parametrize(("sig", "moment"), [(signal.SIGINT, "starting"), (signal.SIGINT, "repetition")])
def test_signal_stops_engines_keeps_finished_cells_and_resume_completes_slow(
        tmp_path: Path, sig: signal.Signals, moment: str) -> None:
    """The test above at two more moments. A function of its own: a `slow` test that asked for
    `engine_processes` would be put in `e2e` too (tests/conftest.py), and a fixture cannot be asked
    for by one parameter only."""
    interrupt_at(tmp_path, sig, moment)
    resume(tmp_path)


@pytest.mark.usefixtures("engine_processes")
def test_resume_after_sigint_gives_the_results_of_an_uninterrupted_run(tmp_path: Path) -> None:
    """SIGINT in gsm8k, then resume: the same results as the same matrix run whole (beside it, in
    its own results folder, to save the wall time)."""
    (tmp_path / "whole").mkdir()
    (tmp_path / "whole" / "cfg.yaml").write_text(SIGNALLED)
    whole = subprocess.Popen([sys.executable, "-m", "evalkit.cli", "matrix", "--config", "cfg.yaml", "--run-id", "r",
                              "--results-dir", "results", "--limit", "40", "--json"],
                             cwd=tmp_path / "whole", env=checkout_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    interrupt_at(tmp_path, signal.SIGINT, "gsm8k")
    resumed = resume(tmp_path)
    whole_out, whole_err = whole.communicate(timeout=240)
    assert whole.returncode == 0, whole_err[-2000:]

    def results(stdout: str) -> list[tuple[str, str, str]]:
        # figures that depend on timing (speeds; engine tokens of early-aborted streams) differ between any two runs
        return [(c["id"], c["status"], json.dumps({k: v for k, v in c["metrics"].items() if k not in TIMING_DEPENDENT},
                                                  sort_keys=True))
                for c in json.loads(stdout)["cells"]]

    assert results(resumed.stdout) == results(whole_out)
    for cell_id in ("faulty", "healthy"):
        a = (tmp_path / "whole" / "results" / "r" / cell_id / "gsm8k.samples.jsonl").read_text()
        b = (tmp_path / "results" / "r" / cell_id / "gsm8k.samples.jsonl").read_text()
        assert a == b, cell_id


@pytest.mark.usefixtures("engine_processes")
@pytest.mark.parametrize("after_s", [1.5, 4.0, 7.0])
def test_sigkill_of_evalkit_leaves_whole_files_and_no_engine(tmp_path: Path, after_s: float) -> None:
    """SIGKILL cannot be caught: files are still whole (atomic renames) and the engine dies with
    evalkit (PR_SET_PDEATHSIG), so nothing holds the GPUs."""
    path = tmp_path / "cfg.yaml"
    path.write_text(config_text("[--sim-seed, '6', --sim-tokens-per-second, '200']", gsm8k="{num_fewshot: 3}"))
    proc = subprocess.Popen([sys.executable, "-m", "evalkit.cli", "matrix", "--config", str(path), "--run-id", "r",
                             "--results-dir", str(tmp_path / "results"), "--limit", "40", "--quiet"], cwd=tmp_path,
                            env=checkout_env())
    time.sleep(after_s)
    proc.kill()
    proc.wait()
    assert_nothing_left(tmp_path)
    for f in (tmp_path / "results").rglob("*"):
        if f.name.endswith(".json"):
            json.loads(f.read_text())
        elif f.name.endswith(".jsonl"):
            [json.loads(line) for line in f.read_text().split("\n") if line]
    from evalkit.store import resolve_run

    if (tmp_path / "results" / "r" / "run.json").exists():
        assert resolve_run(tmp_path / "results", "latest").name == "r"
