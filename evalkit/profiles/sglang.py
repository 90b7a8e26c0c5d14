"""SGLang: `python -m sglang.launch_server --model-path M`.

Flags as read from the sglang==0.5.23 wheel (sglang/srt/arg_groups/fields/*.py, server_args.py,
model_executor/cuda_graph_config.py) and checked by parsing every cell of
configs/sglang-deepseek.yaml with SGLang's own parser (`ServerArgs.add_cli_args`; the
real-engine suite, tests/real_engine/test_parsers.py; unit pins in tests/test_profiles_gpu.py):

- `--tp-size` (alias `--tensor-parallel-size`, fields/parallel.py:45-51), `--dp-size`
  (:73-80: data-parallel *replicas*), `--attn-dp-size` (:81-89: attention-DP groups inside
  the TP group), `--ep-size` (:281-287);
- `--host` (default 127.0.0.1) and `--port` (default 30000) (fields/serving.py:65-66),
  `--served-model-name` (serving.py:168), `--max-running-requests` (fields/schedule.py:31);
- CUDA graphs per phase: `--cuda-graph-backend-decode` and `--cuda-graph-backend-prefill`,
  each `full | breakable | disabled` (fields/exec_.py:613-628; defaults on CUDA: decode full,
  prefill breakable, model_executor/cuda_graph_config.py:119-154). "breakable" is SGLang's
  piecewise graph; there is no `--enable/--disable-piecewise-cuda-graph` any more.

Deprecated spellings are not used: `--enable-dp-attention` (server_args.py:416-424, "use
--attn-dp-size <dp-size>") and `--disable-cuda-graph` (server_args.py:407-415, "use
--cuda-graph-backend-{decode,prefill}=disabled"). Both phases are always passed explicitly,
which also keeps SGLang's auto-disable cascade from rewriting the prefill backend silently
(arg_groups/cuda_graph_hook.py: "an explicitly supplied prefill backend skips the cascade").

evalkit's graph modes, in vLLM's vocabulary, map to (decode, prefill) backends:
  eager, NONE           -> disabled, disabled   (SGLang does not torch.compile by default)
  FULL_DECODE_ONLY      -> full, disabled
  FULL                  -> full, full           (SGLang calls full prefill graphs experimental)
  PIECEWISE             -> breakable, breakable
  FULL_AND_PIECEWISE    -> full, breakable      (SGLang's own default on CUDA)

DP attention: `dp_attention: true` becomes `--attn-dp-size N`, N = `data_parallel` if set
(the old `--dp-size N --enable-dp-attention`), else `tensor_parallel` (every TP rank its own
attention-DP rank, like ATOM's `-tp 8 --enable-dp-attention`). `data_parallel` without
`dp_attention` is `--dp-size N` (replicas). `expert_parallel: true` is `--ep-size` equal to the
TP size.

Readiness: `/health_generate`, which runs a real one-token generation (SGLang's own test
helper polls it), rather than `/health`.
Effective mode (`read_sglang_log`): the resolved `server_args={...}` dump (entrypoints/engine.py:1185)
is the request, logged before the model loads; the model runner can still drop the prefill graph.
What ran is read from model_executor/model_runner_components/cuda_graph_setup.py (0.5.23):
`Capture target prefill CUDA graph begin. backend=X, num_tokens=...` (:683-688, `capture_prefill_graph`;
else `Disable prefill CUDA graph because ...`, :497-677, several reasons) and `Capture target decode
CUDA graph begin. backend=Y, num_tokens_per_req=...` (:755-761, `capture_decode_graph`; "target verify"
under speculative decoding; it returns without a line when decode graphs are disabled). Both are logged
before the server answers, so once it is ready a missing line means that phase ran without graphs.
The (decode, prefill) backends map back to evalkit's mode through `GRAPH_BACKENDS`.
SGLang's completions take no `return_tokens_as_token_ids`, but `return_token_ids: true`
(entrypoints/openai/protocol.py:394) makes each streamed choice carry its new ids,
`{"index": 0, "text": " the", "logprobs": null, "finish_reason": null, "matched_stop": null,
"token_ids": [279]}` (serving_completions.py:336-347 slices the request's cumulative `output_ids` to
the chunk's; protocol.py:546-565 drops the field when not asked), so the detector reads exact ids.
Finish reasons are OpenAI's plus "abort" (`SGLANG_FINISH_REASONS`); a failed stream ends with an
error event (evals/repetition.py, `StreamErrorEvent`).

What the engine reports: SGLang has no `/version`; `GET /server_info` (entrypoints/http_server.py:863;
`/get_server_info` is its deprecated alias) holds `"version": __version__`. `/metrics` exists only
with `--enable-metrics` (arg_groups/fields/observability.py:70), which this profile always passes:
`sglang:generation_tokens_total`, `sglang:num_requests_total` and the per-request TPOT histogram
`sglang:request_time_per_output_token_seconds` (observability/metrics_collector.py:1861, :1941,
:2058). Its speculative decoding figures are gauges of the most recent batch
(`sglang:spec_accept_rate`, `sglang:spec_accept_length`, :512-522), not counters, but the
counter `sglang:spec_verify_calls_total` (:1865-1869, incremented per finished request by its
verify steps, :2111-2112) gives the mean accepted length over an eval as SGLang defines it per
request, completion tokens / verify calls (managers/tokenizer_manager.py:3165-3168, "includes
bonus token"): generation tokens / verify calls (engine/metrics.py). No acceptance rate: there
is no counter of draft tokens proposed or accepted.

Comparing two SGLang commits (a `source`): the package's METADATA requires `sglang-kernel==0.4.10`
(the kernels are a separate package, matched to the tree by hand), and a checkout builds its
Rust extensions with cargo into `$SGLANG_CACHE_DIR/rust_extensions`
(srt/rust_extensions/loader.py:355-359), falling back to Python without a toolchain. A setup
that fits: `setup: ["{python}", -m, pip, install, -e, python, --no-deps]` in a venv kept for
these comparisons (`engine.python`), with the matching `sglang-kernel` installed there.

Caches: `SGLANG_CACHE_DIR` (srt/environ.py:1383, default `~/.cache/sglang`) moves SGLang's JIT,
DeepGEMM, CuTe and Rust-extension caches, and the Triton, Inductor, CUDA and FlashInfer caches
default under it unless set (environ.py:2308-2320, `third_party_cache_defaults`): by default
(`engine.cache: keyed`) it points at a folder under evalkit's own key (engine/caches.py), with
inherited `SGLANG_*` and `FLASHINFER_*` variables part of that key, so a tree's Rust extensions
are built once per key, not at every launch (`engine.cache: fresh` gives each launch an empty one).
Internal ports (srt/server_args.py `PortArgs.init_new`, :764-900): `--nccl-port` (random below
the ephemeral range when unset, :771-775) gets a port from evalkit's port book; with DP attention
the ZMQ and rendezvous ports are `--port` + 233 and the six after it (:819-850), so two cells'
HTTP ports 233 apart would collide: `--dist-init-addr 127.0.0.1:P` (fields/parallel.py:32) moves
them to a block evalkit keeps free (P .. P+6, plus one per DP rank on the SGLANG_RUST_SERVER
path: 24 in all).

Topologies, read from the same 0.5.23 source: a disaggregated worker is `--disaggregation-mode
prefill|decode` (arg_groups/fields/disagg.py:55-58) with `--disaggregation-bootstrap-port B`
(:81-83, default 8998 "on the prefill server", so evalkit pins one per worker: two workers or two
cells on one host would share the default) and the transfer backend left at its default, mooncake
(:65-71; a role's args may give `--disaggregation-transfer-backend`); its `--nccl-port` is pinned
as for any launch (above). Workers are ready at `/health` and the router is `python -m
sglang_router.launch_router --pd-disaggregation --prefill URL --decode URL --host H --port P`, as
SGLang's own PD tests start them (test/server_fixtures/disaggregation_fixture.py:130-218; the
router reads each prefill's bootstrap port from the worker). One engine across nodes is
`--dist-init-addr HEAD:P --nnodes N --node-rank I` (fields/parallel.py:32-44); the ports derived
from P are the 24 kept for `--dist-init-addr` above.

The tree that runs: SGLang's repository keeps its package at `python/sglang/` (sgl-project/sglang:
python/pyproject.toml builds the wheel from `python/`, and python/sglang/launch_server.py is the
module above), so a worktree's `python/` goes on PYTHONPATH, not its root (where there is no
`sglang/` and the installed build would be imported instead). Started as `python -m
sglang.launch_server`, sglang/launch_server.py:71 (0.5.23 wheel) warns under `if __name__ ==
"__main__"`: `warnings.warn("'python -m sglang.launch_server' is still supported, but 'sglang
serve' is the recommended entrypoint. ...", UserWarning)`, printed as `<its path>:71: UserWarning:
...`: the path of the file that ran, the third witness of its tree. Its `/server_info` version is
the installed distribution's, which names no commit: the import path is the proof.
"""

