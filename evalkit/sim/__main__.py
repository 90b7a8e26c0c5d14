"""``python -m evalkit.sim``: a simulated ATOM server, for running evalkit without a GPU.

It takes ATOM's own flags (``python -m atom.entrypoints.openai_server``), so evalkit's ``sim``
profile is the ``atom`` flag map with another entry point, plus ``--sim-*`` flags for the
simulated behaviour and for fault injection. See ``evalkit.sim`` for what it reproduces.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence

from evalkit.sim.config import (
    COLLAPSE_KINDS,
    DIALECTS,
    FAULT_HELP,
    FAULT_KINDS,
    GRAPH_MODES,
    HOLDERS,
    Behaviour,
    Cell,
    Faults,
    GpuHold,
    Ranks,
    Reports,
    ServerConfig,
    SimConfigError,
    Timing,
    effective_graph_mode,
    fix_from_module,
)
from evalkit.sim.disagg import KvConfigError, KvTransfer
from evalkit.sim.startup import AtomRequest

FIX_ENV = "EVALKIT_SIM_FIX"
KV_LAYOUT_FIX_ENV = "EVALKIT_SIM_KV_LAYOUT_FIX"
ATOM_DEFAULT_PORT = 8006
"""ATOM's internal engine port default (EngineArgs.port, arg_utils.py at both refs), shown in Engine kwargs."""
DEFAULT_MAX_MODEL_LEN = 163840
"""DeepSeek-V3's max_position_embeddings: ATOM's default context is the model's own."""
EXIT_CONFIG = 2


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def build_parser() -> argparse.ArgumentParser:
    """ATOM's serving flags plus the simulator's own ``--sim-*`` flags."""
    parser = argparse.ArgumentParser(
        prog="python -m evalkit.sim",
        description="Simulated ATOM OpenAI-compatible server: no model, no GPU. Reproduces "
        "ATOM PR #1596 (DP attention + PIECEWISE graphs without the fix: GSM8K ~0.87 instead "
        "of ~0.94 and repeated-token collapse of long generations).",
        epilog="fault kinds (--sim-fault KIND; N = --sim-fault-after, F = --sim-fault-rate):\n"
        + "\n".join(
            textwrap.fill(text, 88, initial_indent=f"  {kind:17} ", subsequent_indent=" " * 20)
            for kind, text in FAULT_HELP.items()
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    atom = parser.add_argument_group("ATOM flags")
    atom.add_argument("--model", required=True, help="model name or path (only reported)")
    atom.add_argument("--served-model-name", help="name in /v1/models and responses (default: --model)")
    atom.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; ATOM's is 0.0.0.0)")
    atom.add_argument("--server-port", type=int, default=8000, help="HTTP port (0: any free port)")
    atom.add_argument("--port", type=int, help="ATOM's internal engine port: accepted and ignored")
    atom.add_argument("-tp", "--tensor-parallel-size", type=int, default=1)
    atom.add_argument("-dp", "--data-parallel-size", type=int, default=1)
    atom.add_argument("--enable-dp-attention", action="store_true")
    atom.add_argument("--enable-expert-parallel", action="store_true")
    atom.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs: effective mode NONE")
    atom.add_argument("--cudagraph-mode", choices=GRAPH_MODES, default="FULL")
    atom.add_argument("--level", type=int, default=3, help="compilation level; 0 disables graphs")
    atom.add_argument("--kv_cache_dtype", default="bf16")
    atom.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN)
    atom.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    atom.add_argument("--trust-remote-code", action="store_true")
    atom.add_argument("--method", choices=("mtp", "eagle3", "dspark"),
                      help="speculative decoding method (ATOM's; any one turns it on, with --num-speculative-tokens)")
    atom.add_argument("--num-speculative-tokens", type=_non_negative_int, default=1,
                      help="draft tokens per step under --method (ATOM's default 1)")
    atom.add_argument("--kv-transfer-config", metavar="JSON",
                      help='a PD worker: {"kv_role": "kv_producer"|"kv_consumer", "kv_connector": ..., '
                           '"handshake_port": ...} (ATOM\'s; evalkit/sim/disagg.py)')
    nodes = parser.add_argument_group("vLLM's multi-node flags (evalkit/sim/ranks.py)")
    nodes.add_argument("--nnodes", type=int, default=1, help="nodes this engine spans (default 1)")
    nodes.add_argument("--node-rank", type=_non_negative_int, default=0,
                       help="this node's rank: 0 serves, the others join it headless")
    nodes.add_argument("--master-addr", default="127.0.0.1", help="rank 0's address (default 127.0.0.1)")
    nodes.add_argument("--master-port", type=int, default=29501, help="rank 0's join port (default 29501)")
    nodes.add_argument("--headless", action="store_true", help="no HTTP server (implied by --node-rank above 0)")

    sim = parser.add_argument_group("simulator flags")
    fix = sim.add_mutually_exclusive_group()
    fix.add_argument(
        "--sim-fix",
        choices=("on", "off"),
        help=f"is ATOM PR #1596's fix in the engine (also env {FIX_ENV}=on|off; the flag "
        "wins; default on: a healthy engine)",
    )
    fix.add_argument(
        "--sim-fix-module",
        metavar="MODULE",
        help="import MODULE from PYTHONPATH; the fix is on iff its FORCE_UNREG_COPY_IN is "
        "truthy (how an engine source tree is simulated; a missing module is an error)",
    )
    sim.add_argument("--sim-ran-mode", choices=GRAPH_MODES, metavar="MODE",
                     help="run and log this CUDA-graph mode whatever was asked, like an engine that downgrades "
                          "(ATOM's Engine kwargs line still shows the request; one of %(choices)s)")
    sim.add_argument("--sim-dialect", choices=DIALECTS, default="vllm",
                     help="the wire format: vllm (default: logprobs, echo, token ids, /version, /metrics) or atom "
                          "(ATOM's own finish reasons and stream ending, 422s, no logprobs, no /version or /metrics)")
    sim.add_argument("--sim-seed", type=int, default=0, help="seed of every decision (default 0)")
    sim.add_argument("--sim-startup-seconds", type=_non_negative, default=0.0,
                     help="simulated load and graph capture before the port is bound")
    sim.add_argument("--sim-compile-seconds", type=_non_negative, default=0.0,
                     help="simulated compilation at start-up, skipped when $EVALKIT_SIM_CACHE holds its artifact")
    sim.add_argument("--sim-warmup-seconds", type=_non_negative, default=0.0,
                     help="after binding, /health is 200 but completions answer 503 this long")
    sim.add_argument("--sim-tokens-per-second", type=_non_negative, default=0.0,
                     help="per-request decode speed (0: as fast as possible)")
    sim.add_argument("--sim-long-tokens-per-second", type=_non_negative, default=0.0,
                     help="per-request decode speed of long generations (max_tokens >= 512), whose context slows "
                          "each step (0, default: --sim-tokens-per-second)")
    sim.add_argument("--sim-stream-interval", type=_non_negative_int, default=0,
                     help="tokens per streamed event, as real engines' --stream-interval (default 1 there); "
                          "0 (default): 16 when unpaced, else at most 100 events a second")
    sim.add_argument("--sim-ttft-ms", type=_non_negative, default=0.0, help="time to first token")
    sim.add_argument("--sim-accuracy", type=_share, default=0.94, help="healthy GSM8K accuracy")
    sim.add_argument("--sim-bug-accuracy", type=_share, default=0.87, help="GSM8K accuracy of the buggy cell")
    sim.add_argument("--sim-collapse-rate", type=_share, default=0.30,
                     help="share of long generations (max_tokens >= 512) that collapse in the buggy cell")
    sim.add_argument("--sim-collapse-kind", choices=COLLAPSE_KINDS, default="loop",
                     help="what those generations collapse into: a loop (default), stutter (every word twice), "
                          "soup (subwords of several scripts run together) or latin-soup (Latin subwords only, "
                          "which only a healthy model's likelihood tells from text)")
    sim.add_argument("--sim-natural-loop-rate", type=_share, default=0.01,
                     help="share of long generations that loop in every cell, as real models do")
    sim.add_argument("--sim-noise", type=_share, default=0.008,
                     help="per numerics path (parallel layout, graph mode): chance that a right GSM8K answer "
                          "turns wrong, and the matching chance for wrong -> right (about 3%% of questions differ "
                          "between two paths, balanced in expectation)")
    sim.add_argument("--sim-run-noise", type=_share, default=0.003,
                     help="the same per repeated ask of a question on one server (GSM8K repeats): run-to-run noise")
    sim.add_argument("--sim-logprob-noise", type=_non_negative, default=0.015, metavar="SIGMA",
                     help="per numerics path: sigma in nats of the Gaussian noise on the logits behind every "
                          "logprob, like kernels that reduce in another order (default 0.015)")
    sim.add_argument("--sim-logprob-bug-noise", type=_non_negative, default=0.4, metavar="SIGMA",
                     help="the same in the buggy cell, which also moves the argmax at 3%% of positions (default 0.4)")
    sim.add_argument("--sim-batch-variance", type=_share, default=Behaviour.batch_variance, metavar="P",
                     help="share of prompts whose short greedy output changes with the size of the batch it runs in, "
                          "in every cell, as engines that are not batch-invariant (default %(default)s)")
    sim.add_argument("--sim-race-rate", type=_share, default=Behaviour.race_rate, metavar="P",
                     help="the buggy cell: chance that a short generation sharing its batch takes another text, "
                          "one per in-flight state, like a race between ranks (default %(default)s)")
    sim.add_argument("--sim-fault", action="append", choices=FAULT_KINDS, default=[], metavar="KIND",
                     help="inject a fault (repeatable; kinds below)")
    sim.add_argument("--sim-fault-after", type=int, default=0, metavar="N",
                     help="completion requests served before crash-after / hang-after / fatal-log")
    sim.add_argument("--sim-fault-rate", type=_share, default=1.0, metavar="F",
                     help="share of requests hit by http-500 / malformed-json / truncated-stream / stream-error "
                          "(from request N+1)")
    sim.add_argument("--sim-version", default=Reports.version,
                     help="what GET /version reports (a source build's names its commit: 0.32.1.dev3+g<hash>)")
    sim.add_argument("--sim-spec-decode", type=_non_negative_int, default=0, metavar="K",
                     help="report speculative decoding with K draft tokens per step in /metrics (default 0: none)")
    sim.add_argument("--sim-spec-acceptance", type=_share, default=Reports.spec_acceptance, metavar="P",
                     help="share of draft tokens accepted (default %(default)s)")
    sim.add_argument("--sim-bug-spec-acceptance", type=_share, default=0.0, metavar="P",
                     help="the same in the buggy cell (default %(default)s: ATOM's DSpark nightly fell from ~46%% to 0%%)")
    sim.add_argument("--sim-kv-layout-fix", choices=("on", "off"),
                     help="a decode worker reads the KV payload by the prefill's TP, not its own (also env "
                          f"{KV_LAYOUT_FIX_ENV}; default off: the seeded PD bug when the TPs differ)")
    sim.add_argument("--sim-join-timeout", type=_non_negative, default=Ranks.join_timeout_s, metavar="SECONDS",
                     help="how long a rank above 0 tries to reach rank 0 (default %(default)s)")
    gpu = parser.add_argument_group("simulator flags: real GPU memory (evalkit/sim/gpu.py)")
    gpu.add_argument("--sim-gpu-gib", type=_non_negative, default=0.0, metavar="GIB",
                     help="start one worker process per visible device (CUDA_VISIBLE_DEVICES) that holds GIB GiB "
                          "of its GPU memory with torch and prints the device's UUID; serve once all hold it "
                          "(default 0: no worker, no torch)")
    gpu.add_argument("--sim-gpu-linger", type=_non_negative, default=0.0, metavar="SECONDS",
                     help="fault: the workers leave the engine's process group and keep their memory SECONDS "
                          "after the server is gone, like workers stuck in the driver after their leader exited")
    gpu.add_argument("--sim-gpu-util", type=_non_negative, default=0.0, metavar="PCT",
                     help="share of time (%%) each worker keeps its GPU computing while the server runs")
    gpu.add_argument("--sim-gpu-on", choices=HOLDERS, default="cuda",
                     help="cuda (default), or host: hold host memory without torch (tests without a GPU)")
    return parser


def _resolve_fix(args: argparse.Namespace) -> tuple[bool, str, str | None]:
    """(fix on, where that came from, the module's file if from a module)."""
    if args.sim_fix_module:
        fix, path = fix_from_module(args.sim_fix_module)
        return fix, f"module:{args.sim_fix_module}", path
    if args.sim_fix:
        return args.sim_fix == "on", "flag", None
    env = os.environ.get(FIX_ENV)
    if env is not None:
        if env.lower() not in ("on", "off"):
            raise SimConfigError(f"{FIX_ENV} must be 'on' or 'off', not {env!r}")
        return env.lower() == "on", "env", None
    return True, "default", None


def _kv(args: argparse.Namespace) -> KvTransfer | None:
    """The PD role, if any, and whether the decode side reads the payload by the producer's TP."""
    env = os.environ.get(KV_LAYOUT_FIX_ENV)
    if env is not None and env.lower() not in ("on", "off"):
        raise SimConfigError(f"{KV_LAYOUT_FIX_ENV} must be 'on' or 'off', not {env!r}")
    layout_fix = (args.sim_kv_layout_fix or (env or "off").lower()) == "on"
    if args.kv_transfer_config is None:
        return None
    try:
        return KvTransfer.parse(args.kv_transfer_config, args.tensor_parallel_size, layout_fix=layout_fix)
    except KvConfigError as error:
        raise SimConfigError(str(error)) from error


def _ranks(args: argparse.Namespace) -> Ranks:
    """vLLM's multi-node checks (vllm/engine/arg_utils.py:2365-2378 at 0.32.0), then the ranks."""
    world = args.tensor_parallel_size * args.data_parallel_size
    if args.nnodes < 1:
        raise SimConfigError(f"--nnodes must be at least 1, not {args.nnodes}")
    if world % args.nnodes:
        raise SimConfigError(f"--nnodes {args.nnodes} must evenly divide the total world size ({world})")
    if not args.node_rank < args.nnodes:
        raise SimConfigError(f"--node-rank must be between 0 and {args.nnodes - 1}; got --node-rank {args.node_rank}")
    if args.headless and args.node_rank == 0:
        raise SimConfigError("--headless: rank 0 serves the API; only ranks above 0 run headless")
    if not 0 < args.master_port < 65536:
        raise SimConfigError(f"--master-port {args.master_port} is not a port")
    return Ranks(args.nnodes, args.node_rank, args.master_addr, args.master_port, args.sim_join_timeout)


def configure(argv: Sequence[str] | None = None) -> tuple[ServerConfig, str | None, AtomRequest]:
    """The server a command line asks for: its config, the fix module's file (if one decides the
    fix) and ATOM's view of the request. Separate from `main` so a test can build the same server
    in the test's own process (`Simulator(config, ...).app`) from the same flags. A bad flag exits 2
    (argparse); a bad combination raises SimConfigError."""
    args = build_parser().parse_args(argv)
    if args.sim_dialect == "atom" and args.served_model_name is not None:
        # ATOM has no such flag before 5e491a90b (after the fix): its parser refuses it
        raise SimConfigError("--served-model-name: ATOM at 0e9804c21/ccc861dc5 has no such flag "
                             "(--sim-dialect atom serves the --model string)")
    fix, source, fix_path = _resolve_fix(args)
    ranks = _ranks(args)
    kv = _kv(args)
    cell = Cell(
        tp=args.tensor_parallel_size,
        dp=args.data_parallel_size,
        dp_attention=args.enable_dp_attention,
        expert_parallel=args.enable_expert_parallel,
        graph_mode=args.sim_ran_mode or effective_graph_mode(args.cudagraph_mode, enforce_eager=args.enforce_eager,
                                                             level=args.level),
        fix=fix,
    )
    config = ServerConfig(
        model=args.model,
        served_model_name=args.served_model_name or args.model,
        host=args.host,
        port=args.server_port,
        max_model_len=args.max_model_len,
        cell=cell,
        fix_source=source,
        behaviour=Behaviour(
            seed=args.sim_seed,
            accuracy=args.sim_accuracy,
            bug_accuracy=args.sim_bug_accuracy,
            collapse_rate=args.sim_collapse_rate,
            collapse_kind=args.sim_collapse_kind,
            natural_loop_rate=args.sim_natural_loop_rate,
            noise=args.sim_noise,
            run_noise=args.sim_run_noise,
            logprob_noise=args.sim_logprob_noise,
            logprob_bug_noise=args.sim_logprob_bug_noise,
            batch_variance=args.sim_batch_variance,
            race_rate=args.sim_race_rate,
        ),
        timing=Timing(
            startup_seconds=args.sim_startup_seconds,
            compile_seconds=args.sim_compile_seconds,
            warmup_seconds=args.sim_warmup_seconds,
            ttft_ms=args.sim_ttft_ms,
            tokens_per_second=args.sim_tokens_per_second,
            long_tokens_per_second=args.sim_long_tokens_per_second,
            stream_interval=args.sim_stream_interval,
        ),
        faults=Faults(frozenset(args.sim_fault), after=args.sim_fault_after, rate=args.sim_fault_rate),
        reports=Reports(version=args.sim_version,
                        spec_tokens=args.sim_spec_decode or (args.num_speculative_tokens if args.method else 0),
                        spec_acceptance=args.sim_bug_spec_acceptance if cell.buggy else args.sim_spec_acceptance),
        dialect=args.sim_dialect,
        gpu=GpuHold(gib=args.sim_gpu_gib, linger_s=args.sim_gpu_linger, util_pct=args.sim_gpu_util,
                    on=args.sim_gpu_on),
        kv=kv,
        ranks=ranks,
    )
    request = AtomRequest(
        tensor_parallel=args.tensor_parallel_size, data_parallel=args.data_parallel_size,
        enforce_eager=args.enforce_eager, dp_attention=args.enable_dp_attention,
        expert_parallel=args.enable_expert_parallel, cudagraph_mode=args.cudagraph_mode, level=args.level,
        port=args.port if args.port is not None else ATOM_DEFAULT_PORT, kv_cache_dtype=args.kv_cache_dtype,
        max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
        trust_remote_code=args.trust_remote_code,
    )
    return config, fix_path, request


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the server until it is stopped; the exit code."""
    try:
        config, fix_path, request = configure(argv)
    except SimConfigError as error:
        print(f"evalkit.sim: error: {error}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    from evalkit.sim.process import run  # deferred: --help and flag errors stay instant

    return run(config, fix_path, request)


if __name__ == "__main__":
    sys.exit(main())
