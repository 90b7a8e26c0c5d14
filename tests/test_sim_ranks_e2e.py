"""One simulated engine over two processes, as over two nodes (`--nnodes 2`): rank 0 serves only once
rank 1 has joined it, and a killed rank takes the other down with a line saying why and exit 5, so
nothing is left running. The group's rules in this process are tests/test_sim_ranks.py's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import httpx

from evalkit.sim.ranks import EXIT_RANKS
from tests.helpers.sim import SimServer


def master_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def ranks(sim_process: Callable[..., SimServer]) -> tuple[SimServer, SimServer]:
    """Rank 0 (serving once rank 1 is in) and rank 1 (headless), both started and joined."""
    flags = ("-tp", "2", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(master_port()))
    zero = sim_process(*flags)
    assert httpx.get(f"{zero.url}/health").status_code == 503
    assert httpx.post(f"{zero.url}/v1/completions", json={"prompt": "hi"}).status_code == 503
    one = sim_process(*flags, "--node-rank", "1", "--headless", wait=False)
    one.wait_line(r"^sim: rank 1 of 2 joined rank 0 at 127\.0\.0\.1:")
    zero.wait_line(r"^sim: all 2 ranks joined$")
    assert httpx.get(f"{zero.url}/health").status_code == 200
    return zero, one


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_killing_rank_one_ends_rank_zero(sim_process: Callable[..., SimServer]) -> None:
    zero, one = ranks(sim_process)
    one.kill_group()
    assert zero.exit_code() == EXIT_RANKS
    assert zero.wait_line(r"^sim: fatal: rank 1 \(\S+\) left the group$")
    assert gone(zero.pid) and gone(one.pid)


def test_killing_rank_zero_ends_rank_one(sim_process: Callable[..., SimServer]) -> None:
    zero, one = ranks(sim_process)
    zero.kill_group()
    assert one.exit_code() == EXIT_RANKS
    assert one.wait_line(r"^sim: fatal: rank 0 at 127\.0\.0\.1:\d+ went away; rank 1 exits$")
    assert gone(zero.pid) and gone(one.pid)