from __future__ import annotations

import re
from types import MappingProxyType

from evalkit.config import EngineSettings
from evalkit.errors import ConfigError
from evalkit.profiles import Launch, MetricNames, Profile
from evalkit.profiles.isolation import InternalPort, Isolation
from evalkit.profiles.ran import RanAs
from evalkit.profiles.topology import PartContext, TopologySpelling
from evalkit.wire import FinishMap

SGLANG_SETTINGS = frozenset(
    {"tensor_parallel", "data_parallel", "dp_attention", "expert_parallel", "graph_mode", "max_num_seqs"}
)
GRAPH_BACKENDS: dict[str, tuple[str, str]] = {
    "eager": ("disabled", "disabled"),
    "NONE": ("disabled", "disabled"),
    "FULL_DECODE_ONLY": ("full", "disabled"),
    "FULL": ("full", "full"),
    "PIECEWISE": ("breakable", "breakable"),
    "FULL_AND_PIECEWISE": ("full", "breakable"),
}
"""evalkit graph mode -> (--cuda-graph-backend-decode, --cuda-graph-backend-prefill)."""
SERVER_ARGS = re.compile(r"server_args=\{")
CAPTURE = re.compile(r"Capture target (prefill|decode|verify) CUDA graph begin\. backend=(\w+)")
PREFILL_DROPPED = re.compile(r"Disable prefill CUDA graph")
MODE_OF_BACKENDS = {backends: mode for mode, backends in GRAPH_BACKENDS.items() if mode != "NONE"}
"""(decode, prefill) backends -> evalkit graph mode (no graphs: `eager`)."""
SGLANG_FINISH_REASONS: FinishMap = MappingProxyType({"stop": "stop", "length": "length", "abort": "aborted"})
"""SGLang 0.5.23's reasons: `CompletionResponseStreamChoice.finish_reason` is one of "stop", "length",
"content_filter", "abort" (entrypoints/openai/protocol.py:550), set from the scheduler's
FINISH_MATCHED_TOKEN / FINISH_MATCHED_STR ("stop"), FINISH_LENGTH ("length") and FINISH_ABORT
("abort"; managers/schedule_batch.py:284-345). An abort with an HTTP status never arrives as a
reason: it is a stream's error event (serving_completions.py:356-371). SGLang never sends
"content_filter"."""
SGLANG_FATAL_PATTERNS = (
    r"Scheduler hit an exception",
    r"RuntimeError: CUDA error",
    r"torch\.(?:cuda\.)?OutOfMemoryError",
    r"Memory access fault by GPU",
)
"""The scheduler's crash line (managers/scheduler.py:6372), CUDA faults, OOM."""
SGLANG_STARTUP_FILE = r"(?P<path>/[^\n]*?/sglang/launch_server\.py):\d+: UserWarning"
"""The `python -m sglang.launch_server` warning of sglang/launch_server.py:71 (0.5.23): the file that ran."""


