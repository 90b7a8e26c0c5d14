"""ATOM (ROCm/ATOM): `python -m atom.entrypoints.openai_server`.

Flags as read from ROCm/ATOM at ffdf3bb5 (atom/model_engine/arg_utils.py, EngineArgs.add_cli_args;
atom/entrypoints/openai/api_server.py) and checked at the fix commit ccc861dc5:
`--server-port` is the HTTP port (`--port` is the internal engine port), `--host` defaults to
0.0.0.0 upstream so evalkit always passes one, DP attention is `--enable-dp-attention` on top of
`-tp N`, graph mode is `--cudagraph-mode {NONE,PIECEWISE,FULL,FULL_AND_PIECEWISE}` (default
FULL) or `--enforce-eager`. `--served-model-name` only exists since 5e491a90b (after the fix), so
it is passed only when the config asks for a served name other than the model.
ATOM's completions protocol drops `logprobs`, so the detector splits text instead of using ids.

The tree that runs: the package `atom` sits at the root of ROCm/ATOM (`atom/entrypoints/openai_server.py`
at 0e9804c21 and ccc861dc5, `git ls-tree`), so a worktree's root goes on PYTHONPATH. No start-up line
naming ATOM's own file is known, so the import path is the only proof of the tree.
"""

from __future__ import annotations

from evalkit.config import EngineSettings
from evalkit.profiles import Launch, Profile

ATOM_SETTINGS = frozenset(
    {"tensor_parallel", "data_parallel", "dp_attention", "expert_parallel", "graph_mode"}
)
ATOM_FATAL_PATTERNS = (
    r"stopped, reason", r"MEMORY_VIOLATION", r"ASSERT_TRAP", r"proc died unexpectedly", r"Memory access fault by GPU"
)
"""ATOM's own CI fault grep (scripts/wait_infer_drain.sh: FAULT_PATTERN)."""
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
    # ROCm: one variable only. ROCR_VISIBLE_DEVICES filters first and HIP_VISIBLE_DEVICES then
    # indexes into what is left, so setting both to the same ids would hide devices.
    visibility_env=("HIP_VISIBLE_DEVICES",),
    package="atom",
)
