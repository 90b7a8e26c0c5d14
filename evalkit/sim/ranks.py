"""One engine across nodes: rank 0 serves, the other ranks join it, and none outlives the group.

vLLM's multi-node launch (``--nnodes N --node-rank I --master-addr HOST --master-port P``, ranks
above 0 ``--headless``) starts one process per node; the engine serves only once every rank is in
its process group, and a rank that dies takes the engine down (torch.distributed's collectives
cannot go on without it). The simulator keeps exactly that contract, over a plain TCP connection
per rank instead of NCCL:

* rank 0 (``RankGroup``) listens on HOST:P next to its HTTP port; its ``/health`` and completions
  answer 503 until all N-1 ranks have joined (``RankGroup.ready``);
* a rank above 0 (``join``) connects to HOST:P (retrying until ``join_timeout_s``: on Slurm it
  may start before rank 0), sends one JSON line ``{"rank", "nnodes", "host", "pid"}``, gets
  ``{"ok": true}`` or the reason it was refused, and holds the connection open;
* the connection's end is the death notice both ways: rank 0 calls ``on_lost`` (the process logs
  ``sim: fatal: rank I left the group`` and exits ``EXIT_RANKS``), a rank above 0 returns
  ``EXIT_RANKS`` when rank 0 goes. The kernel closes a killed process's sockets, so a SIGKILL
  anywhere ends the group everywhere: nothing is left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable

from evalkit.sim.config import Ranks

EXIT_RANKS = 5
"""A process whose group lost a rank (or its rank 0), or that could not reach rank 0."""
EXIT_REFUSED = 2
"""A rank that rank 0 refused (a wrong --nnodes, a rank already joined): a bad command line."""
RETRY_S = 0.1


class RankGroup:
    """Rank 0's side: who has joined, and a callback when one leaves."""

    def __init__(self, ranks: Ranks, on_lost: Callable[[int, str], None], log: Callable[[str], None]) -> None:
        self.ranks = ranks
        self._on_lost = on_lost
        self._log = log
        self._members: dict[int, socket.socket] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._listener: socket.socket | None = None

    @property
    def ready(self) -> bool:
        """Every rank above 0 has joined."""
        with self._lock:
            return len(self._members) == self.ranks.nnodes - 1

    @property
    def joined(self) -> list[int]:
        with self._lock:
            return sorted(self._members)

    def start(self, listener: socket.socket | None = None) -> int:
        """Listen on the master address and port (or on ``listener``, already bound); the port."""
        if listener is None:
            listener = socket.create_server((self.ranks.master_addr, self.ranks.master_port), reuse_port=False)
        self._listener = listener
        threading.Thread(target=self._accept, name="sim-rank-accept", daemon=True).start()
        return int(listener.getsockname()[1])

    def close(self) -> None:
        """Stop listening and let every rank go (they exit as when rank 0 goes)."""
        with self._lock:
            self._closing = True
            members, self._members = list(self._members.values()), {}
        for sock in [*members, *([self._listener] if self._listener else [])]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closing:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._admit, args=(sock,), name="sim-rank-member", daemon=True).start()

    def _admit(self, sock: socket.socket) -> None:
        """Read one rank's hello; refuse it with a reason or keep it and watch its connection."""
        try:
            sock.settimeout(10)
            hello = json.loads(sock.makefile("r").readline() or "null")
            sock.settimeout(None)
        except (OSError, ValueError):
            sock.close()
            return
        rank, reason = self._enrol(hello, sock)
        if reason:
            self._log(f"sim: refused a rank from {hello.get('host') if isinstance(hello, dict) else '?'}: {reason}")
            _send(sock, {"ok": False, "error": reason})
            sock.close()
            return
        _send(sock, {"ok": True})
        self._log(f"sim: rank {rank} of {self.ranks.nnodes} joined from {hello.get('host')} (pid {hello.get('pid')})")
        if self.ready:
            self._log(f"sim: all {self.ranks.nnodes} ranks joined")
        while True:  # the rank never sends again: the read ends when its connection does
            try:
                if not sock.recv(4096):
                    break
            except OSError:
                break
        with self._lock:
            lost = not self._closing and self._members.get(rank) is sock
            if lost:
                del self._members[rank]
        if lost:
            self._on_lost(rank, str(hello.get("host")))

    def _enrol(self, hello: object, sock: socket.socket) -> tuple[int, str | None]:
        """Enrol the rank a hello names on ``sock``; its rank, and why it is refused if it is."""
        if not isinstance(hello, dict) or not isinstance(hello.get("rank"), int):
            return -1, "not a rank's hello"
        rank, nnodes = hello["rank"], hello.get("nnodes")
        if nnodes != self.ranks.nnodes:
            return rank, f"it has --nnodes {nnodes}, rank 0 has --nnodes {self.ranks.nnodes}"
        if not 0 < rank < self.ranks.nnodes:
            return rank, f"--node-rank {rank} is not between 1 and {self.ranks.nnodes - 1}"
        with self._lock:
            if self._closing:
                return rank, "rank 0 is stopping"
            if rank in self._members:
                return rank, f"rank {rank} has already joined"
            self._members[rank] = sock
        return rank, None


def _send(sock: socket.socket, message: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        sock.sendall((json.dumps(message) + "\n").encode())


def join(ranks: Ranks, log: Callable[[str], None]) -> int:
    """A rank above 0: join rank 0 and stay until it goes; the process's exit code."""
    where = f"{ranks.master_addr}:{ranks.master_port}"
    log(f"sim: rank {ranks.node_rank} of {ranks.nnodes} (headless) joining rank 0 at {where}")
    deadline = time.monotonic() + ranks.join_timeout_s
    while True:
        try:
            sock = socket.create_connection((ranks.master_addr, ranks.master_port), timeout=5)
            break
        except OSError as error:
            if time.monotonic() >= deadline:
                log(f"sim: fatal: cannot reach rank 0 at {where} in {ranks.join_timeout_s:g} s: {error}")
                return EXIT_RANKS
            time.sleep(RETRY_S)
    with sock:
        _send(sock, {"rank": ranks.node_rank, "nnodes": ranks.nnodes, "host": socket.gethostname(),
                     "pid": os.getpid()})
        try:
            answer = json.loads(sock.makefile("r").readline() or "null")
        except (OSError, ValueError):
            answer = None
        if not isinstance(answer, dict) or not answer.get("ok"):
            reason = answer.get("error") if isinstance(answer, dict) else "no answer"
            log(f"sim: fatal: rank 0 at {where} refused rank {ranks.node_rank}: {reason}")
            return EXIT_REFUSED
        sock.settimeout(None)
        log(f"sim: rank {ranks.node_rank} of {ranks.nnodes} joined rank 0 at {where}")
        while True:
            try:
                if not sock.recv(4096):
                    break
            except OSError:
                break
    log(f"sim: fatal: rank 0 at {where} went away; rank {ranks.node_rank} exits")
    return EXIT_RANKS