def read_sglang_log(text: str) -> RanAs:
    """The graph mode SGLang ran, from its capture lines (module docstring); nothing without its
    `server_args=` line, because only a log known to be SGLang's says something by a missing line."""
    lines = [line.strip() for line in text.splitlines()]
    if not any(SERVER_ARGS.search(line) for line in lines):
        return RanAs()
    backends = {"prefill": "disabled", "decode": "disabled"}
    evidence = []
    for phase in backends:
        names = ("decode", "verify") if phase == "decode" else (phase,)
        captured = [(line, m.group(2)) for line in lines if (m := CAPTURE.search(line)) and m.group(1) in names]
        dropped = [line for line in lines if phase == "prefill" and PREFILL_DROPPED.search(line)]
        if captured:
            evidence.append(captured[-1][0])
            backends[phase] = captured[-1][1]
        else:
            evidence.append(dropped[-1] if dropped else f"no `Capture target {phase} CUDA graph begin` line: "
                            f"{phase} without graphs")
    pair = (backends["decode"], backends["prefill"])
    return RanAs(mode=MODE_OF_BACKENDS.get(pair, f"decode {pair[0]}, prefill {pair[1]}"), evidence=evidence)


def sglang_flags(settings: EngineSettings, launch: Launch) -> list[str]:
    """SGLang's flags for the logical settings."""
    flags = ["--model-path", launch.model, "--host", launch.host, "--port", str(launch.port),
             "--served-model-name", launch.served_name, "--enable-metrics"]
    if settings.tensor_parallel is not None:
        flags += ["--tp-size", str(settings.tensor_parallel)]
    if settings.dp_attention:
        width = settings.data_parallel or settings.tensor_parallel
        if width is None:
            raise ConfigError("profile sglang: dp_attention needs data_parallel or tensor_parallel (its width)")
        flags += ["--attn-dp-size", str(width)]
    elif settings.data_parallel is not None:
        flags += ["--dp-size", str(settings.data_parallel)]
    if settings.expert_parallel:
        if settings.tensor_parallel is None:
            raise ConfigError("profile sglang: expert_parallel needs tensor_parallel (the EP size)")
        flags += ["--ep-size", str(settings.tensor_parallel)]
    if settings.graph_mode is not None:
        decode, prefill = GRAPH_BACKENDS[settings.graph_mode]
        flags += ["--cuda-graph-backend-decode", decode, "--cuda-graph-backend-prefill", prefill]
    if settings.max_num_seqs is not None:
        flags += ["--max-running-requests", str(settings.max_num_seqs)]
    return flags


