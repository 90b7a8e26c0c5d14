"""The simulated engine for tests, two ways:

* in this process (`simulator`, `asgi_server`, `asgi_served`, `sim_client`): the simulator's Starlette app built
  from the same flags `python -m evalkit.sim` takes, reached through `httpx.ASGITransport` (or,
  for a sync client in a test, Starlette's TestClient): no process, no port.
  The default for anything about what the simulator answers or how the HTTP evals read it.
* as a real process (`SimServer`, and `running_sim` for a base URL): started with
  ``--server-port 0`` and its URL read from its ready line, so tests never race for a free port.
  Output is drained by a thread (a full pipe would block the server) and kept for assertions on
  log lines. The server runs in its own session and the whole process group is SIGKILLed on exit,
  orphans included. For what crosses the boundary: start-up, signals, log lines, a real port, and
  clients evalkit does not own (lm-eval's). A test asks for one through the `sim_process` fixture
  (tests/conftest.py), which puts it in the `e2e` tier, or through `shared_sim`, the one default
  simulator every lm-eval test of a session shares. `run_sim` runs one to its end (a flag error,
  --help) with its stdout and stderr apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from importlib import resources
from types import TracebackType
from typing import Any

import httpx
from starlette.testclient import TestClient

from evalkit.evals.base import Server
from evalkit.sim.__main__ import configure
from evalkit.sim.faults import FaultState
from evalkit.sim.gsm8k import TestSet
from evalkit.sim.model import SimulatedModel
from evalkit.sim.server import Simulator
from evalkit.wire import Wire

FIX_AB = """axes:
  fix:
    fixon: {args: ["--sim-fix", "on"]}
    fixoff: {args: ["--sim-fix", "off"]}
baseline: {fix: fixon}
ab: {axis: fix, on: fixon, off: fixoff}"""
"""A config's two-cell fix axis (the simulator's fix on and off), its baseline and its A/B: the
smallest matrix with a fix-on - off delta, for a config whose test is about something else."""
READY = re.compile(r"^sim: ready on (http://\S+)$")
DEFAULT_TIMEOUT = 15.0


def simulator(*args: str, model: str = "sim-model") -> Simulator:
    """The simulator `python -m evalkit.sim --model MODEL ARGS` would serve, built in this process
    and already serving (its warm-up counted from now); `.app` is its ASGI application."""
    config, _, _ = configure(["--model", model, *args])
    built = Simulator(config, SimulatedModel(config.behaviour, config.cell, TestSet.load()),
                      FaultState(config.faults, config.behaviour.seed))
    built.start_serving()
    return built


def asgi_server(*args: str, model: str = "sim-model", wire: Wire | None = None) -> Server:
    """What an eval asks (`evalkit.evals.base.Server`) for a `simulator(*args)` in this process:
    the evals' own HTTP client reaches its app through httpx.ASGITransport."""
    return asgi_served(simulator(*args, model=model).app, model=model, wire=wire)


def asgi_served(app: Any, *, model: str = "sim-model", wire: Wire | None = None) -> Server:
    """An eval's `Server` for an ASGI `app` already built (`simulator(...).app`): for several evals
    or wires against one simulator, or a test that also reads the app's /sim/stats."""
    return Server("http://simulator.test", model, wire or Wire(), transport=httpx.ASGITransport(app=app))


def sim_client(*args: str, model: str = "sim-model") -> TestClient:
    """A sync HTTP client (Starlette's TestClient, an `httpx.Client`) for a `simulator(*args)` in
    this process; use as a context manager. Its `stream(...)` gets the whole body at once (the app
    runs to its end before the response returns): not for the timing of chunks or a disconnect."""
    return TestClient(simulator(*args, model=model).app, base_url="http://simulator.test")


