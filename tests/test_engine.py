"""Engine lifecycle through real processes: fail fast on exit, time out, stop the whole group.
Every test starts an engine process (a `python -c` stand-in), so asks for `engine_processes` (the
`e2e` tier); the engine that exits while starting is also a default-tier `smoke` test (~1 s)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from evalkit.engine import EngineProcess, free_port
from evalkit.errors import EngineExited, EngineFault, StartupTimeout

pytestmark = pytest.mark.usefixtures("engine_processes")


def engine(tmp_path: Path, code: str, **kw: object) -> EngineProcess:
    return EngineProcess(
        argv=[sys.executable, "-c", code], env=dict(os.environ), log_path=tmp_path / "engine.log",
        base_url=f"http://127.0.0.1:{free_port()}", served_name="m", stop_grace_s=0.5, **kw,  # type: ignore[arg-type]
    )


@pytest.mark.smoke  # the default tier's one engine that dies before it is ready (its exit code and log tail)
def test_exit_during_startup_fails_at_once_with_code_and_log_tail(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(EngineExited) as e:
        with engine(tmp_path, "print('loading weights', flush=True); raise SystemExit(3)") as proc:
            proc.wait_ready(timeout_s=60)
    assert time.monotonic() - started < 10
    assert e.value.exit_code == 3 and "loading weights" in e.value.log_tail


def test_never_ready_times_out(tmp_path: Path) -> None:
    with pytest.raises(StartupTimeout, match="not ready after"):
        with engine(tmp_path, "import time; time.sleep(60)") as proc:
            proc.wait_ready(timeout_s=0.5)


def test_fatal_log_line_fails_the_cell(tmp_path: Path) -> None:
    code = "import time; print('Memory access fault by GPU node-2', flush=True); time.sleep(60)"
    with pytest.raises(EngineFault, match="Memory access fault"):
        with engine(tmp_path, code, fatal_patterns=[r"Memory access fault by GPU"]) as proc:
            proc.wait_ready(timeout_s=30)


def test_stop_kills_group_including_children_and_sigterm_ignorers(tmp_path: Path) -> None:
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
        "print('CHILDPID', child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = engine(tmp_path, code)
    proc.start()
    deadline = time.monotonic() + 10
    while "CHILDPID " not in (tmp_path / "engine.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((tmp_path / "engine.log").read_text().split("CHILDPID ")[-1].split()[0])
    parent = proc.pid
    proc.stop()
    for pid in (parent, child):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_stopped_engine_is_not_running_even_when_another_thread_was_polling_it(tmp_path: Path) -> None:
    """`stop` reaps the engine it ended, although another thread (the monitor, a wave's eval)
    held Popen's waitpid lock at that moment, where `poll()` answers None: `running` is False at
    once after `stop` (a bisect step stopped half way saw it True in CI)."""
    proc = engine(tmp_path, "import time; time.sleep(600)")
    proc.start()
    popen = proc._proc
    assert popen is not None
    polling = threading.Event()

    def another_poller() -> None:
        with popen._waitpid_lock:  # type: ignore[attr-defined]  # what Popen.poll holds while it polls
            polling.set()
            time.sleep(0.6)

    poller = threading.Thread(target=another_poller)
    poller.start()
    polling.wait()
    proc.stop()
    assert not proc.running
    poller.join()


def test_after_an_eval_failed_an_engine_that_stopped_answering_is_given_time_to_show_its_exit(tmp_path: Path) -> None:
    # a crashed engine's port is closed before its process has exited: the eval's connection error
    # comes first, and the cell must still name the engine's exit, not the eval's error
    with engine(tmp_path, "import time; time.sleep(1.5); raise SystemExit(1)") as proc:
        started = time.monotonic()
        with pytest.raises(EngineExited, match="exited with code 1"):
            proc.settle(within_s=30)
    assert time.monotonic() - started < 20


def test_after_an_eval_failed_an_engine_that_answers_its_health_path_is_alive_at_once(tmp_path: Path) -> None:
    port = free_port()
    code = ("import http.server\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        self.send_response(200); self.end_headers()\n"
            f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n")
    proc = EngineProcess(argv=[sys.executable, "-c", code], env=dict(os.environ), log_path=tmp_path / "engine.log",
                         base_url=f"http://127.0.0.1:{port}", served_name="m", stop_grace_s=0.5)
    with proc:
        _wait_for_health(f"http://127.0.0.1:{port}/health")
        started = time.monotonic()
        proc.settle(within_s=30)
        assert time.monotonic() - started < 5 and proc.running


def _wait_for_health(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered")


def test_an_engine_that_crashes_while_a_health_probe_waits_is_its_exit_not_a_hang(tmp_path: Path) -> None:
    # /health answers the readiness wait; the watchdog's first probe then waits 1.8 s and the engine
    # exits 1 under it, 2.3 s after the watchdog's last answer (its hang timeout: 2 s): the watchdog
    # looks again and finds the exit, which is the cell's error, not "engine hangs"
    port = free_port()
    code = ("import http.server, os, time, threading\n"
            "served = []\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def log_message(self, *a): pass\n"
            "    def do_GET(self):\n"
            "        served.append(1)\n"
            "        if len(served) > 1:\n"
            "            time.sleep(1.8); os._exit(1)\n"
            "        self.send_response(200); self.end_headers()\n"
            f"http.server.ThreadingHTTPServer(('127.0.0.1', {port}), H).serve_forever()\n")
    proc = EngineProcess(argv=[sys.executable, "-c", code], env=dict(os.environ), log_path=tmp_path / "engine.log",
                         base_url=f"http://127.0.0.1:{port}", served_name="m", stop_grace_s=0.5,
                         hang_timeout_s=2.0, readiness="health")
    with proc:
        proc.wait_ready(timeout_s=30)
        deadline = time.monotonic() + 30
        while proc.running and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # the watchdog's look after its failed probe
        with pytest.raises(EngineExited, match="exited with code 1"):
            proc.check_alive()


LAUNCHER = (
    "import os, signal, time\n"  # evalkit signals the group and each member: one SIGTERM may come twice
    "def forced(*_): signal.signal(signal.SIGTERM, signal.SIG_IGN); print('forcing job termination', flush=True); os._exit(137)\n"
    "def asked(*_): print('shutting down cleanly', flush=True); os._exit(0)\n"
    "signal.signal(signal.SIGTERM, forced)\n"
    "signal.signal(signal.SIGUSR1, asked if {obeys} else signal.SIG_IGN)\n"
    "print('serving', flush=True)\n"
    "time.sleep(600)\n"
)
"""A launcher like srun: SIGTERM to it kills its task at once; the task is reached another way
(SIGUSR1 here, `scancel --signal=TERM` on Slurm), and shuts down cleanly if it `obeys`."""


def asked_engine(tmp_path: Path, *, obeys: bool, can_ask: bool = True) -> tuple[EngineProcess, list[str]]:
    asked: list[str] = []
    proc = engine(tmp_path, LAUNCHER.format(obeys=obeys))

    def ask() -> str:
        if not can_ask:
            raise RuntimeError("no step named engine yet")
        assert proc.pid is not None
        os.kill(proc.pid, 10)  # SIGUSR1
        asked.append("SIGUSR1")
        return "SIGUSR1 to the task"

    proc.ask_stop = ask
    proc.start()
    deadline = time.monotonic() + 10
    while "\nserving\n" not in (tmp_path / "engine.log").read_text() and time.monotonic() < deadline:  # not its argv
        time.sleep(0.05)
    return proc, asked


def test_an_engine_its_launcher_would_kill_is_asked_to_stop_past_it_and_shuts_down_cleanly(tmp_path: Path) -> None:
    proc, asked = asked_engine(tmp_path, obeys=True)
    proc.stop()
    log = (tmp_path / "engine.log").read_text().split("\nserving\n", 1)[1]  # what came after its argv
    assert asked == ["SIGUSR1"] and proc.exit_code == 0
    assert "[evalkit] stopping: asked: SIGUSR1 to the task" in log and "shutting down cleanly" in log
    assert "forcing job termination" not in log


def test_an_asked_engine_that_outlives_its_grace_is_stopped_by_its_launcher(tmp_path: Path) -> None:
    proc, asked = asked_engine(tmp_path, obeys=False)
    proc.stop()
    log = (tmp_path / "engine.log").read_text().split("\nserving\n", 1)[1]  # what came after its argv
    assert asked == ["SIGUSR1"] and proc.exit_code == 137
    assert "forcing job termination" in log


def test_an_engine_that_cannot_be_asked_gets_sigterm_saying_why(tmp_path: Path) -> None:
    proc, asked = asked_engine(tmp_path, obeys=True, can_ask=False)
    proc.stop()
    log = (tmp_path / "engine.log").read_text().split("\nserving\n", 1)[1]  # what came after its argv
    assert asked == [] and proc.exit_code == 137
    assert "[evalkit] stopping: could not ask (no step named engine yet); SIGTERM to its launcher" in log


# -- devices.kind: cpu ---------------------------------------------------------------------------

AFFINITY = (
    "import os, subprocess, sys\n"
    "child = subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'],\n"
    "                       capture_output=True, text=True).stdout.strip()\n"
    "print('ENGINE', sorted(os.sched_getaffinity(0)), 'CHILD', child, flush=True)\n"
    "raise SystemExit(3)\n"
)
"""An engine that prints its CPUs and its child's, then exits (so its log tail comes back)."""


def test_an_engine_given_cpus_runs_on_them_with_every_process_it_starts(tmp_path: Path) -> None:
    last = max(os.sched_getaffinity(0))
    with pytest.raises(EngineExited) as e:
        with engine(tmp_path, AFFINITY, cpus=(last,)) as proc:
            proc.wait_ready(timeout_s=60)
    assert f"ENGINE [{last}] CHILD [{last}]" in e.value.log_tail
    assert f"[evalkit] launching on CPUs {last}: " in (tmp_path / "engine.log").read_text()


def test_an_engine_without_cpus_runs_wherever_evalkit_may(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    with pytest.raises(EngineExited) as e:
        with engine(tmp_path, AFFINITY) as proc:
            proc.wait_ready(timeout_s=60)
    assert f"ENGINE {allowed} CHILD {allowed}" in e.value.log_tail


def test_cpus_this_machine_does_not_have_fail_the_start_naming_them(tmp_path: Path) -> None:
    missing = max(os.sched_getaffinity(0)) + 64
    with pytest.raises(EngineExited) as e:
        with engine(tmp_path, AFFINITY, cpus=(0, missing)) as proc:
            proc.wait_ready(timeout_s=60)
    assert e.value.exit_code == 3
    assert f"CPUs {missing} are not among this process's CPUs" in e.value.log_tail
    assert "ENGINE [" not in e.value.log_tail  # the engine never ran
