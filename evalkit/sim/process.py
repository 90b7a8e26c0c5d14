"""Start-up and life of the simulator process: log lines, faults, bind, serve.

Start-up mirrors a real engine's: it announces itself, logs ATOM's own request lines
(evalkit/sim/startup.py), loads (the GSM8K index; ``--sim-compile-seconds`` of simulated
compilation unless its compile cache holds it, sim/compiled.py; ``--sim-startup-seconds`` of
simulated weight loading and graph capture), logs ATOM's capture lines (the mode it really runs, the fix's line),
binds the HTTP port and only then prints the ready line, as ATOM captures before it serves. Every
line is flushed at once, because evalkit reads them from engine.log while the process runs.

Exit codes: 0 after a clean stop, 1 when the port cannot be bound (or crash-after), 2 for a
bad command line, 3 for the crash-startup fault, 4 when the ``--sim-gpu-gib`` workers cannot hold
their memory (evalkit/sim/gpu.py), 5 when its multi-node group loses a rank or rank 0 (evalkit/sim/ranks.py;
a rank above 0 serves no HTTP and only holds its place in the group); SIGTERM ends it like a real server (the
process logs `sim: SIGTERM: shutting down` and dies of the signal after a graceful shutdown of at most a second).
"""

from __future__ import annotations

import signal
import socket
import sys
import time
from types import FrameType

import uvicorn

from evalkit.sim.compiled import compile_step
from evalkit.sim.config import ServerConfig
from evalkit.sim.faults import FaultState, spawn_orphan
from evalkit.sim.gpu import GpuWorkersFailed, Workers
from evalkit.sim.gsm8k import TestSet
from evalkit.sim.model import SimulatedModel
from evalkit.sim.ranks import EXIT_RANKS, RankGroup, join
from evalkit.sim.server import Simulator
from evalkit.sim.startup import AtomRequest, log_capture, log_request

EXIT_BIND = 1
EXIT_CRASH_STARTUP = 3
EXIT_GPU_WORKERS = 4
GRACEFUL_SHUTDOWN_SECONDS = 1


def _log(line: str, *, error: bool = False) -> None:
    print(line, file=sys.stderr if error else sys.stdout, flush=True)


class _Server(uvicorn.Server):
    """uvicorn, plus the ready line once serving and the ignore-sigterm fault."""

    def __init__(self, config: uvicorn.Config, simulator: Simulator, url: str, ignore_sigterm: bool) -> None:
        super().__init__(config)
        self.simulator = simulator
        self.url = url
        self.ignore_sigterm = ignore_sigterm
        self.signalled = False
        """Whether a signal has begun the shutdown: a lost rank sets `should_exit` too (run's
        `on_lost`), and a SIGTERM after it must still say so, for the one reading the log."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.simulator.start_serving()
            _log(f"sim: ready on {self.url}")

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.ignore_sigterm and sig == signal.SIGTERM:
            _log("sim: ignoring SIGTERM (--sim-fault ignore-sigterm)", error=True)
            return
        if not self.signalled:  # a second signal forces uvicorn's exit; the first is logged
            self.signalled = True
            _log(f"sim: {signal.Signals(sig).name}: shutting down")
        super().handle_exit(sig, frame)


def _announce(config: ServerConfig, fix_path: str | None, request: AtomRequest) -> None:
    cell, behaviour = config.cell, config.behaviour
    fix = "on" if cell.fix else "off"
    _log(
        f"evalkit.sim: SIMULATED ENGINE, not a real model "
        f"(seed={behaviour.seed}, fix={fix}, source={config.fix_source})"
    )
    log_request(request)
    if fix_path:
        _log(f"sim: fix module file {fix_path}")
    _log(
        f"sim: model={config.model} served as {config.served_model_name}, tp={cell.tp} "
        f"dp={cell.dp} dp_attention={cell.dp_attention} expert_parallel={cell.expert_parallel} "
        f"max_model_len={config.max_model_len}"
    )


def bind(host: str, port: int) -> socket.socket:
    """Bind here rather than in uvicorn: a taken port becomes one clear line and exit 1.

    The protocol must be given explicitly: asyncio only sets TCP_NODELAY on connections of
    an IPPROTO_TCP socket, and without it every response waits ~40 ms for a delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def run(config: ServerConfig, fix_path: str | None, request: AtomRequest) -> int:
    """Start up, serve until stopped; the process exit code."""
    faults = FaultState(config.faults, config.behaviour.seed)
    _announce(config, fix_path, request)
    if config.ranks.node_rank > 0:
        return join(config.ranks, _log)
    if faults.has("ignore-sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if faults.has("spawn-orphan"):
        _log(f"sim: spawned child pid {spawn_orphan()}")
    workers = Workers(config.gpu)  # kept until the process ends: its pipe tells the workers we are gone
    if config.gpu.gib > 0:
        try:
            count = workers.start()
        except GpuWorkersFailed as error:
            _log(f"sim: fatal: {error}", error=True)
            return EXIT_GPU_WORKERS
        _log(f"sim: {count} GPU worker(s) hold {config.gpu.gib:g} GiB each")
    model = SimulatedModel(config.behaviour, config.cell, TestSet.load())
    compile_step(config, _log)
    if config.timing.startup_seconds > 0:
        _log(f"sim: loading weights and capturing graphs (simulated, {config.timing.startup_seconds:g} s)")
        time.sleep(config.timing.startup_seconds)
    log_capture(request, config.cell.graph_mode, config.cell.fix, config.timing.startup_seconds)
    if faults.has("crash-startup"):
        _log("sim: fatal: simulated start-up failure (--sim-fault crash-startup)", error=True)
        return EXIT_CRASH_STARTUP
    try:
        sock = bind(config.host, config.port)
    except OSError as error:
        _log(f"evalkit.sim: error: cannot bind {config.host}:{config.port}: {error}", error=True)
        return EXIT_BIND
    host, port = sock.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    lost: list[str] = []
    group: RankGroup | None = None
    if config.ranks.nnodes > 1:
        def on_lost(rank: int, host: str) -> None:  # a rank's thread: uvicorn's loop polls should_exit
            lost.append(f"sim: fatal: rank {rank} ({host}) left the group")
            server.should_exit = True

        group = RankGroup(config.ranks, on_lost, _log)
    simulator = Simulator(config, model, faults, group)
    server = _Server(
        uvicorn.Config(
            simulator.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        ),
        simulator,
        url,
        faults.has("ignore-sigterm"),
    )
    if group is not None:
        try:
            group.start()
        except OSError as error:
            _log(f"evalkit.sim: error: cannot listen for ranks on {config.ranks.master_addr}:"
                 f"{config.ranks.master_port}: {error}", error=True)
            return EXIT_BIND
        _log(f"sim: rank 0 of {config.ranks.nnodes} waiting for ranks on {config.ranks.master_addr}:"
             f"{config.ranks.master_port}")
    server.run(sockets=[sock])
    if lost:
        _log(lost[0], error=True)
        return EXIT_RANKS
    return 0