class SimServer:
    """A ``python -m evalkit.sim`` process; use as a context manager."""

    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        model: str = "sim-model",
        wait: bool = True,
    ) -> None:
        self.argv = [sys.executable, "-m", "evalkit.sim", "--model", model, "--server-port", "0", *args]
        self.env = {**os.environ, **(env or {})}
        self.wait = wait
        self.lines: list[str] = []
        self.url = ""
        self._ready = threading.Event()
        self._changed = threading.Condition()
        self.process: subprocess.Popen[str] | None = None

    def __enter__(self) -> SimServer:
        self.process = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=self.env,
            start_new_session=True,
        )
        threading.Thread(target=self._drain, daemon=True).start()
        if self.wait:
            self.wait_ready()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.kill_group()

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.rstrip("\n")
            with self._changed:
                self.lines.append(line)
                if match := READY.match(line):
                    self.url = match.group(1)
                    self._ready.set()
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def wait_ready(self, timeout: float = DEFAULT_TIMEOUT) -> str:
        """The server's URL once its ready line is printed; fail fast if it exits first."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.02):
            assert self.process is not None
            if self.process.poll() is not None:
                time.sleep(0.05)  # let the drain thread collect the last lines
                raise AssertionError(f"simulator exited {self.process.returncode}:\n" + self.log)
            if time.monotonic() > deadline:
                raise AssertionError("simulator not ready in time:\n" + self.log)
        return self.url

    def wait_line(self, pattern: str, timeout: float = DEFAULT_TIMEOUT) -> str:
        """The first log line matching ``pattern`` (a regex), waiting for it if needed."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if regex.search(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(self.lines))
                self._changed.wait(min(left, 0.05))

    def exit_code(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        """Wait for the process to end by itself; its exit code."""
        assert self.process is not None
        code = self.process.wait(timeout)
        time.sleep(0.05)
        return code

    @property
    def log(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def client(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def kill_group(self) -> None:
        """SIGKILL the whole process group (the server and anything it spawned)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(DEFAULT_TIMEOUT)


def run_sim(*args: str, env: dict[str, str] | None = None, timeout: float = 20,
            cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m evalkit.sim ARGS` (nothing added: no --model, no --server-port) run to its end,
    stdout and stderr apart: for its flag errors, --help and exit codes. A process: a test asks
    for it through a fixture that depends on `sim_process` (or `engine_processes`), which puts it
    in the `e2e` tier."""
    return subprocess.run([sys.executable, "-m", "evalkit.sim", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd, check=False)


def gsm8k_test() -> list[dict[str, str]]:
    """The shipped GSM8K test split (question, answer)."""
    path = resources.files("evalkit").joinpath("data", "gsm8k", "test.jsonl")
    with path.open("r", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def reference_answer(row: dict[str, str]) -> str:
    return row["answer"].rsplit("####", 1)[1].strip().replace(",", "")


def extracted_answer(text: str) -> str | None:
    """What lm-eval's strict-match filter would read: the number after ``####``."""
    match = re.search(r"#### (\-?[0-9\.\,]+)", text)
    return match.group(1).replace(",", "").rstrip(".") if match else None


def complete_batch(client: httpx.Client, prompts: Sequence[str], **fields: Any) -> list[dict[str, Any]]:
    """Choices for ``prompts``, sent as batched completions requests of 200 prompts."""
    choices: list[dict[str, Any]] = []
    for start in range(0, len(prompts), 200):
        body = {"model": "sim-model", "prompt": list(prompts[start : start + 200]), "temperature": 0, **fields}
        response = client.post("/v1/completions", json=body)
        response.raise_for_status()
        batch = sorted(response.json()["choices"], key=lambda c: c["index"])
        choices.extend(batch)
    return choices


def sse_events(response: httpx.Response) -> Iterator[str]:
    """The ``data:`` payloads of a streamed response, in order."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield line[len("data: ") :]


def periodic_tail(tokens: Sequence[Any], window: int = 96, max_period: int = 32) -> int | None:
    """The smallest period p <= max_period with which the last ``window`` tokens repeat."""
    if len(tokens) < window + max_period:
        return None
    tail = list(tokens[-(window + max_period) :])
    for period in range(1, max_period + 1):
        if all(tail[-k] == tail[-k - period] for k in range(1, window + 1)):
            return period
    return None


@contextlib.contextmanager
def running_sim(*sim_args: str, served: str = "sim-model") -> Iterator[str]:
    """A simulator process (`SimServer`) serving `served`; yields its base URL."""
    with SimServer(*sim_args, model=served) as server:
        yield server.url
