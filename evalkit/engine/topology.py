"""A cell's topology launched: each part's argv, env, address, ports and node (the plan shows
them, the run starts them; engine/topology_process.py starts, watches and stops the parts).

One path for every cell: an ordinary cell is a topology of one part, `engine`, whose launch is
exactly `build_launch`'s and whose process is one `EngineProcess`. A disaggregated cell starts
its workers, waits for each (health only: a worker alone cannot serve), then its router, whose
readiness is a served warm-up completion through it, which it can only answer by using both
workers; ranks start together and rank 0 is ready only once the others have joined it. Evals
talk to the front part only. Any part that fails (exits, logs a fatal line, never gets ready)
fails the whole topology with that part's name and log tail; stopping stops every part, the
front first, in reverse start order, each with its process group (engine/process.py).

Every port is picked and pinned here (engine/ports.py), the internal ones the engine's spelling
names too (profiles/topology.py): nothing relies on an engine's default port. Nodes are indices
of the cell's allocation; a `Placement` (engine/placement.py) says which machine each is, the
address its parts bind, and how a part starts there (locally every node is this machine).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.config.topology import Part, Topology
from evalkit.engine.catalog import CatalogEntry
from evalkit.engine.launch import PORT_PLACEHOLDER, CellLaunch, absolute, build_launch
from evalkit.engine.placement import Placement, local_placement
from evalkit.engine.ports import PortBook
from evalkit.errors import ConfigError
from evalkit.profiles import Profile
from evalkit.profiles.topology import PartContext, Peer, TopologySpelling, template_router
from evalkit.redact import redact_argv

PortTaker = Callable[[str, str, str, int], int | str]
"""(part name, port name, host, how many consecutive) -> the first port: a real one from the
port book at run time, a placeholder in a plan."""


def plan_ports(part: str, name: str, host: str, span: int) -> int | str:
    """A plan's placeholders: `<port>` for an ordinary cell (as before topologies), `<part.name>` else."""
    return PORT_PLACEHOLDER if (part, name) == ("engine", "http") else f"<{part}.{name}>"


def book_ports(book: PortBook, front_port: int | None = None) -> PortTaker:
    """Ports from `book`; the config's fixed `engine.port`, if any, is the front part's HTTP port."""
    def take(part: str, name: str, host: str, span: int) -> int | str:
        if name == "http" and front_port is not None and part in ("engine", "router", "rank0"):
            return front_port
        return book.take_block(host, span) if span > 1 else book.take(host)
    return take


@dataclass(frozen=True)
class PartLaunch:
    """One part's launch: the process's own (argv, env, host, port...) and where it runs."""

    part: Part
    launch: CellLaunch
    ports: Mapping[str, int | str]
    """Its internal ports by name (a KV handshake or bootstrap port, rank 0's master port)."""
    readiness: str
    """`serve`, `health` or `alive` (engine/process.py `EngineProcess.readiness`)."""
    node_name: str
    """The machine of its node (the placement's name for it)."""
    start: tuple[str, ...]
    """The argv that starts it on its node: its own argv locally, wrapped (`srun ...`) elsewhere."""
    ask_stop: Callable[[], str] | None = field(default=None, compare=False, repr=False)
    """How it is asked to stop where its launcher would not pass a SIGTERM on (`Placement.stop_asker`)."""

    @property
    def name(self) -> str:
        return self.part.name

    def display(self, secret_env: list[str]) -> dict[str, Any]:
        """The part as the plan and cell.json show it (secrets redacted)."""
        shown = self.launch.display(secret_env)
        started = redact_argv(list(self.start))
        return {"part": self.part.name, "role": self.part.role, "node": self.part.node, "node_name": self.node_name,
                **shown, **({"ports": dict(self.ports)} if self.ports else {}),
                **({"start": started} if started != shown["argv"] else {})}


