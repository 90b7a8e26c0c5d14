"""What the engine's own log proves: the readers of ATOM's, vLLM's and SGLang's real start-up
lines (profiles/ran.py and each profile's reader), agreement with what a cell asked, and the
config's log assertions (config/schema.py `LogAssertion`, run/engine_log.py).

The ATOM `Engine kwargs` lines below are real: printed by ATOM's own `EngineArgs.add_cli_args`,
`from_cli_args` and `_get_engine_kwargs` (atom/model_engine/arg_utils.py) at ccc861dc5, torch and
aiter stubbed, with ATOM's logger format (atom/utils/__init__.py `getLogger`); 0e9804c21 prints
the same bytes for these argv. Each is `--model deepseek-ai/DeepSeek-V4-Pro --kv_cache_dtype fp8
-tp 8 --hf-overrides '{"use_index_cache": true, "index_topk_freq": 4}'` plus the flags named.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from evalkit.config import EngineSettings, LogAssertion, parse_config
from evalkit.errors import ConfigError, LogAssertionFailed
from evalkit.profiles.atom import read_atom_log
from evalkit.profiles.ran import RanAs, disagreements
from evalkit.profiles.sglang import read_sglang_log
from evalkit.profiles.vllm import read_vllm_log
from evalkit.run.engine_log import check_log, raise_if_broken
from evalkit.sim.startup import AtomRequest, engine_kwargs

KWARGS_FULL = (
    "[atom 01:12:02] Engine kwargs: {'trust_remote_code': False, 'tensor_parallel_size': 8, 'prefill_cont"
    "ext_parallel_size': 1, 'data_parallel_size': 1, 'enforce_eager': False, 'enable_prefix_caching': Tru"
    "e, 'port': 8006, 'kv_cache_dtype': 'fp8', 'max_model_len': None, 'max_num_batched_tokens': 16384, 'l"
    "ong_prefill_token_threshold': 0, 'attn_prefill_chunk_size': 16384, 'enable_chunked_prefill': True, '"
    "scheduler_delay_factor': 0.0, 'max_num_seqs': 512, 'gpu_memory_utilization': 0.9, 'load_dummy': Fals"
    "e, 'enable_expert_parallel': False, 'torch_profiler_dir': None, 'enable_dp_attention': False, 'kv_tr"
    "ansfer_config': '{}', 'mark_trace': False, 'online_quant_config': None, 'hf_overrides': {'use_index_"
    "cache': True, 'index_topk_freq': 4}, 'kv_cache_block_size': 16, 'compilation_config': CompilationCon"
    'fig(level=3, use_cudagraph=True, local_cache_dir=None, cudagraph_capture_sizes=[1, 2, 4, 8, 16, 32, '
    "48, 64, 128, 256, 512], cuda_graph_sizes=[512], debug_dump_path='', traced_files=set(), cache_dir=''"
    ', use_inductor=True, cudagraph_mode=<CUDAGraphMode.FULL: 2>, compilation_time=0.0, splitting_ops=Non'
    'e, cudagraph_copy_inputs=False, inductor_compile_config={}, compile_sizes=None, static_forward_conte'
    "xt={}), 'speculative_config': None, 'enable_tbo': False, 'enable_tbo_decode': False, 'enable_low_lat"
    "ency': False}"
)
"""`--cudagraph-mode FULL`."""
KWARGS_EAGER = (
    "[atom 01:12:02] Engine kwargs: {'trust_remote_code': False, 'tensor_parallel_size': 8, 'prefill_cont"
    "ext_parallel_size': 1, 'data_parallel_size': 1, 'enforce_eager': True, 'enable_prefix_caching': True"
    ", 'port': 8006, 'kv_cache_dtype': 'fp8', 'max_model_len': None, 'max_num_batched_tokens': 16384, 'lo"
    "ng_prefill_token_threshold': 0, 'attn_prefill_chunk_size': 16384, 'enable_chunked_prefill': True, 's"
    "cheduler_delay_factor': 0.0, 'max_num_seqs': 512, 'gpu_memory_utilization': 0.9, 'load_dummy': False"
    ", 'enable_expert_parallel': False, 'torch_profiler_dir': None, 'enable_dp_attention': False, 'kv_tra"
    "nsfer_config': '{}', 'mark_trace': False, 'online_quant_config': None, 'hf_overrides': {'use_index_c"
    "ache': True, 'index_topk_freq': 4}, 'kv_cache_block_size': 16, 'compilation_config': CompilationConf"
    'ig(level=3, use_cudagraph=True, local_cache_dir=None, cudagraph_capture_sizes=[1, 2, 4, 8, 16, 32, 4'
    "8, 64, 128, 256, 512], cuda_graph_sizes=[512], debug_dump_path='', traced_files=set(), cache_dir='',"
    ' use_inductor=True, cudagraph_mode=<CUDAGraphMode.FULL: 2>, compilation_time=0.0, splitting_ops=None'
    ', cudagraph_copy_inputs=False, inductor_compile_config={}, compile_sizes=None, static_forward_contex'
    "t={}), 'speculative_config': None, 'enable_tbo': False, 'enable_tbo_decode': False, 'enable_low_late"
    "ncy': False}"
)
"""`--enforce-eager`: cudagraph_mode still says FULL; only 'enforce_eager': True says eager."""
KWARGS_PIECEWISE_DPA = (
    "[atom 01:12:02] Engine kwargs: {'trust_remote_code': False, 'tensor_parallel_size': 8, 'prefill_cont"
    "ext_parallel_size': 1, 'data_parallel_size': 1, 'enforce_eager': False, 'enable_prefix_caching': Tru"
    "e, 'port': 8006, 'kv_cache_dtype': 'fp8', 'max_model_len': None, 'max_num_batched_tokens': 16384, 'l"
    "ong_prefill_token_threshold': 0, 'attn_prefill_chunk_size': 16384, 'enable_chunked_prefill': True, '"
    "scheduler_delay_factor': 0.0, 'max_num_seqs': 512, 'gpu_memory_utilization': 0.9, 'load_dummy': Fals"
    "e, 'enable_expert_parallel': False, 'torch_profiler_dir': None, 'enable_dp_attention': True, 'kv_tra"
    "nsfer_config': '{}', 'mark_trace': False, 'online_quant_config': None, 'hf_overrides': {'use_index_c"
    "ache': True, 'index_topk_freq': 4}, 'kv_cache_block_size': 16, 'compilation_config': CompilationConf"
    'ig(level=3, use_cudagraph=True, local_cache_dir=None, cudagraph_capture_sizes=[1, 2, 4, 8, 16, 32, 4'
    "8, 64, 128, 256, 512], cuda_graph_sizes=[512], debug_dump_path='', traced_files=set(), cache_dir='',"
    ' use_inductor=True, cudagraph_mode=<CUDAGraphMode.PIECEWISE: 1>, compilation_time=0.0, splitting_ops'
    '=None, cudagraph_copy_inputs=False, inductor_compile_config={}, compile_sizes=None, static_forward_c'
    "ontext={}), 'speculative_config': None, 'enable_tbo': False, 'enable_tbo_decode': False, 'enable_low"
    "_latency': False}"
)
"""`--cudagraph-mode PIECEWISE --enable-dp-attention`."""
DP_LINE = "[atom 01:12:09] Enable dp attention, using 8 data parallel ranks"
"""atom/model_engine/engine_core_mgr.py:37 (both refs)."""
PIECEWISE_LINE = ("[atom 01:14:40] PIECEWISE cudagraph: capturing per-piece graphs (attention eager); "
                  "manual FULL whole-forward capture disabled.")
"""atom/model_engine/model_runner.py:2426 (0e9804c21), :2463 (ccc861dc5)."""
FIX_LINE = ("[atom 01:14:40] PIECEWISE: forced aiter ca_comm (get_dp_group) to unreg copy-in capture path for "
            "cudagraph-safe DP collectives.")
"""atom/model_engine/model_runner.py:2454 (ccc861dc5 only; `%s` is the group getter)."""
CAPTURE_LINE = "[atom 01:15:02] Engine Core: cudagraph capture[512, 256, 128, 64, 48, 32, 16, 8, 4, 2, 1] cost: 21.47 seconds"
"""atom/model_engine/engine_core.py:140 (both refs), `{label}: cudagraph capture{bs} cost: {cap_cost:.2f} seconds`."""


def log(*lines: str) -> str:
    return "\n".join(lines) + "\n"


# -- ATOM ------------------------------------------------------------------------------------


def test_atom_full_cell_reads_full_and_tensor_parallel_8() -> None:
    ran = read_atom_log(log(KWARGS_FULL, CAPTURE_LINE))
    assert (ran.mode, ran.layout()) == ("FULL", {"tensor_parallel": 8, "data_parallel": 1, "dp_attention": False})
    assert ran.evidence == [KWARGS_FULL, CAPTURE_LINE]


def test_atom_enforce_eager_is_eager_although_cudagraph_mode_says_full() -> None:
    assert "cudagraph_mode=<CUDAGraphMode.FULL: 2>" in KWARGS_EAGER
    assert read_atom_log(log(KWARGS_EAGER)).mode == "eager"


def test_atom_piecewise_dp_attention_cell() -> None:
    ran = read_atom_log(log(KWARGS_PIECEWISE_DPA, DP_LINE, PIECEWISE_LINE, FIX_LINE, CAPTURE_LINE))
    assert ran.mode == "PIECEWISE"
    assert ran.layout() == {"tensor_parallel": 8, "data_parallel": 1, "dp_attention": True, "dp_attention_ranks": 8}
    assert ran.evidence == [KWARGS_PIECEWISE_DPA, PIECEWISE_LINE, DP_LINE]


def test_atom_piecewise_asked_but_captured_whole_forward_graphs_is_full() -> None:
    # No PIECEWISE capture line, yet a capture: the runner took its manual FULL path.
    assert read_atom_log(log(KWARGS_PIECEWISE_DPA, DP_LINE, CAPTURE_LINE)).mode == "FULL"


def test_atom_full_asked_but_per_piece_capture_is_piecewise() -> None:
    assert read_atom_log(log(KWARGS_FULL, PIECEWISE_LINE, CAPTURE_LINE)).mode == "PIECEWISE"


def test_atom_no_capture_before_serving_means_no_graphs() -> None:
    ran = read_atom_log(log(KWARGS_FULL))
    assert ran.mode == "NONE" and "no graphs captured" in ran.evidence[-1]


def test_atom_log_without_engine_kwargs_says_nothing() -> None:
    assert read_atom_log(log(DP_LINE, CAPTURE_LINE)) == RanAs()


def test_the_simulators_engine_kwargs_line_is_atoms_own() -> None:
    request = AtomRequest(tensor_parallel=8, data_parallel=1, enforce_eager=True, dp_attention=False,
                          expert_parallel=False, cudagraph_mode="FULL", level=3, port=8006, kv_cache_dtype="fp8",
                          max_model_len=None, gpu_memory_utilization=0.9, trust_remote_code=False)
    real = KWARGS_EAGER.split("] ", 1)[1].replace(
        "'hf_overrides': {'use_index_cache': True, 'index_topk_freq': 4}", "'hf_overrides': None")
    assert engine_kwargs(request) == real


# -- vLLM and SGLang -------------------------------------------------------------------------


def test_vllm_keeps_the_last_mode_line() -> None:
    # vllm 0.32.0: EngineCore's config dump (v1/engine/core.py:133), then a downgrade
    # (config/compilation.py:1407-1457).
    text = log("(EngineCore pid=1) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
               "compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}",
               "WARNING CUDAGraphMode.FULL_AND_PIECEWISE is not supported with FLASH_ATTN backend (support: "
               "UNIFORM_BATCH); setting cudagraph_mode=FULL_DECODE_ONLY")
    ran = read_vllm_log(text)
    assert ran.mode == "FULL_DECODE_ONLY" and ran.evidence == [text.splitlines()[1]]


SGLANG_ARGS = ("[2026-12-03 10:00:01] server_args={'model_path': 'm', 'cuda_graph_config': {'decode': "
               "{'backend': 'full'}, 'prefill': {'backend': 'breakable'}}, 'tp_size': 8}")
"""entrypoints/engine.py:1185 (sglang 0.5.23): the request, logged before the model loads."""
SGLANG_PREFILL = ("[2026-12-03 10:03:11 TP0] Capture target prefill CUDA graph begin. backend=breakable, "
                  "num_tokens=[4, 8, 16], avail mem=41.20 GB")
"""model_executor/model_runner_components/cuda_graph_setup.py:683-688 (0.5.23)."""
SGLANG_DECODE = ("[2026-12-03 10:03:40 TP0] Capture target decode CUDA graph begin. backend=full, "
                 "num_tokens_per_req=1, avail mem=39.80 GB")
"""cuda_graph_setup.py:755-761 (0.5.23)."""
SGLANG_PREFILL_DROPPED = ("[2026-12-03 10:03:11 TP0] Disable prefill CUDA graph because the current LoRA configuration "
                          "does not support it (unsupported LoRA backend, MoE LoRA without full or breakable capture, "
                          "or DP attention).")
"""cuda_graph_setup.py:545-549 (0.5.23)."""


def test_sglang_reads_what_was_captured_not_the_request() -> None:
    assert read_sglang_log(log(SGLANG_ARGS, SGLANG_PREFILL, SGLANG_DECODE)).mode == "FULL_AND_PIECEWISE"
    ran = read_sglang_log(log(SGLANG_ARGS, SGLANG_PREFILL_DROPPED, SGLANG_DECODE))
    assert ran.mode == "FULL_DECODE_ONLY" and SGLANG_PREFILL_DROPPED in ran.evidence


def test_sglang_without_a_decode_capture_line_ran_decode_without_graphs() -> None:
    ran = read_sglang_log(log(SGLANG_ARGS))
    assert ran.mode == "eager"
    assert read_sglang_log(log(SGLANG_PREFILL, SGLANG_DECODE)) == RanAs()  # not known to be SGLang's whole log


# -- agreement -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ran", "asked", "found"),
    [
        (RanAs(mode="PIECEWISE"), EngineSettings(graph_mode="PIECEWISE"), []),
        (RanAs(mode="FULL"), EngineSettings(graph_mode="PIECEWISE"), ["graph mode FULL, asked PIECEWISE"]),
        (RanAs(mode="NONE"), EngineSettings(graph_mode="eager"), []),  # vLLM logs NONE for --enforce-eager
        (RanAs(mode="eager", tensor_parallel=8), EngineSettings(), []),  # nothing asked, nothing to differ
        (RanAs(dp_attention=True), EngineSettings(tensor_parallel=8), ["DP attention on, asked off"]),
        (RanAs(tensor_parallel=4, dp_attention=False), EngineSettings(tensor_parallel=8, dp_attention=True),
         ["tensor parallel 4, asked 8", "DP attention off, asked on"]),
    ],
)
def test_disagreements(ran: RanAs, asked: EngineSettings, found: list[str]) -> None:
    assert disagreements(ran, asked) == found


# -- log assertions --------------------------------------------------------------------------


def test_must_appear_and_must_not_appear_against_a_log() -> None:
    text = log(KWARGS_PIECEWISE_DPA, PIECEWISE_LINE, FIX_LINE)
    checks = check_log(text, [("fix=fixon", LogAssertion(must_appear=r"forced aiter ca_comm \(\w+\)")),
                              ("fix=fixoff", LogAssertion(must_not_appear="forced aiter ca_comm"))])
    assert [(c.ok, c.line) for c in checks] == [(True, FIX_LINE), (False, FIX_LINE)]
    with pytest.raises(LogAssertionFailed, match=r"^engine log: fix=fixoff: must_not_appear 'forced aiter ca_comm' "
                                                 r"matches: \[atom"):
        raise_if_broken(checks, "")


CONFIG = """
model: m
engine:
  profile: sim
  log: [{must_appear: 'Engine kwargs'}]
