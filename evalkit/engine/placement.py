"""Where a cell's parts run: which machine a topology's node index names, the address a part on
it binds and is reached at, and the argv that starts a part there.

A topology (config/topology.py) numbers its nodes 0..N-1 within the cell's allocation. Locally
every index is this machine: a part binds the config's host (127.0.0.1 unless a config says
otherwise) and starts as a child of evalkit, as an ordinary cell's engine does. In a Slurm
allocation of several nodes (run/slurm_nodes.py builds that placement inside the allocation)
each index is one node of it: a part binds its node's own address, so the parts on the other
node reach it (a router its workers, the other ranks rank 0 as `--master-addr`), and starts
through `srun --nodes=1 --ntasks=1 --nodelist=NODE`, so Slurm runs it on that node, forwards
its output into the part's log, and kills it with the job whatever happens to evalkit. A part
there is asked to stop through Slurm (`Placement.asker`), since SIGTERM to its srun would kill it.

Why a value handed down rather than a check of the environment where parts start: the engine
layer knows nothing of Slurm (run/ is above it), and a test can place parts on two names of
this machine without a cluster.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Launcher = Callable[[str, "Node", Sequence[str]], list[str]]
"""(part name, its node, its argv) -> the argv that starts it on that node."""
StopAsker = Callable[[str], str]
"""(part name) -> asks that part's process to stop gracefully, past its launcher; what it did,
for the part's log; raises where it could not ask (EngineProcess.ask_stop)."""


@dataclass(frozen=True)
class Node:
    """One node of a cell's allocation."""

    name: str
    """The node's hostname as the cluster names it (what cell.json records as a part's `node`)."""
    address: str
    """What a part on this node binds and is reached at."""


@dataclass(frozen=True)
class Placement:
    """The nodes of one cell's allocation, index by index, and how a part starts on one."""

    nodes: tuple[Node, ...]
    launcher: Launcher | None = None
    """None: a part's argv runs as it is, a child of evalkit on this machine."""
    kind: str = "local"
    """`local` or `slurm`: how the cell's record says its parts were placed."""
    asker: StopAsker | None = None
    """None: a part is stopped by SIGTERM to its process group, as any engine."""

    def node(self, index: int) -> Node:
        if not 0 <= index < len(self.nodes):
            raise ValueError(f"node {index} is not one of the {len(self.nodes)} node(s) of this placement")
        return self.nodes[index]

    def host(self, index: int) -> str:
        """The address a part on node `index` binds, and the one its URL names."""
        return self.node(index).address

    def argv(self, part: str, index: int, argv: Sequence[str]) -> list[str]:
        """The argv that runs part `part`'s `argv` on node `index`."""
        node = self.node(index)
        return list(argv) if self.launcher is None else self.launcher(part, node, argv)

    def stop_asker(self, part: str) -> Callable[[], str] | None:
        """How part `part` is asked to stop, where its launcher would not pass a SIGTERM on."""
        asker = self.asker
        return None if asker is None else lambda: asker(part)


def local_placement(host: str, nodes: int = 1) -> Placement:
    """Every node index is this machine, each part bound to `host` (the config's engine.host)."""
    here = Node(socket.gethostname(), host)
    return Placement((here,) * nodes)
