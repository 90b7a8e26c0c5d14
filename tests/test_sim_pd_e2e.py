"""A simulated PD pair as processes: `python -m evalkit.sim` prefill and decode workers handing the
KV state over HTTP between two processes, behind `python -m evalkit.sim.router` (its own process).
What the pair answers is tests/test_sim_pd.py's, in this process; here, what crosses the boundary:
the router's readiness as workers come and go, and the same answers through three processes.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import httpx

from tests.helpers.sim import SimServer, complete_batch, gsm8k_test

PRODUCER = '{"kv_role":"kv_producer","kv_connector":"mooncake","handshake_port":6301}'
CONSUMER = '{"kv_role":"kv_consumer","kv_connector":"mooncake","handshake_port":6301}'
PROMPTS = [f"Question: {row['question']}\nAnswer:" for row in gsm8k_test()[:200]]
READY = re.compile(r"^sim-router: ready on (http://\S+)$")


@contextlib.contextmanager
def router_process(*urls: tuple[str, str]) -> Iterator[str]:
    """`python -m evalkit.sim.router` in front of (role, url) workers; its URL once its ready line is
    printed. Its process group is SIGKILLed after the block."""
    argv = [sys.executable, "-m", "evalkit.sim.router", "--port", "0", "--pd-disaggregation"]
    for role, url in urls:
        argv += [f"--{role}", url]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if match := READY.match(line.strip()):
                yield match.group(1)
                break
        else:
            raise AssertionError(f"the router exited {process.wait()} before it was ready")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def health(url: str) -> int:
    return httpx.get(f"{url}/health", timeout=5).status_code


def wait_health(url: str, status: int) -> None:
    deadline = time.monotonic() + 15
    while health(url) != status:
        assert time.monotonic() < deadline, f"{url}/health never answered {status}"
        time.sleep(0.1)


def answers(url: str) -> list[str]:
    with httpx.Client(base_url=url, timeout=120) as client:
        return [c["text"] for c in complete_batch(client, PROMPTS, max_tokens=256)]


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def test_the_router_refuses_until_both_worker_processes_are_ready_and_again_when_one_dies(
        sim_process: Callable[..., SimServer]) -> None:
    prefill = sim_process("-tp", "4", "--kv-transfer-config", PRODUCER)
    port = free_port()
    decode = sim_process("-tp", "4", "--kv-transfer-config", CONSUMER, "--server-port", str(port),
                         "--sim-startup-seconds", "3", wait=False)
    with router_process(("prefill", prefill.url), ("decode", f"http://127.0.0.1:{port}")) as router:
        assert health(router) == 503
        assert httpx.post(f"{router}/v1/completions", json={"prompt": "hi"}).status_code == 503
        decode.wait_ready(30)
        wait_health(router, 200)
        decode.kill_group()
        wait_health(router, 503)


def test_an_equal_tp_pair_of_processes_answers_as_one_instance_and_an_unequal_one_does_not(
        sim_process: Callable[..., SimServer]) -> None:
    single = answers(sim_process("-tp", "4").url)
    decode = sim_process("-tp", "4", "--kv-transfer-config", CONSUMER)
    for prefill_tp, same in (("4", True), ("2", False)):
        prefill = sim_process("-tp", prefill_tp, "--kv-transfer-config", PRODUCER)
        with router_process(("prefill", prefill.url), ("decode", decode.url)) as router:
            wait_health(router, 200)
            assert (answers(router) == single) is same
        prefill.kill_group()
