"""A topology's parts started, waited for and stopped in order: workers ready before the router
starts, the router ready only through its workers, the router stopped first, and a part that
fails named. Each part is the simulator's own app (a worker, the router) built from the exact
argv evalkit planned for it and served by a thread of this process on the port evalkit pinned
(tests/helpers/served.py's way); the engine processes themselves are the e2e tier's."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import pytest
import uvicorn

from evalkit.config import parse_config
from evalkit.config.cells import expand
from evalkit.engine.ports import PortBook
from evalkit.engine.process import ReadyTimings
from evalkit.engine.topology import PartLaunch, book_ports, build_topology_launch
from evalkit.engine.topology_process import TopologyProcess
from evalkit.errors import EngineExited, StartupTimeout
from evalkit.sim.router import Router, build_parser
from tests.helpers.sim import simulator

CONFIG = {"model": "sim-model", "engine": {"profile": "sim", "args": ["--sim-startup-seconds", "0"]},
          "axes": {"disagg": ["1p1d"]}}


class ServedPart:
    """One part served by a thread from its planned argv, answering what the topology asks."""

    def __init__(self, part: PartLaunch, events: list[str], broken: bool = False) -> None:
        self.part, self.events, self.broken = part, events, broken
        self.timings, self.stop_s = ReadyTimings(), None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def _app(self) -> Any:
        args = self.part.launch.argv[3:]
        if self.part.launch.argv[2] == "evalkit.sim.router":
            parsed = build_parser().parse_args(args)
            return Router([g[0] for g in parsed.prefill], [g[0] for g in parsed.decode]).app
        return simulator(*args).app

    def start(self) -> None:
        self.events.append(f"start {self.part.name}")
        if self.broken:
            return  # never serves: its port stays closed
        sock = socket.socket()
        sock.bind((self.part.launch.host, int(self.part.launch.port)))
        self._server = uvicorn.Server(uvicorn.Config(self._app(), log_level="warning", lifespan="off",
                                                     timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int | None:
        return None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def exit_code(self) -> int | None:
        return None

    def wait_ready(self, timeout_s: float, warmup_timeout_s: float = 300.0) -> ReadyTimings:
        """Health (every part), then a served completion (the router): as EngineProcess waits."""
        deadline = time.monotonic() + timeout_s
        url = f"{self.part.launch.base_url}{self.part.launch.health_path}"
        while not _ok(lambda: httpx.get(url, timeout=1.0)):
            if time.monotonic() > deadline:
                raise StartupTimeout(f"not ready after {timeout_s:g} s (waiting for health)", log_tail="no answer")
            time.sleep(0.05)
        if self.part.readiness == "serve":
            body = {"model": "sim-model", "prompt": "hi", "max_tokens": 1}
            assert _ok(lambda: httpx.post(f"{self.part.launch.base_url}/v1/completions", json=body, timeout=10.0))
        self.events.append(f"ready {self.part.name}")
        return self.timings

    def check_alive(self) -> None:
        if self._server is not None and not self.running:
            raise EngineExited("engine exited with code 1", log_tail="gone", exit_code=1)

    def settle(self) -> None:
        self.check_alive()

    def stop(self) -> None:
        if self._server is not None and self.running:
            self._server.should_exit = True
            assert self._thread is not None
            self._thread.join(5)
        if self.stop_s is None:
            self.events.append(f"stop {self.part.name}")
            self.stop_s = 0.0

    def kill(self) -> None:
        self.stop()

    def log_tail(self, lines: int = 20) -> str:
        return ""

    def launch_log(self) -> str:
        return ""


def _ok(request: Any) -> bool:
    try:
        return bool(request().status_code == 200)
    except httpx.HTTPError:
        return False


def topology(events: list[str], broken: str = "") -> TopologyProcess:
    cfg = parse_config(CONFIG, "pd.yaml")
    (cell,) = expand(cfg)
    launch = build_topology_launch(cfg, cell, book_ports(PortBook()))
    return TopologyProcess(launch, lambda part: ServedPart(part, events, broken=part.name == broken))


def test_workers_are_ready_before_the_router_starts_and_are_stopped_after_it() -> None:
    events: list[str] = []
    with topology(events) as parts:
        parts.wait_ready(30)
        done = httpx.post(f"{parts.launch.front.launch.base_url}/v1/completions",
                          json={"model": "sim-model", "prompt": "Question: 2 + 3?", "max_tokens": 8}, timeout=30)
        assert done.status_code == 200 and done.json()["choices"][0]["text"]
    assert events.index("start router") > max(events.index("ready prefill0"), events.index("ready decode0"))
    assert events.index("ready router") > events.index("start router")
    assert events[-3] == "stop router" and set(events[-2:]) == {"stop prefill0", "stop decode0"}
    assert set(parts.ready_s) == {"prefill0", "decode0", "router"}


def test_a_worker_that_never_serves_fails_the_cell_by_name_and_the_router_never_starts() -> None:
    events: list[str] = []
    with pytest.raises(StartupTimeout, match=r"^decode0: not ready after [0-9.]+ s \(waiting for health\)") as raised:
        with topology(events, broken="decode0") as parts:
            parts.wait_ready(2)
    assert raised.value.log_tail == "no answer"
    assert "start router" not in events and {"stop prefill0", "stop decode0"} <= set(events)


def test_a_part_that_dies_after_start_up_is_named_when_the_cell_asks() -> None:
    events: list[str] = []
    with topology(events) as parts:
        parts.wait_ready(30)
        parts.check_alive()
        prefill = parts.processes["prefill0"]
        assert isinstance(prefill, ServedPart)
        prefill.stop()  # it goes away while the evals would run
        with pytest.raises(EngineExited, match=r"^prefill0: engine exited with code 1") as raised:
            parts.check_alive()
        assert raised.value.log_tail == "gone"
