"""ATOM's own start-up log lines, as the simulator prints them, so evalkit reads a simulated log
exactly as it reads ATOM's (profiles/atom.py `read_atom_log`, config `log:` assertions).

Each line is ATOM's, in ATOM's format: `[atom HH:MM:SS] message` on stderr (atom/utils/__init__.py
`getLogger`, fmt `[%(name)s %(asctime)s] %(message)s`, datefmt `%H:%M:%S`, at 0e9804c21 and
ccc861dc5), in the order ATOM logs them:

1. `Engine kwargs: {...}` (atom/model_engine/arg_utils.py:369): the request. Its text was produced
   by running ATOM's own `EngineArgs.add_cli_args`, `from_cli_args` and `_get_engine_kwargs` at
   both refs (with torch/aiter stubbed); the keys, their order and the `CompilationConfig` repr
   below are copied from that output (tests/test_atom_log.py quotes it).
2. `Enable dp attention, using N data parallel ranks` (engine_core_mgr.py:37), N = tp x dp.
3. After loading: `PIECEWISE cudagraph: capturing per-piece graphs ...` (model_runner.py
   `capture_cudagraph`) when the mode that runs needs piecewise compilation; then the fix's line
   (ccc861dc5 only) when the fix is in; then `Engine Core: cudagraph capture[...] cost: X seconds`
   (engine_core.py:140) unless no graphs run.

Lines 3 follow the mode the simulator really runs, which `--sim-ran-mode` can make differ from
the request, like an engine that downgrades: the request in line 1 stays what was asked.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

CUDAGRAPH_MODE_VALUES = {"NONE": "0", "PIECEWISE": "1", "FULL": "2", "FULL_DECODE_ONLY": "(2, 0)",
                         "FULL_AND_PIECEWISE": "(2, 1)"}
"""ATOM's `CUDAGraphMode` members and their values (atom/config.py at both refs), for the Enum repr."""
PIECEWISE_MODES = frozenset({"PIECEWISE", "FULL_AND_PIECEWISE"})
CAPTURE_SIZES = [512, 256, 128, 64, 48, 32, 16, 8, 4, 2, 1]
"""ATOM's default capture sizes as `capture_cudagraph` sorts them (largest first)."""
PIECEWISE_LINE = ("PIECEWISE cudagraph: capturing per-piece graphs (attention eager); "
                  "manual FULL whole-forward capture disabled.")
FIX_LINE = "PIECEWISE: forced aiter ca_comm ({}) to unreg copy-in capture path for cudagraph-safe DP collectives."
"""model_runner.py:2454 at ccc861dc5 (`%s` is the parallel-state getter of the group)."""


@dataclass(frozen=True)
class AtomRequest:
    """The ATOM flags the simulator took that its `Engine kwargs` line shows."""

    tensor_parallel: int
    data_parallel: int
    enforce_eager: bool
    dp_attention: bool
    expert_parallel: bool
    cudagraph_mode: str
    level: int
    port: int
    kv_cache_dtype: str
    max_model_len: int | None
    gpu_memory_utilization: float
    trust_remote_code: bool


def atom_line(message: str) -> None:
    """One line as ATOM's logger writes it."""
    print(f"[atom {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def engine_kwargs(request: AtomRequest) -> str:
    """ATOM's `Engine kwargs: {...}` message for these flags (ATOM's defaults elsewhere)."""
    mode = f"<CUDAGraphMode.{request.cudagraph_mode}: {CUDAGRAPH_MODE_VALUES[request.cudagraph_mode]}>"
    compilation = (
        f"CompilationConfig(level={request.level}, use_cudagraph=True, local_cache_dir=None, "
        f"cudagraph_capture_sizes={sorted(CAPTURE_SIZES)}, cuda_graph_sizes=[512], debug_dump_path='', "
        f"traced_files=set(), cache_dir='', use_inductor=True, cudagraph_mode={mode}, compilation_time=0.0, "
        "splitting_ops=None, cudagraph_copy_inputs=False, inductor_compile_config={}, compile_sizes=None, "
        "static_forward_context={})"
    )
    kwargs = {
        "trust_remote_code": request.trust_remote_code, "tensor_parallel_size": request.tensor_parallel,
        "prefill_context_parallel_size": 1, "data_parallel_size": request.data_parallel,
        "enforce_eager": request.enforce_eager, "enable_prefix_caching": True, "port": request.port,
        "kv_cache_dtype": request.kv_cache_dtype, "max_model_len": request.max_model_len,
        "max_num_batched_tokens": 16384, "long_prefill_token_threshold": 0, "attn_prefill_chunk_size": 16384,
        "enable_chunked_prefill": True, "scheduler_delay_factor": 0.0, "max_num_seqs": 512,
        "gpu_memory_utilization": request.gpu_memory_utilization, "load_dummy": False,
        "enable_expert_parallel": request.expert_parallel, "torch_profiler_dir": None,
        "enable_dp_attention": request.dp_attention, "kv_transfer_config": "{}", "mark_trace": False,
        "online_quant_config": None, "hf_overrides": None, "kv_cache_block_size": 16,
    }
    tail = "'speculative_config': None, 'enable_tbo': False, 'enable_tbo_decode': False, 'enable_low_latency': False"
    return f"Engine kwargs: {repr(kwargs)[:-1]}, 'compilation_config': {compilation}, {tail}}}"


def log_request(request: AtomRequest) -> None:
    """The lines ATOM logs before it loads: the request, then the DP-attention layout."""
    atom_line(engine_kwargs(request))
    if request.dp_attention:
        atom_line(f"Enable dp attention, using {request.tensor_parallel * request.data_parallel} data parallel ranks")


def log_capture(request: AtomRequest, ran_mode: str, fix: bool, capture_seconds: float) -> None:
    """The lines ATOM logs while capturing graphs in `ran_mode` (`NONE`: none at all).

    The fix logs once per aiter custom-all-reduce communicator it switches; the simulator names
    the group that has more than one rank (the DP group under DP attention, where each engine core
    has TP 1, else the TP group) and logs nothing for a single rank, which has no such communicator."""
    if ran_mode == "NONE":
        return
    if ran_mode in PIECEWISE_MODES:
        atom_line(PIECEWISE_LINE)
        world = request.tensor_parallel * request.data_parallel
        if fix and world > 1:
            atom_line(FIX_LINE.format("get_dp_group" if request.dp_attention else "get_tp_group"))
    atom_line(f"Engine Core: cudagraph capture{CAPTURE_SIZES} cost: {capture_seconds:.2f} seconds")
