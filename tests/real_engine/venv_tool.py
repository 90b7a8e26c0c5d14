"""Run by the vLLM venv's python (not evalkit's): the engines' own code answers for them.

    python venv_tool.py vllm-parse   < [argv, ...]       vLLM's CLI parser on each argv
    python venv_tool.py sglang-parse < [argv, ...]       SGLang's parser (PYTHONPATH: sglang-parser)
    python venv_tool.py decode TOKENIZER_JSON < [[id, ...], ...]

Input is JSON on stdin; the answer is one JSON line after the marker `EVALKIT_RESULT ` on
stdout (the engines print banners and warnings of their own).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

VLLM_FIELDS = ("model", "host", "port", "served_model_name", "tensor_parallel_size", "data_parallel_size",
               "enable_expert_parallel", "enforce_eager", "max_num_seqs", "disable_custom_all_reduce",
               "enable_prefix_caching", "speculative_config", "max_model_len", "dtype", "trust_remote_code")
SGLANG_FIELDS = ("model_path", "host", "port", "served_model_name", "tp_size", "dp_size", "attn_dp_size", "ep_size",
                 "cuda_graph_backend_decode", "cuda_graph_backend_prefill", "max_running_requests",
                 "disable_custom_all_reduce", "disable_radix_cache", "radix_eviction_policy",
                 "speculative_algorithm", "speculative_num_steps", "trust_remote_code")


def _parse_all(parser: Any, argvs: list[list[str]], fields: tuple[str, ...]) -> list[dict[str, Any]]:
    results = []
    for argv in argvs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = parser.parse_args(argv)
        except SystemExit as e:  # argparse: unknown flag, bad choice
            results.append({"ok": False, "error": err.getvalue().strip().splitlines()[-1:] or [f"exit {e.code}"]})
            continue
        except Exception as e:  # noqa: BLE001 - vLLM validates JSON configs while parsing
            results.append({"ok": False, "error": [f"{type(e).__name__}: {e}"]})
            continue
        parsed = {f: getattr(ns, f, None) for f in fields}
        cc = getattr(ns, "compilation_config", None)
        if cc is not None:
            mode = cc.get("cudagraph_mode") if isinstance(cc, dict) else getattr(cc, "cudagraph_mode", None)
            parsed["cudagraph_mode"] = getattr(mode, "name", mode)
        results.append({"ok": True, "parsed": json.loads(json.dumps(parsed, default=str))})
    return results


def vllm_parse(argvs: list[list[str]]) -> list[dict[str, Any]]:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return _parse_all(make_arg_parser(FlexibleArgumentParser()), argvs, VLLM_FIELDS)


def sglang_parse(argvs: list[list[str]]) -> list[dict[str, Any]]:
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return _parse_all(parser, argvs, SGLANG_FIELDS)


def decode(tokenizer_json: str, sequences: list[list[int]]) -> list[str]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json)
    return [tok.decode(ids, skip_special_tokens=False) for ids in sequences]


def main() -> None:
    command = sys.argv[1]
    data = json.load(sys.stdin)
    if command == "vllm-parse":
        result: Any = vllm_parse(data)
    elif command == "sglang-parse":
        result = sglang_parse(data)
    elif command == "decode":
        result = decode(sys.argv[2], data)
    else:
        raise SystemExit(f"unknown command {command}")
    sys.stdout.write("\nEVALKIT_RESULT " + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
