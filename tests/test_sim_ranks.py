"""One simulated engine across nodes, in this process: rank 0's group (evalkit/sim/ranks.py) gates its
app until every rank has joined, refuses a rank that does not belong, and hears a rank leave; a
rank above 0 (`join`, on a thread here) holds its place until rank 0 goes. The group and the ranks
talk over real sockets; the processes, their exit codes and what they leave behind are
tests/test_sim_ranks_e2e.py's.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import uvicorn
from starlette.testclient import TestClient

from evalkit.sim import gsm8k
from evalkit.sim.__main__ import configure
from evalkit.sim.config import Ranks, SimConfigError
from evalkit.sim.faults import FaultState
from evalkit.sim.model import SimulatedModel
from evalkit.sim.process import _Server
from evalkit.sim.ranks import EXIT_RANKS, EXIT_REFUSED, RankGroup, join
from evalkit.sim.server import Simulator
from tests.helpers.sim import simulator

DEADLINE_S = 10.0


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


class Rank(threading.Thread):
    """A rank above 0 joining on a thread: its exit code and what it logged."""

    def __init__(self, ranks: Ranks) -> None:
        super().__init__(daemon=True)
        self.ranks = ranks
        self.lines: list[str] = []
        self.code: int | None = None

    def run(self) -> None:
        self.code = join(self.ranks, self.lines.append)


@contextlib.contextmanager
def rank_zero(nnodes: int) -> Iterator[tuple[RankGroup, TestClient, list[str]]]:
    """Rank 0 of `nnodes`: its group on a free port, a client of its app, and the ranks it lost."""
    listener = socket.create_server(("127.0.0.1", 0))
    ranks = Ranks(nnodes=nnodes, master_addr="127.0.0.1", master_port=listener.getsockname()[1], join_timeout_s=5)
    lost: list[str] = []
    group = RankGroup(ranks, lambda rank, host: lost.append(f"{rank}@{host}"), log=lambda line: None)
    group.start(listener)
    config, _, _ = configure(["--model", "sim-model", "-tp", str(2 * nnodes), "--nnodes", str(nnodes)])
    app = Simulator(config, SimulatedModel(config.behaviour, config.cell, gsm8k.TestSet.load()),
                    FaultState(config.faults, 0), group)
    app.start_serving()
    try:
        with TestClient(app.app, base_url="http://simulator.test") as client:
            yield group, client, lost
    finally:
        group.close()


def joining(group: RankGroup, rank: int, nnodes: int | None = None) -> Rank:
    ranks = group.ranks
    thread = Rank(Ranks(nnodes or ranks.nnodes, rank, ranks.master_addr, ranks.master_port, join_timeout_s=5))
    thread.start()
    return thread


def test_rank_zero_refuses_to_serve_until_every_rank_has_joined() -> None:
    with rank_zero(3) as (group, client, _):
        assert client.get("/health").status_code == 503
        assert client.get("/health").json() == {"status": "waiting for ranks", "nnodes": 3, "joined": []}
        assert client.post("/v1/completions", json={"prompt": "hi"}).status_code == 503
        joining(group, 1)
        wait_for(lambda: group.joined == [1], "rank 1 never joined")
        assert client.get("/health").status_code == 503
        joining(group, 2)
        wait_for(lambda: group.ready, "rank 2 never joined")
        assert client.get("/health").status_code == 200
        assert client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4}).status_code == 200


def test_a_rank_that_leaves_is_reported_and_a_rank_left_behind_exits_when_rank_zero_goes() -> None:
    with rank_zero(3) as (group, _, lost):
        one = joining(group, 1)
        two = socket.create_connection((group.ranks.master_addr, group.ranks.master_port))  # rank 2 by hand
        two.sendall(json.dumps({"rank": 2, "nnodes": 3, "host": "node2", "pid": 1}).encode() + b"\n")
        assert json.loads(two.makefile("r").readline()) == {"ok": True}
        wait_for(lambda: group.ready, "the ranks never joined")
        two.close()  # what the kernel does to a killed rank's connection
        wait_for(lambda: lost, "rank 2's leaving was not heard")
        assert lost == ["2@node2"] and not group.ready
    one.join(DEADLINE_S)
    assert one.code == EXIT_RANKS and one.lines[-1].startswith("sim: fatal: rank 0 at 127.0.0.1:")


@pytest.mark.parametrize(("rank", "nnodes", "reason"), [
    (1, 3, "it has --nnodes 3, rank 0 has --nnodes 2"),
    (1, None, "rank 1 has already joined"),
])
def test_rank_zero_refuses_a_rank_that_does_not_belong(rank: int, nnodes: int | None, reason: str) -> None:
    with rank_zero(2) as (group, _, _):
        joining(group, 1)
        wait_for(lambda: group.ready, "rank 1 never joined")
        stranger = joining(group, rank, nnodes)
        stranger.join(DEADLINE_S)
        assert stranger.code == EXIT_REFUSED and stranger.lines[-1].endswith(f"refused rank {rank}: {reason}")
        assert group.joined == [1]


def test_a_rank_that_cannot_reach_rank_zero_gives_up_with_one_line() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    lines: list[str] = []
    assert join(Ranks(2, 1, "127.0.0.1", port, join_timeout_s=0.3), lines.append) == EXIT_RANKS
    assert lines[-1].startswith(f"sim: fatal: cannot reach rank 0 at 127.0.0.1:{port} in 0.3 s:")


@pytest.mark.parametrize(("flags", "message"), [
    (["-tp", "4", "--nnodes", "3"], "--nnodes 3 must evenly divide the total world size (4)"),
    (["--nnodes", "2", "-tp", "2", "--node-rank", "2"], "--node-rank must be between 0 and 1; got --node-rank 2"),
    (["--nnodes", "2", "-tp", "2", "--headless"], "--headless: rank 0 serves the API"),
])
def test_a_rank_layout_vllm_refuses_is_refused_the_same_way(flags: list[str], message: str) -> None:
    with pytest.raises(SimConfigError) as refused:
        configure(["--model", "m", *flags])
    assert str(refused.value).startswith(message)


def test_a_sigterm_after_a_lost_rank_began_the_shutdown_is_still_logged(capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 0's shutdown can begin with a rank leaving (its group sets `should_exit`) a moment before
    its own SIGTERM arrives, as when evalkit stops a two-node cell's parts together: the signal is
    still logged, once, since it is what ended the process (the log otherwise ends unexplained)."""
    built = simulator()
    server = _Server(uvicorn.Config(built.app), built, "http://127.0.0.1:1", ignore_sigterm=False)
    server.should_exit = True  # what run's on_lost does when a rank leaves the group
    server.handle_exit(signal.SIGTERM, None)
    server.handle_exit(signal.SIGTERM, None)
    assert capsys.readouterr().out.splitlines() == ["sim: SIGTERM: shutting down"]