axes:
  graph:
    full: {settings: {graph_mode: FULL}}
    piecewise: {settings: {graph_mode: PIECEWISE}}
  fix:
    fixon: {args: ["--sim-fix", "on"], log: [{must_appear: 'forced aiter', when: {graph: piecewise}}]}
"""


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("log: [{must_appear: 'Engine kwargs'}]", "log: [{must_appear: 'Engine (kwargs'}]",
         "c.yaml: engine.log[0].must_appear: not a regex (missing ), unterminated subpattern at position 7)"),
        ("log: [{must_appear: 'Engine kwargs'}]", "log: [{must_appear: a, must_not_appear: b}]",
         "c.yaml: engine.log[0]: set exactly one of must_appear, must_not_appear"),
        ("log: [{must_appear: 'Engine kwargs'}]", "log: [{must: a}]", "c.yaml: engine.log[0].must: unknown key"),
        ("when: {graph: piecewise}", "when: {graph: pw}",
         "c.yaml: axes.fix.fixon.log[0].when: graph='pw' is not a value of graph (full, piecewise)"),
        ("when: {graph: piecewise}", "when: {mode: piecewise}", "c.yaml: axes.fix.fixon.log[0].when: 'mode' is not an axis"),
    ],
)
def test_bad_log_assertions_are_one_line_naming_the_field(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in CONFIG
    with pytest.raises(ConfigError) as caught:
        parse_config(yaml.safe_load(CONFIG.replace(old, new)), tmp_path / "c.yaml")
    assert "\n" not in str(caught.value)
    assert message in str(caught.value)
