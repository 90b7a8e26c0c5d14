"""ATOM (ROCm/ATOM): `python -m atom.entrypoints.openai_server`.

Flags as read from ROCm/ATOM at ffdf3bb5 (atom/model_engine/arg_utils.py, EngineArgs.add_cli_args;
atom/entrypoints/openai/api_server.py) and checked at the fix commit ccc861dc5:
`--server-port` is the HTTP port (`--port` is the internal engine port), `--host` defaults to
0.0.0.0 upstream so evalkit always passes one, DP attention is `--enable-dp-attention` on top of
`-tp N`, graph mode is `--cudagraph-mode {NONE,PIECEWISE,FULL,FULL_AND_PIECEWISE}` (default
FULL) or `--enforce-eager`. `--served-model-name` only exists since 5e491a90b (after the fix), so
it is passed only when the config asks for a served name other than the model.
ATOM's completions protocol drops `logprobs`, so the detector splits text instead of using ids.

Caches and internal ports (`isolation`; engine/isolation.py does the work), read at 0e9804c21 and
ccc861dc5 (and HEAD ffdf3bb5):
- the torch.compile cache is `~/.cache/atom` (atom/utils/backends.py:475, a plain
  `os.path.expanduser`, so no variable moves it but HOME), keyed without `cudagraph_mode`
  (atom/config.py:222-240, CompilationConfig.compute_hash); ATOM's CI empties it before every
  launch (.github/scripts/atom_test.sh:52). evalkit does the same (unless `engine.fresh_cache:
  false`) and never runs two ATOM cells side by side while it does;
- `--port` (default 8006, atom/model_engine/arg_utils.py:112-116) becomes MASTER_PORT
  (atom/model_engine/model_runner.py:832): each launch gets its own from evalkit's port book;
- with more than one DP rank (`-dp N`, or `--enable-dp-attention`, which makes every TP rank a DP
  rank: atom/model_engine/engine_core_mgr.py:33-40) each engine core joins a gloo group on
  `data_parallel_master_port`, 29500 (atom/config.py:761, engine_core.py:504). No flag sets it,
  and `ATOM_DP_MASTER_PORT` (atom/utils/envs.py:30) is read only since e9688b1af (HEAD's
  atom/config.py:910; at the refs the line is commented out, config.py:843-844): two DP cells
  never run side by side.

No setup step is needed: ATOM is pure Python at these refs (torch, aiter and friends must be
installed for `engine.python`).
"""

from __future__ import annotations

from evalkit.config import EngineSettings
from evalkit.profiles import Launch, Profile
from evalkit.profiles.isolation import FixedPort, InternalPort, Isolation, data_parallel

ATOM_SETTINGS = frozenset(
    {"tensor_parallel", "data_parallel", "dp_attention", "expert_parallel", "graph_mode"}
)
ATOM_FATAL_PATTERNS = (
    r"stopped, reason", r"MEMORY_VIOLATION", r"ASSERT_TRAP", r"proc died unexpectedly", r"Memory access fault by GPU"
)
"""ATOM's own CI fault grep (scripts/wait_infer_drain.sh: FAULT_PATTERN)."""
ATOM_ISOLATION = Isolation(
    fixed_cache_dirs=("~/.cache/atom",),
    internal_ports=(InternalPort("--port"),),
    fixed_ports=(FixedPort(29500, "ATOM's DP master port, atom/config.py:761 at 0e9804c21, set by no flag",
                           when=data_parallel),),
)
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
    isolation=ATOM_ISOLATION,
)
