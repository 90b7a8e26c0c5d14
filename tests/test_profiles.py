"""Profiles pin every cell's argv for the shipped configs (ATOM flags read from ROCm/ATOM at
ffdf3bb5, atom/model_engine/arg_utils.py and atom/entrypoints/openai/api_server.py; checked at
the fix commit ccc861dc5)."""

from __future__ import annotations

import json

import pytest

from evalkit.config import load_config, parse_config
from evalkit.config.cells import expand
from evalkit.engine.catalog import parse_entry
from evalkit.engine.launch import build_launch
from evalkit.errors import ConfigError
from evalkit.profiles import PROFILES, get_profile
from tests.conftest import CONFIGS

ATOM_PREFIX = ["python3", "-m", "atom.entrypoints.openai_server", "--model", "deepseek-ai/DeepSeek-V4-Pro",
               "--host", "127.0.0.1", "--server-port", "8000"]
ATOM_GRAPH = {"full": ["--cudagraph-mode", "FULL"], "piecewise": ["--cudagraph-mode", "PIECEWISE"],
              "eager": ["--enforce-eager"]}
ATOM_PARALLEL = {"tp8": ["-tp", "8"], "dp8": ["-tp", "8", "--enable-dp-attention"]}


ATOM_CATALOG_AT_THE_FIX = json.dumps([{
    "model_name": "DeepSeek-V4-Pro", "model_path": "deepseek-ai/DeepSeek-V4-Pro",
    "extraArgs": "--kv_cache_dtype fp8 -tp 8 --hf-overrides '{\"use_index_cache\": true, \"index_topk_freq\": 4}'",
    "env_vars": "AITER_BF16_FP8_MOE_BOUND=0\nATOM_MOE_GU_ITLV=1", "runner": "linux-atom-do-mi350x-8",
    "test_level": "pr", "accuracy_threshold": 0.94, "accuracy_baseline": 0.96}])
"""The "DeepSeek-V4-Pro" entry of ATOM's .github/benchmark/models_accuracy.json at 0e9804c21 and
ccc861dc5 (the same at both; `_baseline_note` and `accuracy_baseline_model` left out)."""


@pytest.mark.parametrize("cell", expand(load_config(CONFIGS / "deepseek-v4.yaml")), ids=lambda c: c.id)
def test_deepseek_v4_atom_argv(cell) -> None:  # type: ignore[no-untyped-def]
    """The launch is ATOM's catalog entry at the cell's ref under the cell's axes (its -tp 8 the axes')."""
    config = load_config(CONFIGS / "deepseek-v4.yaml")
    entry = parse_entry(config, ATOM_CATALOG_AT_THE_FIX, "models_accuracy.json", "ccc861dc5", None)
    launch = build_launch(config, cell, 8000, catalog=entry)
    expected = (ATOM_PREFIX + ATOM_PARALLEL[cell.axes["parallel"]] + ATOM_GRAPH[cell.axes["graph"]]
                + ["--kv_cache_dtype", "fp8", "--hf-overrides", '{"use_index_cache": true, "index_topk_freq": 4}'])
    assert launch.argv == expected
    assert launch.env == {"AITER_BF16_FP8_MOE_BOUND": "0", "ATOM_MOE_GU_ITLV": "1", "PYTHONSAFEPATH": "1"}
    assert cell.source is not None and cell.source.ref == {"fixon": "ccc861dc5", "fixoff": "0e9804c21"}[cell.axes["fix"]]
    assert launch.health_path == "/health"


@pytest.mark.parametrize("cell", expand(load_config(CONFIGS / "demo.yaml")), ids=lambda c: c.id)
def test_demo_sim_argv_is_atom_flags_with_the_sim_entry_point(cell) -> None:  # type: ignore[no-untyped-def]
    config = load_config(CONFIGS / "demo.yaml")
    argv = build_launch(config, cell, 9000).argv
    assert argv[1:3] == ["-m", "evalkit.sim"]
    assert argv[3:11] == ["--model", "sim/deepseek-v4", "--host", "127.0.0.1", "--server-port", "9000",
                          "--served-model-name", "deepseek-v4-sim"]
    rest = argv[11:]
    assert rest[: len(ATOM_PARALLEL[cell.axes["parallel"]])] == ATOM_PARALLEL[cell.axes["parallel"]]
    assert ATOM_GRAPH[cell.axes["graph"]][0] in rest
    assert rest[-2:] == ["--sim-fix", cell.axes["fix"].removeprefix("fix")]


def test_command_profile_renders_template_without_a_shell() -> None:
    config = parse_config({
        "model": "/models/tiny", "served_name": "tiny",
        "engine": {"profile": "command", "command": ["my-server", "--listen={host}:{port}", "{model}", "--name", "{served_name}"]},
        "axes": {"conc": {"c1": {"args": ["--max-seqs", "1"]}}},
    }, "x")
    launch = build_launch(config, expand(config)[0], 1234)
    assert launch.argv == ["my-server", "--listen=127.0.0.1:1234", "/models/tiny", "--name", "tiny", "--max-seqs", "1"]


def test_profile_rejects_settings_it_cannot_express() -> None:
    config = parse_config({"model": "m", "engine": {"profile": "atom", "settings": {"max_num_seqs": 4}}}, "x")
    with pytest.raises(ConfigError, match="does not support setting.*max_num_seqs"):
        build_launch(config, expand(config)[0], 1)


def test_unknown_profile() -> None:
    config = parse_config({"model": "m", "engine": {"profile": "nope"}}, "x")
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        build_launch(config, expand(config)[0], 1)


def test_every_built_in_is_named_as_its_registry_entry() -> None:
    assert sorted(PROFILES) == ["atom", "command", "sglang", "sim", "sim-atom", "vllm"]
    for name in PROFILES:
        assert get_profile(name).name == name


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_only_the_simulator_is_simulated_and_needs_no_device_lock(name: str) -> None:
    """A real engine (and `command`, which may be anything) holds devices; the simulator, in either
    dialect, runs on the CPU."""
    profile = get_profile(name)
    simulator = name in ("sim", "sim-atom")
    assert profile.simulated == simulator
    assert profile.uses_devices == (not simulator)