@dataclass(frozen=True)
class TopologyLaunch:
    """Every part's launch, in start order."""

    topology: Topology
    parts: tuple[PartLaunch, ...]

    def part(self, name: str) -> PartLaunch:
        return next(p for p in self.parts if p.name == name)

    @property
    def front(self) -> PartLaunch:
        """The part the evals talk to."""
        return self.part(self.topology.front.name)

    @property
    def primary(self) -> PartLaunch:
        """The engine whose log says what ran (read_log, log assertions): the one engine, rank 0,
        or the first decode worker (it generates every token the evals score)."""
        if self.topology.kind == "pd":
            return self.part(self.topology.by_role("decode")[0].name)
        return self.front

    @property
    def waves(self) -> tuple[tuple[PartLaunch, ...], ...]:
        return tuple(tuple(self.part(p.name) for p in wave) for wave in self.topology.waves)

    def display(self, secret_env: list[str]) -> dict[str, Any]:
        """cell.json's `launch`: an ordinary cell's one launch as always; a topology's front
        launch (its pinned ports as placeholders) with its kind and every part's (`PartLaunch.display`)."""
        front = self.front.launch.display(secret_env)
        if self.topology.kind == "single":
            return front
        pinned = {str(port): f"<{p.name}.{name}>" for p in self.parts
                  for name, port in {"http": p.launch.port, **p.ports}.items() if isinstance(port, int)}
        return {**front, "argv": [_pinned_as_placeholders(arg, pinned) for arg in front["argv"]],
                "topology": self.topology.kind, "nodes": self.topology.nodes,
                "parts": [p.display(secret_env) for p in self.parts]}


def _pinned_as_placeholders(arg: str, pinned: Mapping[str, str]) -> str:
    """`arg` with each port evalkit pinned for this launch as the plan's placeholder (a worker's
    URL `http://h:41234` -> `http://h:<prefill0.http>`, a master port): the front's argv in
    cell.json's `launch` is then the same from run to run, as history and the pairs' comparability
    keys need (store/comparability.py); `parts` keeps every part's exact argv."""
    if arg in pinned:
        return pinned[arg]
    return re.sub(r":(\d+)(?=/|$)", lambda m: f":{pinned.get(m.group(1), m.group(1))}", arg)