def sglang_worker_flags(ctx: PartContext) -> list[str]:
    """A PD worker's mode and bootstrap port (fields/disagg.py:55-83)."""
    return ["--disaggregation-mode", ctx.part.role, "--disaggregation-bootstrap-port", str(ctx.ports["bootstrap"])]


def sglang_rank_flags(ctx: PartContext) -> list[str]:
    """One node's rank (fields/parallel.py:32-44): every rank names rank 0's rendezvous."""
    assert ctx.master is not None, "a rank needs rank 0"
    return ["--dist-init-addr", f"{ctx.master.host}:{ctx.master.ports['master']}", "--nnodes", str(ctx.nnodes),
            "--node-rank", str(ctx.part.index)]


def sglang_router(ctx: PartContext) -> list[str]:
    """sglang_router's PD launch (disaggregation_fixture.py:205-217)."""
    argv = [ctx.python, "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    for peer in ctx.prefill:
        argv += ["--prefill", peer.url]
    for peer in ctx.decode:
        argv += ["--decode", peer.url]
    return argv + ["--host", ctx.host, "--port", str(ctx.port)]


SGLANG_TOPOLOGY = TopologySpelling(
    read_at="sglang 0.5.23 source",
    worker_flags=sglang_worker_flags,
    worker_ports=lambda part: {"bootstrap": 1},
    rank_flags=sglang_rank_flags,
    rank_ports={"master": 24},
    router=sglang_router,
)


PROFILE = Profile(
    name="sglang",
    entrypoint=("{python}", "-m", "sglang.launch_server"),
    flags=sglang_flags,
    health_path="/health_generate",
    fatal_patterns=SGLANG_FATAL_PATTERNS,
    read_log=read_sglang_log,
    supports_token_ids=False,
    return_token_ids=True,
    finish_reasons=SGLANG_FINISH_REASONS,
    settings_supported=SGLANG_SETTINGS,
    version_path="/server_info",
    metrics_path="/metrics",
    metric_names=MetricNames(
        generation_tokens="sglang:generation_tokens_total",
        tpot="sglang:request_time_per_output_token_seconds",
        requests="sglang:num_requests_total",
        spec_drafts="sglang:spec_verify_calls_total",
    ),
    isolation=Isolation(
        cache_env=("SGLANG_CACHE_DIR",), compile_env=("SGLANG_", "FLASHINFER_"),
        internal_ports=(InternalPort("--nccl-port"),
                        InternalPort("--dist-init-addr", "{host}:{port}", span=24,
                                     when=lambda settings: bool(settings.dp_attention))),
    ),
    builds_from_source=True,
    package="sglang",
    source_subdir="python",
    startup_file_pattern=SGLANG_STARTUP_FILE,
    topology=SGLANG_TOPOLOGY,
)
