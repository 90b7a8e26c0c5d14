"""How one engine spells a topology's parts: the flags of a prefill or decode worker, of one
rank of an engine across nodes, and its router's command line.

A profile's `topology` (profiles/__init__.py) is one `TopologySpelling`, read from the engine's
own source at a named ref (each profile's docstring cites it); None: the engine has no
disaggregated or multi-node mode evalkit knows, and a cell declaring one is a config error.
What each part gets to spell its flags is a `PartContext`: its own address and pinned ports and
the addresses and ports of the parts it talks to. evalkit picks and pins every port
(engine/ports.py), internal ones included (a KV bootstrap or handshake port, a rank's master
port): an engine default such as SGLang's 8998 or vLLM's 29501 is never relied on, because two
cells side by side would both take it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalkit.config.topology import Part


@dataclass(frozen=True)
class Peer:
    """A worker as the others reach it: its address, HTTP port and internal ports."""

    name: str
    host: str
    port: int | str
    ports: Mapping[str, int | str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class PartContext:
    """What one part's flags may depend on."""

    part: Part
    host: str
    """The address it binds (its node's)."""
    port: int | str
    """Its HTTP port (a rank above 0 serves none, but is given one to keep its argv uniform)."""
    ports: Mapping[str, int | str]
    """Its own internal ports by name (`TopologySpelling.worker_ports` / `rank_ports`)."""
    nnodes: int
    master: Peer | None = None
    """Rank 0, for a rank of an engine across nodes (its `master` port is the group's)."""
    prefill: tuple[Peer, ...] = ()
    decode: tuple[Peer, ...] = ()
    python: str = "python3"

    def peer_flags(self) -> list[str]:
        """A router's workers as atomesh names them (and the simulator's router after it):
        `--prefill URL` per prefill worker, then `--decode URL` per decode worker."""
        return [flag for peers, name in ((self.prefill, "--prefill"), (self.decode, "--decode"))
                for peer in peers for flag in (name, peer.url)]


@dataclass(frozen=True)
class TopologySpelling:
    """One engine's flags per role; each callable returns flags appended to the part's argv."""

    read_at: str
    """Where the spelling was read (repository and ref, or wheel and version)."""
    worker_flags: Callable[[PartContext], list[str]] | None = None
    """A prefill or decode worker's extra flags; None: the engine has no PD mode."""
    worker_ports: Callable[[Part], Mapping[str, int]] = field(default=lambda part: {})
    """Internal ports a PD worker needs, by name -> how many consecutive ports."""
    rank_flags: Callable[[PartContext], list[str]] | None = None
    """One rank's extra flags (`--nnodes`, `--node-rank`, ...); None: no multi-node engine."""
    rank_ports: Mapping[str, int] = field(default_factory=dict)
    """Internal ports rank 0 holds for the group (its `master`), by name -> how many."""
    headless_entrypoint: tuple[str, ...] | None = None
    """The entry point of ranks above 0 when the profile's own does not run headless (vLLM's
    `serve`); None: the profile's."""
    router: Callable[[PartContext], list[str]] | None = None
    """The router's whole argv; None: the engine ships none, the config gives `router.command`."""
    router_ports: Mapping[str, int] = field(default_factory=dict)
    """Internal ports the router needs besides its HTTP port (atomesh's Prometheus port)."""
    worker_health_path: str = "/health"
    """What a PD worker answers 200 on once it is up: a worker alone cannot serve a completion
    (SGLang's prefill needs its decode), so the profile's own readiness path is not used."""


def kv_transfer_config(**fields: Any) -> str:
    """A `--kv-transfer-config` value as ATOM's and vLLM's parsers take it: compact JSON."""
    return json.dumps(fields, separators=(",", ":"))


def template_router(command: list[str] | tuple[str, ...], ctx: PartContext) -> list[str]:
    """A router's argv from a config's template: `{python}` (the engine's interpreter),
    `{evalkit_python}` (evalkit's own, for `-m evalkit.sim.router`, which the engine's venv cannot
    import), `{host}`, `{port}` substituted in every element; an element that is exactly `{prefill}`
    or `{decode}` becomes each worker's URL, the element before it repeated before every URL after
    the first (`--prefill {prefill}` -> `--prefill URL1 --prefill URL2`)."""
    values = {"evalkit_python": sys.executable, "python": ctx.python, "host": ctx.host, "port": str(ctx.port)}
    out: list[str] = []
    for element in command:
        peers = {"{prefill}": ctx.prefill, "{decode}": ctx.decode}.get(element)
        if peers is not None:
            flag = out[-1:] if out and out[-1].startswith("-") else []
            for i, peer in enumerate(peers):
                out += ([*flag, peer.url] if i else [peer.url])
            continue
        for key, value in values.items():
            element = element.replace("{" + key + "}", value)
        out.append(element)
    return out
