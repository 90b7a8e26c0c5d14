"""The simulator's app served over a real port by a thread of this process: no process started.

For code that takes a base URL and makes its own HTTP client (an external server's cell, a bisect
step judged against stored ends, a PD pair's workers and router): `served_sim(*flags)` yields the URL of `simulator(*flags)`'s
app (tests/helpers/sim.py) served by uvicorn on 127.0.0.1 and a port the kernel picks, and stops
it after the block; `served_app(app)` does the same for any ASGI app. What crosses a process boundary (an engine's start-up, signals, an engine
that dies) still needs a real simulator process (`sim_process`, the `e2e` tier).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from tests.helpers.sim import simulator

START_TIMEOUT_S = 15.0


@contextlib.contextmanager
def served_sim(*args: str, model: str = "sim-model") -> Iterator[str]:
    """The base URL of `simulator(*args, model=model)` served by a thread of this process."""
    with served_app(simulator(*args, model=model).app) as url:
        yield url


@contextlib.contextmanager
def served_app(app: Any) -> Iterator[str]:
    """The base URL of an ASGI `app` (a simulator's, the PD router's) served by a thread of this process."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"served-app-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the served app did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        sock.close()
