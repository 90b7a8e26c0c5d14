"""Every injected fault of the simulator (small N, so each takes a second): on a real process (e2e)
where the fault is the process's (a crash, a hang, a log line, signals, an orphan); in this
process where it is what the app answers (503s, 500s, cut bodies and streams, the counters)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable

import httpx
import pytest

from tests.helpers.sim import SimServer, sim_client, sse_events

BODY = {"prompt": "hi", "max_tokens": 4}
StartSim = Callable[..., SimServer]
GPU_FAULT = "Memory access fault by GPU node-2 (Agent handle: 0x0) on address 0x0. Reason: Unknown."


def state(pid: int) -> str | None:
    """The process state letter from /proc (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def alive(pid: int) -> bool:
    return state(pid) not in (None, "Z", "X")


def test_crash_startup_exits_3_without_binding(sim_process: StartSim) -> None:
    server = sim_process("--sim-fault", "crash-startup", wait=False)
    assert server.exit_code() == 3
    assert "simulated start-up failure" in server.log and "ready on" not in server.log
    assert server.log.splitlines()[0].startswith("evalkit.sim: SIMULATED ENGINE")


def test_never_ready_binds_but_health_stays_503() -> None:
    with sim_client("--sim-fault", "never-ready") as client:
        for _ in range(3):
            assert client.get("/health").status_code == 503
            time.sleep(0.05)
        assert client.post("/v1/completions", json=BODY).status_code == 503


def test_crash_after_n_requests_exits_1(sim_process: StartSim) -> None:
    server = sim_process("--sim-fault", "crash-after", "--sim-fault-after", "2")
    with server.client() as client:
        assert [client.post("/v1/completions", json=BODY).status_code for _ in range(2)] == [200, 200]
        with pytest.raises(httpx.TransportError):
            client.post("/v1/completions", json=BODY)
        assert server.exit_code() == 1
    assert "crash-after" in server.log


@pytest.mark.parametrize("kind", ["hang-after", "fatal-log"])
def test_hang_after_n_requests_answers_nothing_health_included(sim_process: StartSim, kind: str) -> None:
    server = sim_process("--sim-fault", kind, "--sim-fault-after", "1")
    with server.client(timeout=0.5) as client:
        # what must answer gets time to answer on a loaded machine; what must hang gets half a second
        assert client.post("/v1/completions", json=BODY, timeout=30).status_code == 200
        assert client.get("/health", timeout=30).status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            client.post("/v1/completions", json=BODY)
        with pytest.raises(httpx.ReadTimeout):
            client.get("/health")
        assert server.process is not None and server.process.poll() is None  # alive, just silent
        if kind == "fatal-log":
            assert server.wait_line(r"^Memory access fault by GPU") == GPU_FAULT
        else:
            assert GPU_FAULT not in server.log


def test_http_500_hits_the_requested_share_reproducibly() -> None:
    def codes() -> list[int]:
        args = ("--sim-fault", "http-500", "--sim-fault-rate", "0.5")
        with sim_client(*args) as client:
            return [client.post("/v1/completions", json=BODY).status_code for _ in range(40)]

    first = codes()
    assert set(first) == {200, 500} and 8 <= first.count(500) <= 32
    assert codes() == first
    with sim_client("--sim-fault", "http-500") as client:
        response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        assert response.status_code == 500 and response.json()["error"]["code"] == 500


def test_malformed_json_is_cut_off_but_streams_are_intact() -> None:
    with sim_client("--sim-fault", "malformed-json") as client:
        response = client.post("/v1/completions", json=BODY)
        assert response.status_code == 200 and response.headers["content-type"] == "application/json"
        with pytest.raises(json.JSONDecodeError):
            json.loads(response.text)
        with client.stream("POST", "/v1/completions", json={**BODY, "stream": True}) as streamed:
            assert list(sse_events(streamed))[-1] == "[DONE]"


def test_truncated_stream_ends_without_done() -> None:
    body = {"prompt": "Write a story.", "max_tokens": 400, "stream": True}
    with sim_client("--sim-fault", "truncated-stream") as client:
        with client.stream("POST", "/v1/completions", json=body) as response:
            events = list(sse_events(response))
        whole = client.post("/v1/completions", json={**body, "stream": False}).json()
    assert events and "[DONE]" not in events
    chunks = [json.loads(e) for e in events]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert 0 < len(text) < len(whole["choices"][0]["text"])


def test_ignore_sigterm_leaves_only_sigkill(sim_process: StartSim) -> None:
    server = sim_process("--sim-fault", "ignore-sigterm")
    with server.client() as client:
        os.kill(server.pid, signal.SIGTERM)
        time.sleep(1.5)  # longer than the normal graceful shutdown
        assert server.process is not None and server.process.poll() is None
        assert client.get("/health").status_code == 200
        os.kill(server.pid, signal.SIGKILL)
        assert server.exit_code() == -signal.SIGKILL


def test_spawned_orphan_outlives_its_parent_until_the_group_is_killed(sim_process: StartSim) -> None:
    server = sim_process("--sim-fault", "spawn-orphan")
    line = server.wait_line(r"^sim: spawned child pid \d+$")
    child = int(line.rsplit(" ", 1)[1])
    assert os.getpgid(child) == os.getpgid(server.pid) == server.pid
    os.kill(server.pid, signal.SIGKILL)
    assert server.exit_code() == -signal.SIGKILL
    time.sleep(0.2)
    assert alive(child)
    os.killpg(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_fault_requests_are_counted_in_stats() -> None:
    with sim_client("--sim-fault", "http-500", "--sim-fault-rate", "1") as client:
        for _ in range(3):
            client.post("/v1/completions", json=BODY)
        assert client.get("/sim/stats").json() == {"requests": 3, "completion_tokens_generated": 0,
                                                   "aborted_streams": 0, "stream_errors": 0}
