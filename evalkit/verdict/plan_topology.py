"""`evalkit plan`'s lines for a cell of several parts (config/topology.py): each part's node,
ports, readiness and exact argv, in the order they start, and which one the evals talk to.

The launch is engine/topology.py's, with placeholders for the ports (`<decode0.http>`): the run
picks and pins real ones. What a reviewer reads here is what the run starts, part by part.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.engine.catalog import CatalogEntry
from evalkit.engine.topology import build_topology_launch, plan_ports

READY_WORDS = {"serve": "ready when it serves a completion", "health": "ready at /health",
               "alive": "no HTTP; ready once rank 0 serves"}


def topology_lines(config: MatrixConfig, cell: Cell, source_dir: Path | None = None,
                   catalog: CatalogEntry | None = None) -> list[str]:
    """The cell's parts as `plan` prints them (nothing for an ordinary cell: its argv is printed as always)."""
    launch = build_topology_launch(config, cell, plan_ports, source_dir, catalog=catalog)
    topology = launch.topology
    if topology.kind == "single":
        return []
    what = {"pd": "prefill/decode workers behind a router", "ranks": "one engine across nodes"}[topology.kind]
    lines = [f"  parts:  {what}: {len(launch.parts)} parts on {topology.nodes} node(s), each wave",
             f"          ready before the next starts, stopped in reverse; evals go to {launch.front.name}"]
    for wave_number, wave in enumerate(launch.waves, 1):
        for part in wave:
            shown = part.display(config.secret_env)
            ports = ", ".join(f"{name} {port}" for name, port in {"http": part.launch.port, **part.ports}.items())
            lines += [f"  [{part.name}] node {part.part.node}, wave {wave_number}, {READY_WORDS[part.readiness]}",
                      f"    ports: {ports}"]
            if shown["env"]:
                lines.append("    env:   " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in shown["env"].items()))
            lines.append("    argv:  " + shlex.join(shown["argv"]))
    return lines
