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
Effective mode: the resolved `server_args={...}` dump (entrypoints/engine.py:1185) holds
`'cuda_graph_config': {'decode': {'backend': ...}, 'prefill': {'backend': ...}}`; the
pattern reports the *prefill* backend (the piecewise switch that the bugs in REFERENCE.md
section 8 were about); the decode backend is in the same line of engine.log.
SGLang's completions take no `return_tokens_as_token_ids`, so the detector splits text.

What the engine reports: SGLang has no `/version`; `GET /server_info` (entrypoints/http_server.py:863;
`/get_server_info` is its deprecated alias) holds `"version": __version__`. `/metrics` exists only
with `--enable-metrics` (arg_groups/fields/observability.py:70), which this profile always passes:
`sglang:generation_tokens_total`, `sglang:num_requests_total` and the per-request TPOT histogram
`sglang:request_time_per_output_token_seconds` (observability/metrics_collector.py:1861, :1941,
:2058). Its speculative decoding figures are gauges of the most recent batch
(`sglang:spec_accept_rate`, `sglang:spec_accept_length`, :512-522), not counters, so no
per-eval acceptance can be computed from them: evalkit reports none for SGLang.

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

from evalkit.config import EngineSettings
from evalkit.errors import ConfigError
from evalkit.profiles import Launch, MetricNames, Profile

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
SGLANG_MODE_PATTERN = r"'prefill': \{'backend': '(?P<mode>full|breakable|disabled)'"
SGLANG_FATAL_PATTERNS = (
    r"Scheduler hit an exception",
    r"RuntimeError: CUDA error",
    r"torch\.(?:cuda\.)?OutOfMemoryError",
    r"Memory access fault by GPU",
)
"""The scheduler's crash line (managers/scheduler.py:6372), CUDA faults, OOM."""
SGLANG_STARTUP_FILE = r"(?P<path>/[^\n]*?/sglang/launch_server\.py):\d+: UserWarning"
"""The `python -m sglang.launch_server` warning of sglang/launch_server.py:71 (0.5.23): the file that ran."""


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


PROFILE = Profile(
    name="sglang",
    entrypoint=("{python}", "-m", "sglang.launch_server"),
    flags=sglang_flags,
    health_path="/health_generate",
    fatal_patterns=SGLANG_FATAL_PATTERNS,
    effective_mode_pattern=SGLANG_MODE_PATTERN,
    supports_token_ids=False,
    settings_supported=SGLANG_SETTINGS,
    version_path="/server_info",
    metrics_path="/metrics",
    metric_names=MetricNames(
        generation_tokens="sglang:generation_tokens_total",
        tpot="sglang:request_time_per_output_token_seconds",
        requests="sglang:num_requests_total",
    ),
    package="sglang",
    source_subdir="python",
    startup_file_pattern=SGLANG_STARTUP_FILE,
)
