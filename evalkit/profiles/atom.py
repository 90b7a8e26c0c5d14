"""ATOM (ROCm/ATOM): `python -m atom.entrypoints.openai_server`.

Flags as read from ROCm/ATOM at ffdf3bb5 (atom/model_engine/arg_utils.py, EngineArgs.add_cli_args;
atom/entrypoints/openai/api_server.py) and checked at the fix commit ccc861dc5:
`--server-port` is the HTTP port (`--port` is the internal engine port), `--host` defaults to
0.0.0.0 upstream so evalkit always passes one, DP attention is `--enable-dp-attention` on top of
`-tp N`, graph mode is `--cudagraph-mode {NONE,PIECEWISE,FULL,FULL_AND_PIECEWISE}` (default
FULL) or `--enforce-eager`. `--served-model-name` only exists since 5e491a90b (after the fix), so
it is passed only when the config asks for a served name other than the model.
ATOM's completions protocol drops `logprobs`, so the detector splits text instead of using ids.

Finish reasons are ATOM's own (`ATOM_FINISH_REASONS`), and every completions stream ends with the
real last chunk, an extra empty chunk saying "stop", a usage-only chunk and `[DONE]`: the stream
reader keeps a choice's first reason (evals/repetition.py). ATOM's chat stream, unlike its
completions stream, sends no reason but a final "stop" (or "tool_calls";
atom/entrypoints/openai/serving_chat.py at 0e9804c21, `stream_chat_response`): through chat a cut
cannot be told from a natural end, so long generations on ATOM go through completions.
"""

from __future__ import annotations

from types import MappingProxyType

from evalkit.config import EngineSettings
from evalkit.profiles import Launch, Profile
from evalkit.wire import FinishMap

ATOM_SETTINGS = frozenset(
    {"tensor_parallel", "data_parallel", "dp_attention", "expert_parallel", "graph_mode"}
)
ATOM_FATAL_PATTERNS = (
    r"stopped, reason", r"MEMORY_VIOLATION", r"ASSERT_TRAP", r"proc died unexpectedly", r"Memory access fault by GPU"
)
"""ATOM's own CI fault grep (scripts/wait_infer_drain.sh: FAULT_PATTERN)."""
ATOM_FINISH_REASONS: FinishMap = MappingProxyType({
    "max_tokens": "length",
    "eos": "stop",
    "stop_sequence": "stop",
    r"stop_\d+": "stop",
    "aborted": "aborted",
    "stop": "stop",
})
"""ATOM's raw reasons -> evalkit's, read at 0e9804c21 and ccc861dc5 (unchanged between them):
atom/model_engine/scheduler.py sets `leave_reason` to "max_tokens" (:1499, the output reached
max_tokens), "eos" (:1481), "stop_sequence" (:1476, a stop string), f"stop_{token id}" (:1489, one of
the model's stop token ids) or "aborted" (:778 and :1449, the client went away); the response
carries it as `finish_reason` (atom/entrypoints/openai/api_server.py:342, serving_completion.py
`create_completion_chunk`). "stop" is the trailing empty chunk of every stream
(serving_completion.py, `stream_completion_response`) and the chat stream's only reason. A sequence
refused as `unschedulable: ...` (scheduler.py:794) maps to nothing: unknown, judged as cut."""
ATOM_MODE_PATTERN = r"cudagraph_mode=(?:CUDAGraphMode\.)?(?P<mode>[A-Z_]+)"
"""ATOM logs `Engine kwargs: {... CompilationConfig(... cudagraph_mode=CUDAGraphMode.X ...)}`."""


def atom_flags(settings: EngineSettings, launch: Launch) -> list[str]:
    """ATOM's flags for the logical settings; also the simulator's, which mimics ATOM."""
    flags = ["--model", launch.model, "--host", launch.host, "--server-port", str(launch.port)]
    if launch.served_name != launch.model:
        flags += ["--served-model-name", launch.served_name]
    if settings.tensor_parallel is not None:
        flags += ["-tp", str(settings.tensor_parallel)]
    if settings.data_parallel is not None:
        flags += ["-dp", str(settings.data_parallel)]
    if settings.dp_attention:
        flags.append("--enable-dp-attention")
    if settings.expert_parallel:
        flags.append("--enable-expert-parallel")
    if settings.graph_mode == "eager":
        flags.append("--enforce-eager")
    elif settings.graph_mode is not None:
        flags += ["--cudagraph-mode", settings.graph_mode]
    return flags


PROFILE = Profile(
    name="atom",
    entrypoint=("{python}", "-m", "atom.entrypoints.openai_server"),
    flags=atom_flags,
    health_path="/health",
    fatal_patterns=ATOM_FATAL_PATTERNS,
    effective_mode_pattern=ATOM_MODE_PATTERN,
    settings_supported=ATOM_SETTINGS,
    finish_reasons=ATOM_FINISH_REASONS,
    # ROCm: one variable only. ROCR_VISIBLE_DEVICES filters first and HIP_VISIBLE_DEVICES then
    # indexes into what is left, so setting both to the same ids would hide devices.
    visibility_env=("HIP_VISIBLE_DEVICES",),
)
