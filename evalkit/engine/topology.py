"""A cell's topology launched: each part's argv, env, address, ports and node (the plan shows
them, the run starts them), and the parts started in order, ready, watched and stopped together.

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
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from evalkit import waits
from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.config.topology import Part, Topology
from evalkit.engine.catalog import CatalogEntry
from evalkit.engine.launch import PORT_PLACEHOLDER, CellLaunch, absolute, build_launch
from evalkit.engine.metrics import scrape
from evalkit.engine.placement import Placement, local_placement
from evalkit.engine.ports import PortBook
from evalkit.engine.process import ReadyTimings
from evalkit.errors import ConfigError, EngineError, EngineExited
from evalkit.profiles import Profile
from evalkit.profiles.topology import PartContext, Peer, TopologySpelling, template_router
from evalkit.redact import redact_argv, scrub, secret_values

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
                                                    tuple(placement.argv("engine", 0, launch.argv))),))
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
                          tuple(placement.argv(part.name, part.node, launch.argv)))

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


class PartProcess(Protocol):
    """What the topology asks of one part's process: an `EngineProcess` (a test may serve a part
    in this process instead, behind the same calls)."""

    timings: ReadyTimings
    stop_s: float | None

    @property
    def pid(self) -> int | None: ...
    @property
    def running(self) -> bool: ...
    @property
    def exit_code(self) -> int | None: ...
    def start(self) -> None: ...
    def wait_ready(self, timeout_s: float, warmup_timeout_s: float = ...) -> ReadyTimings: ...
    def check_alive(self) -> None: ...
    def stop(self) -> None: ...
    def kill(self) -> None: ...
    def log_tail(self, lines: int = ...) -> str: ...
    def launch_log(self) -> str: ...


ProcessFactory = Callable[[PartLaunch], PartProcess]
"""How a part's launch becomes its process (run/cell.py: an `EngineProcess` with its log file,
timeouts and environment)."""


@dataclass
class TopologyProcess:
    """Every part's process, used like one `EngineProcess`: `with topology: topology.wait_ready(...)`."""

    launch: TopologyLaunch
    make: ProcessFactory
    processes: dict[str, PartProcess] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    """When each part was started (monotonic seconds)."""
    stop_s: float | None = None
    ready_s: dict[str, float] = field(default_factory=dict)
    """Seconds from the first part's start until each part was ready."""
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What each engine part's `/metrics` counted when the cell ended (`_scrape_parts`)."""
    _t0: float = 0.0
    _stopped: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> TopologyProcess:
        self._t0 = time.monotonic()
        self._start(self.launch.waves[0])
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self, wave: tuple[PartLaunch, ...]) -> None:
        """Start `wave`'s parts, unless the topology is already being stopped (a run's stop from
        another thread between two waves): a part started after `stop` would be left running."""
        with self._lock:
            for part in wave:
                if self._stopped.is_set():
                    raise EngineExited(f"{part.name}: stopped by evalkit before it started")
                if part.launch.cwd is not None:
                    part.launch.cwd.mkdir(parents=True, exist_ok=True)  # each part's own empty folder
                process = self.make(part)
                self.processes[part.name] = process
                self.started[part.name] = time.monotonic()
                process.start()

    @property
    def front(self) -> PartProcess:
        return self.processes[self.launch.front.name]

    @property
    def running(self) -> bool:
        """Whether any part's process still runs."""
        return any(p.running for p in self.processes.values())

    @property
    def pid(self) -> int | None:
        return self.front.pid if self.launch.front.name in self.processes else None

    def wait_ready(self, timeout_s: float, warmup_timeout_s: float = 300.0) -> ReadyTimings:
        """Each wave ready before the next starts; the front's timings, from the first start."""
        deadline = time.monotonic() + timeout_s
        for i, wave in enumerate(self.launch.waves):
            if i:
                self._start(wave)
            self._wait_wave(wave, max(deadline - time.monotonic(), 0.001), warmup_timeout_s)
        timings = self.front.timings
        offset = round(self.started[self.launch.front.name] - self._t0, 3)
        def shifted(t: float | None) -> float | None:
            return None if t is None else round(t + offset, 3)

        return ReadyTimings(shifted(timings.health_s), shifted(timings.models_s), shifted(timings.warmup_s),
                            timings.warmup_attempts)

    def _wait_wave(self, wave: tuple[PartLaunch, ...], timeout_s: float, warmup_timeout_s: float) -> None:
        """Wait for every part of `wave` at once; the first to fail fails the topology (named), the
        others' waits end with it."""
        if len(wave) == 1:  # one part (an ordinary cell's engine, a router): waited for in this thread
            try:
                self.processes[wave[0].name].wait_ready(timeout_s, warmup_timeout_s)
            except EngineError as e:
                raise self._named(wave[0].name, e) from e
            self.ready_s[wave[0].name] = round(time.monotonic() - self._t0, 3)
            return
        failures: list[tuple[str, EngineError]] = []
        done: set[str] = set()

        def wait(name: str) -> None:
            try:
                self.processes[name].wait_ready(timeout_s, warmup_timeout_s)
                self.ready_s[name] = round(time.monotonic() - self._t0, 3)
                done.add(name)
            except EngineError as e:
                failures.append((name, e))

        threads = [threading.Thread(target=wait, args=(p.name,), name=f"ready-{p.name}", daemon=True) for p in wave]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads) and not failures:
            for name in list(done):
                try:
                    self.processes[name].check_alive()  # a part ready early that died while the others wait
                except EngineError as e:
                    failures.append((name, e))
            self._stopped.wait(waits.POLL_FIRST_S)
        if failures:  # the caller's `with` stops every part, which ends the other waits
            raise self._named(*failures[0])

    def check_alive(self) -> None:
        """Raise the first part's failure (exited, fatal line), named."""
        for name, process in self.processes.items():
            try:
                process.check_alive()
            except EngineError as e:
                raise self._named(name, e) from e

    def _named(self, name: str, error: EngineError) -> EngineError:
        """`error` with the part's name in front (not for an ordinary cell's one engine), its
        class, log tail and exit code kept."""
        if self.launch.topology.kind == "single" or str(error).startswith(f"{name}: "):
            return error
        try:
            return type(error)(f"{name}: {error}", log_tail=error.log_tail, exit_code=error.exit_code)
        except TypeError:  # an error class with other arguments
            return EngineError(f"{name}: {error}", log_tail=error.log_tail, exit_code=error.exit_code)

    def log_tail(self) -> str:
        return self.front.log_tail()

    def launch_log(self) -> str:
        """The primary engine's log of this launch (what the profile's log reader reads)."""
        return self.processes[self.launch.primary.name].launch_log()

    def stop(self) -> None:
        """Stop every part, the last wave first, each wave's parts side by side. Idempotent.
        A topology's parts' `/metrics` are read first, while they still serve (`records`)."""
        began = time.monotonic()
        with self._lock:  # no part starts after this
            first = not self._stopped.is_set()
            self._stopped.set()
        if first and self.launch.topology.kind != "single":
            self._scrape_parts()
        for wave in reversed(self.launch.waves):
            threads = [threading.Thread(target=self.processes[p.name].stop, daemon=True)
                       for p in wave if p.name in self.processes]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if self.stop_s is None:
            self.stop_s = round(time.monotonic() - began, 3)

    def _scrape_parts(self) -> None:
        """Each engine part's generated tokens and requests from its own `/metrics`, once, as the
        cell ends: the front's figures are scraped around each eval as for any cell; these say
        what each worker or rank did. A part that does not answer in a second is left out."""
        for part in self.launch.parts:
            profile = part.launch.profile
            process = self.processes.get(part.name)
            if (part.part.role == "router" or part.readiness == "alive" or profile.metrics_path is None
                    or profile.metric_names is None or process is None or not process.running):
                continue
            with httpx.Client(timeout=1.0) as client:
                found = scrape(client, part.launch.base_url, profile.metrics_path)
            names = profile.metric_names
            self.metrics[part.name] = ({"error": found.error} if found.error else
                                       {"generation_tokens": found.totals.get(names.generation_tokens),
                                        **({"requests": found.totals.get(names.requests)} if names.requests else {})})

    def records(self, secret_env: list[str]) -> list[dict[str, Any]]:
        """cell.json's `parts`: each part's launch, pid, seconds to ready (from the first start)
        and to stop, exit code, log file, metrics, and its log's tail when it did not end well."""
        out: list[dict[str, Any]] = []
        for part in self.launch.parts:
            record: dict[str, Any] = {**part.display(secret_env), "log": part.part.log_name}
            process = self.processes.get(part.name)
            if process is None:
                out.append({**record, "started": False})
                continue
            ready = self.ready_s.get(part.name)
            record |= {"pid": process.pid, "ready_s": ready, "stop_s": process.stop_s, "exit_code": process.exit_code}
            if part.name in self.metrics:
                record["metrics"] = self.metrics[part.name]
            if ready is None or process.exit_code not in (None, 0, -15):
                record["log_tail"] = scrub(process.log_tail(), secret_values({**os.environ, **part.launch.env},
                                                                             secret_env))
            out.append(record)
        return out

    def kill(self) -> None:
        for process in self.processes.values():
            process.kill()