def build_topology_launch(config: MatrixConfig, cell: Cell, take_port: PortTaker, source_dir: Path | None = None,
                          devices: tuple[int, ...] | None = None, cwd: Path | None = None,
                          catalog: CatalogEntry | None = None,
                          placement: Placement | None = None) -> TopologyLaunch:
    """The launch of every part of `cell`: ports from `take_port`, devices handed out in part
    order, each part in its own folder of `cwd`, on the node `placement` says (default: this machine)."""
    topology = cell.topology
    placement = placement or local_placement(config.engine.host, topology.nodes)
    if topology.kind == "single":
        port = take_port("engine", "http", config.engine.host, 1)
        launch = build_launch(config, cell, port, source_dir, devices, cwd=cwd, catalog=catalog)
        return TopologyLaunch(topology, (PartLaunch(topology.parts[0], launch, {}, "serve", placement.node(0).name,
                                                    tuple(placement.argv("engine", 0, launch.argv)),
                                                    placement.stop_asker("engine")),))
    cell = catalog.apply(cell) if catalog is not None else cell
    topology = cell.topology
    profile = build_launch(config, cell, PORT_PLACEHOLDER).profile
    spelling = _spelling(profile, topology, cell.id)

    def host(node: int) -> str:
        return placement.host(node)

    ports: dict[str, dict[str, int | str]] = {}
    for part in topology.parts:
        wanted = {"prefill": spelling.worker_ports(part), "decode": spelling.worker_ports(part),
                  "rank": spelling.rank_ports if part.index == 0 else {},
                  "router": spelling.router_ports}.get(part.role, {})
        ports[part.name] = {"http": take_port(part.name, "http", host(part.node), 1)}
        ports[part.name] |= {name: take_port(part.name, name, host(part.node), span) for name, span in wanted.items()}

    def peer(part: Part) -> Peer:
        own = ports[part.name]
        return Peer(part.name, host(part.node), own["http"], {k: v for k, v in own.items() if k != "http"})

    rank0 = topology.by_role("rank")[:1]
    python = absolute(config.engine.python) if config.engine.python else sys.executable
    contexts = {part.name: PartContext(
        part=part, host=host(part.node), port=ports[part.name]["http"], ports=peer(part).ports, nnodes=topology.nodes,
        master=peer(rank0[0]) if rank0 else None, prefill=tuple(peer(p) for p in topology.by_role("prefill")),
        decode=tuple(peer(p) for p in topology.by_role("decode")), python=python) for part in topology.parts}
    given = iter(devices or ())
    launches = []

    def placed(part: Part, launch: CellLaunch, readiness: str) -> PartLaunch:
        return PartLaunch(part, launch, contexts[part.name].ports, readiness, placement.node(part.node).name,
                          tuple(placement.argv(part.name, part.node, launch.argv)), placement.stop_asker(part.name))

    for part in topology.parts:
        ctx = contexts[part.name]
        part_cwd = cwd / part.name if cwd is not None else None
        if part.role == "router":
            launches.append(placed(part, _router_launch(config, cell, profile, spelling, topology, ctx, part_cwd),
                                   "serve"))
            continue
        mine = tuple(next(given) for _ in range(part.devices)) if devices is not None else None
        part_config = config if ctx.host == config.engine.host else config.model_copy(
            update={"engine": config.engine.model_copy(update={"host": ctx.host})})
        part_cell = dataclasses.replace(cell, settings=part.settings, args=part.args, env=part.env, topology_spec=None)
        launch = build_launch(part_config, part_cell, ctx.port, source_dir, mine, cwd=part_cwd)
        if part.role == "rank":
            argv = launch.argv + spelling.rank_flags(ctx)  # type: ignore[misc]  # checked by _spelling
            if part.index and spelling.headless_entrypoint is not None:
                head = [e.replace("{python}", launch.python) for e in spelling.headless_entrypoint]
                argv = head + argv[len(profile.entrypoint):]
            readiness = "serve" if part.index == 0 else "alive"
        else:
            argv = launch.argv + spelling.worker_flags(ctx)  # type: ignore[misc]
            readiness = "health"
        health = launch.health_path if readiness == "serve" else spelling.worker_health_path
        launches.append(placed(part, dataclasses.replace(launch, argv=argv, health_path=health), readiness))
    return TopologyLaunch(topology, tuple(launches))


def _spelling(profile: Profile, topology: Topology, cell_id: str) -> TopologySpelling:
    """The profile's spelling of this kind of topology, or a config error naming what is missing."""
    spelling = profile.topology
    what = {"pd": "prefill/decode workers", "ranks": "an engine across nodes"}[topology.kind]
    missing = (spelling is None or (topology.kind == "pd" and spelling.worker_flags is None)
               or (topology.kind == "ranks" and spelling.rank_flags is None))
    if missing:
        raise ConfigError(f"cell {cell_id}: profile {profile.name} has no spelling of {what} (docs/topologies.md)")
    assert spelling is not None
    if topology.kind == "pd" and spelling.router is None and (topology.router is None or topology.router.command is None):
        raise ConfigError(f"cell {cell_id}: topology.pd.router.command: profile {profile.name} ships no PD router; "
                          "give its argv")
    return spelling


def _router_launch(config: MatrixConfig, cell: Cell, profile: Profile, spelling: TopologySpelling, topology: Topology,
                   ctx: PartContext, cwd: Path | None) -> CellLaunch:
    command = topology.router.command if topology.router is not None else None
    argv = template_router(command, ctx) if command else spelling.router(ctx)  # type: ignore[misc]
    return CellLaunch(cell=cell, profile=profile, argv=[*argv, *ctx.part.args], env=dict(ctx.part.env), host=ctx.host,
                      port=ctx.port, health_path="/health", fatal_patterns=tuple(config.engine.fatal_patterns),
                      python=ctx.python, cwd=cwd)
