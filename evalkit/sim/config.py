"""What a simulator process is: its serving cell, its model behaviour, its faults.

These are plain frozen values built once from the command line (``__main__``) and read by
the model and the HTTP app; nothing here does I/O except resolving a fix module.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Literal

from evalkit import __version__
from evalkit.sim.disagg import KvTransfer

GraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE"]
GRAPH_MODES: tuple[GraphMode, ...] = ("NONE", "PIECEWISE", "FULL", "FULL_AND_PIECEWISE")
FIX_ATTRIBUTE = "FORCE_UNREG_COPY_IN"
"""Attribute of a ``--sim-fix-module`` module that says whether the fix is in that tree."""


def effective_graph_mode(requested: GraphMode, *, enforce_eager: bool, level: int) -> GraphMode:
    """The mode the engine really runs, which is not always the one asked for.

    ATOM disables CUDA graphs under ``--enforce-eager`` or compilation ``--level 0`` without
    saying so on the command line; evalkit must read the effective mode from the log.
    """
    return "NONE" if enforce_eager or level == 0 else requested


@dataclass(frozen=True)
class Cell:
    """The effective serving settings that decide how the simulated model behaves."""

    tp: int
    dp: int
    dp_attention: bool
    expert_parallel: bool
    graph_mode: GraphMode
    fix: bool

    @property
    def buggy(self) -> bool:
        """ATOM PR #1596: DP attention's registered all-gather path under PIECEWISE graphs.

        DP + expert parallel uses all2all instead of that collective; TP uses an in-place
        all-reduce; FULL and eager keep a global ordering; the fix forces the copy-in path.
        """
        return (
            self.dp_attention
            and not self.expert_parallel
            and self.graph_mode == "PIECEWISE"
            and not self.fix
        )

    @property
    def numerics(self) -> str:
        """What decides the cell's floating-point path, and so which greedy answers flip: the
        parallel layout and the graph mode. The fix changes the collective only under PIECEWISE
        (copy-in instead of registered buffers), so outside it fix-on and fix-off twins compute
        the same numbers."""
        fix = f",fix={int(self.fix)}" if self.graph_mode == "PIECEWISE" else ""
        return f"tp={self.tp},dp={self.dp},dpa={int(self.dp_attention)},ep={int(self.expert_parallel)},mode={self.graph_mode}{fix}"

    @property
    def key(self) -> str:
        """Stable text identity of the cell, used in per-(question, cell) decisions."""
        return (
            f"tp={self.tp},dp={self.dp},dpa={int(self.dp_attention)},"
            f"ep={int(self.expert_parallel)},mode={self.graph_mode},fix={int(self.fix)}"
        )


CollapseKind = Literal["loop", "stutter", "soup", "latin-soup"]
"""What the buggy cell's long generations collapse into (``--sim-collapse-kind``): a loop (the
default), every word written twice in place, or token soup of several scripts or of Latin only
(the shapes of issue 30's reports; evalkit.sim.model says how each is made)."""
COLLAPSE_KINDS: tuple[CollapseKind, ...] = ("loop", "stutter", "soup", "latin-soup")


@dataclass(frozen=True)
class Behaviour:
    """Knobs of the simulated model (see ``--help`` of the ``--sim-*`` flags)."""

    seed: int = 0
    accuracy: float = 0.94
    bug_accuracy: float = 0.87
    collapse_rate: float = 0.30
    collapse_kind: CollapseKind = "loop"
    natural_loop_rate: float = 0.01
    noise: float = 0.008
    run_noise: float = 0.003
    logprob_noise: float = 0.015
    """Sigma of a healthy cell's noise on the logits, in nats (``evalkit.sim.logprobs``)."""
    logprob_bug_noise: float = 0.4
    """The same in the buggy cell."""
    batch_variance: float = 0.03
    """Share of prompts whose short greedy output depends on the size of its batch (every cell)."""
    race_rate: float = 0.4
    """The buggy cell: chance that a short generation sharing its step is hit by the race."""


@dataclass(frozen=True)
class Timing:
    """Simulated latencies: start-up, warm-up after /health, time to first token, decode."""

    startup_seconds: float = 0.0
    compile_seconds: float = 0.0
    """Simulated compilation at start-up, skipped when the compile cache holds it (sim/compiled.py)."""
    warmup_seconds: float = 0.0
    ttft_ms: float = 0.0
    tokens_per_second: float = 0.0
    """Per-request decode speed; 0 means as fast as possible."""
    long_tokens_per_second: float = 0.0
    """Per-request decode speed of long generations (max_tokens >= model.LONG_GENERATION), whose
    growing context slows each step; 0: `tokens_per_second`."""
    stream_interval: int = 0
    """Tokens per streamed SSE event, as vLLM's and SGLang's ``--stream-interval`` (both default
    to 1); 0 chooses: 16 when unpaced, else enough for at most 100 events a second."""

    def rate(self, long: bool) -> float:
        """Per-request decode speed of a long generation, or of a short one (0: unpaced)."""
        return self.long_tokens_per_second if long and self.long_tokens_per_second > 0 else self.tokens_per_second


Dialect = Literal["vllm", "atom"]
"""What the simulator speaks on the wire (``--sim-dialect``): ``vllm``, an OpenAI server with vLLM's
extensions (logprobs, echo, token ids, ``/version``, ``/metrics``), which the demo's divergence eval
needs; or ``atom``, ATOM's own server as read at 0e9804c21 (evalkit/sim/atom_wire.py)."""
DIALECTS: tuple[Dialect, ...] = ("vllm", "atom")

FaultKind = Literal[
    "crash-startup",
    "never-ready",
    "crash-after",
    "hang-after",
    "http-500",
    "malformed-json",
    "truncated-stream",
    "stream-error",
    "ignore-sigterm",
    "spawn-orphan",
    "fatal-log",
]
FAULT_HELP: dict[FaultKind, str] = {
    "crash-startup": "print an error to stderr during start-up and exit with code 3",
    "never-ready": "bind the port, but /health (and completions) answer 503 forever",
    "crash-after": "serve N completion requests; the next one makes the process exit 1",
    "hang-after": "after N completion requests, accept connections but never answer "
    "anything again, /health included (streams in flight stall too)",
    "http-500": "a share F of completion requests get HTTP 500",
    "malformed-json": "a share F of non-streamed responses are cut-off, invalid JSON",
    "truncated-stream": "a share F of streams end half-way without a final chunk or [DONE]",
    "stream-error": "a share F of streams end half-way with an error event, then [DONE] (as vLLM and "
    "SGLang end a stream that fails after it started)",
    "ignore-sigterm": "SIGTERM is ignored; only SIGKILL ends the process",
    "spawn-orphan": "at start-up, spawn a child in the same process group that outlives the "
    "parent unless the group is killed (logs 'sim: spawned child pid N')",
    "fatal-log": "after N completion requests, print ATOM's 'Memory access fault by GPU' "
    "line to stderr and stop answering, like hang-after",
}
"""What each ``--sim-fault`` kind does (shown by ``--help``); N is ``--sim-fault-after``,
F is ``--sim-fault-rate``."""
FAULT_KINDS: tuple[FaultKind, ...] = tuple(FAULT_HELP)


@dataclass(frozen=True)
class Faults:
    """Injected failures, all off by default (see ``evalkit.sim.faults``)."""

    kinds: frozenset[FaultKind] = field(default_factory=frozenset)
    after: int = 0
    """For crash-after / hang-after / fatal-log: completion requests served before the fault; the
    share-based faults spare the first N requests too."""
    rate: float = 1.0
    """For http-500 / malformed-json / truncated-stream / stream-error: share of requests affected."""


@dataclass(frozen=True)
class Reports:
    """What the simulator reports (``--sim-version``, ``--sim-spec-decode`` or ATOM's ``--num-speculative-tokens``
    with ``--method``, ``--sim-spec-acceptance``); in ATOM's dialect spec decoding is logged (sim/mtp.py)."""

    version: str = f"{__version__}+sim"
    """`GET /version`'s `version` (evalkit's, marked): a source build's would name its commit
    (``0.32.1.dev3+g<hash>``)."""
    spec_tokens: int = 0
    """Draft tokens per decode step; 0: no speculative decoding (no spec counters at all, like vLLM)."""
    spec_acceptance: float = 0.7
    """Share of draft tokens accepted: ``--sim-spec-acceptance``, or in the buggy cell
    ``--sim-bug-spec-acceptance`` (its draft stops agreeing with a target that went wrong)."""


Holder = Literal["cuda", "host"]
HOLDERS: tuple[Holder, ...] = ("cuda", "host")


@dataclass(frozen=True)
class GpuHold:
    """Memory the server's workers hold on its devices (``--sim-gpu-*``, evalkit/sim/gpu.py);
    ``gib`` 0, the default, starts no worker."""

    gib: float = 0.0
    """Per visible device."""
    linger_s: float = 0.0
    """Fault: seconds the workers keep their memory after the server is gone, outside its process group."""
    util_pct: float = 0.0
    """Share of time each worker keeps its GPU computing while the server runs."""
    on: Holder = "cuda"
    """``host``: a bytearray in host memory, no torch (tests on machines without a GPU)."""


@dataclass(frozen=True)
class Ranks:
    """One engine over several nodes, in vLLM's flags (``--nnodes``, ``--node-rank``, ``--master-addr``,
    ``--master-port``; evalkit/sim/ranks.py): rank 0 serves once every other rank has joined it."""

    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29501
    join_timeout_s: float = 120.0
    """How long a rank above 0 keeps trying to reach rank 0."""


@dataclass(frozen=True)
class ServerConfig:
    """Everything one simulator process needs."""

    model: str
    served_model_name: str
    host: str
    port: int
    max_model_len: int
    cell: Cell
    fix_source: str
    behaviour: Behaviour
    timing: Timing
    faults: Faults
    reports: Reports = field(default_factory=Reports)
    """What /version and /metrics say (evalkit/sim/reports.py)."""
    dialect: Dialect = "vllm"
    """The wire format: vLLM's (default) or ATOM's."""
    gpu: GpuHold = field(default_factory=GpuHold)
    """GPU memory held by worker processes (none by default)."""
    kv: KvTransfer | None = None
    """A prefill (kv_producer) or decode (kv_consumer) worker of a PD pair; None: a whole engine."""
    ranks: Ranks = field(default_factory=Ranks)
    """The nodes this engine spans (one by default)."""


class SimConfigError(Exception):
    """A setting the simulator cannot start with (exit code 2, one clear line)."""


def fix_from_module(name: str) -> tuple[bool, str]:
    """Import an engine source tree's marker module: is the fix in it, and where is it.

    A module without the attribute counts as "fix off": a tree from before the fix simply
    does not know the name.
    """
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        raise SimConfigError(f"cannot import --sim-fix-module {name!r}: {error}") from error
    return bool(getattr(module, FIX_ATTRIBUTE, False)), str(getattr(module, "__file__", "?"))
