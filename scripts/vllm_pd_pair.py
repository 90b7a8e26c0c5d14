"""Does a vLLM prefill/decode pair answer as one instance does? By hand, on vLLM's CPU build.

    .evalkit-cache/real-engine/vllm-venv/bin/python scripts/vllm_pd_pair.py --out DIR

Run with the vLLM venv's python (it reads the stored KV with its safetensors and torch). It starts,
one phase after the other and never more than two servers at once, each bound to 127.0.0.1:

1. one instance (no connector), every prompt sent once, greedy, one at a time;
2. a prefill instance and a decode instance sharing a fresh folder through vLLM's
   `ExampleConnector` (the reference connector that needs no GPU: it writes a prompt's KV per
   layer to `<folder>/<hash of the prompt's tokens>/` and a later request whose prompt hashes to
   a folder there loads it, distributed/kv_transfer/kv_connector/v1/example_connector.py in the
   0.32.0 wheel). Each prompt goes to the prefill instance with `max_tokens` 1, then whole to the
   decode instance, as vLLM's disaggregated-prefill examples drive a pair. A few prompts kept
   for the control have their stored KV overwritten with noise between the two requests: if the
   decode instance really reads the KV it is handed, their answers change.

Then it compares the decode instance's answers with the single instance's text for text and counts
the decode log's `Inject KV cache of N tokens` lines (example_connector.py:171-174), so that an
equality is not vacuous: the connector hands over only whole blocks of the prompt and the CPU
build's default block is 128 tokens, so `--block-size 32` is asked for (the smallest it takes:
its attention kernel wants a multiple of 32, v1/attention/backends/cpu_attn.py:65-66, and 16 fails
at start-up with `No common block size for 16`, v1/worker/utils.py:554-556). A prompt the decode
instance finds in its own prefix cache (on by default) loads nothing: prompts that share a long
prefix (few-shot ones) hand over only some of the time. `DIR/summary.json` has the figures,
`DIR/*.log` each server's log, `DIR/answers.jsonl` every answer. Exit 0 when every main prompt's
answer is equal, every control prompt's differs and KV was injected, 1 otherwise, 2 when a server
did not start.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / ".evalkit-cache" / "real-engine"
INJECT = re.compile(r"Inject KV cache of (\d+) tokens to the paged memory")
HIT = "External Cache Hit!"
STOP = ["Question:", "</s>", "<|im_end|>"]
"""lm-eval's gsm8k `until`, so the answers are the ones its task would score."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(url: str, body: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


@contextmanager
def server(args: argparse.Namespace, name: str, out: Path, extra: list[str], env: dict[str, str]) -> Iterator[str]:
    """One vLLM API server, its log in `out/NAME.log`; its whole process group killed after the block."""
    port = free_port()
    argv = [args.python, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model, "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", args.served_name, "--enforce-eager", "--dtype", "float32",
            "--max-model-len", "1024", "--block-size", str(args.block_size), *extra]
    log = (out / f"{name}.log").open("w")
    print(f"[{time.strftime('%H:%M:%S')}] start {name}: {' '.join(argv)}", flush=True)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", **env})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + args.start_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: see {out / name}.log")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {args.start_timeout} s: see {out / name}.log")
            time.sleep(2)
        print(f"[{time.strftime('%H:%M:%S')}] {name} ready on {url}", flush=True)
        yield url
    finally:
        with _quiet():
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with _quiet():
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()


@contextmanager
def _quiet() -> Iterator[None]:
    try:
        yield
    except ProcessLookupError:
        pass


def completion(url: str, args: argparse.Namespace, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = {"model": args.served_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stop": STOP}
    return post(f"{url}/v1/completions", body)


SETS = ("answers", "answers3shot", "gsm8k")


def prompts(args: argparse.Namespace) -> list[dict[str, Any]]:
    """`--count` questions of each set in lm-eval's gsm8k prompt, then `--control` more of the last.

    `answers`: the model's own test questions, zero-shot (24 tokens each with its tokenizer);
    `answers3shot`: the same after three of its training problems (lm-eval's few-shot layout);
    `gsm8k`: GSM8K's test questions, zero-shot (72 to 510 tokens; the model cannot answer them)."""
    data = Path(args.model) / "data"
    shots = [json.loads(line) for line in (data / "train.jsonl").read_text(encoding="utf-8").splitlines()[:3]]
    prefix = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
    sets = {"answers": (data / "test.jsonl", ""), "answers3shot": (data / "test.jsonl", prefix),
            "gsm8k": (ROOT / "evalkit" / "data" / "gsm8k" / "test.jsonl", "")}
    out: list[dict[str, Any]] = []
    for name, (path, head) in sets.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        take = args.count + (args.control if name == SETS[-1] else 0)
        for i, line in enumerate(lines[:take]):
            row = json.loads(line)
            out.append({"set": name, "index": i, "control": i >= args.count, "target": row["answer"].split("####")[-1].strip(),
                        "prompt": f"{head}Question: {row['question']}\nAnswer:"})
    return out


def right(text: str, target: str) -> bool:
    found = re.findall(r"#### (-?[0-9.,]+)", text)
    return bool(found) and found[0].replace(",", "").rstrip(".") == target.replace(",", "")


def corrupt(folder: Path) -> int:
    """Overwrite every stored layer's KV in `folder` with noise of its scale; the files rewritten."""
    import safetensors.torch
    import torch

    gen = torch.Generator().manual_seed(0)
    files = sorted(folder.glob("*.safetensors"))
    for path in files:
        kv = safetensors.torch.load_file(str(path))["kv_cache"]
        noise = torch.randn(kv.shape, generator=gen, dtype=kv.dtype) * kv.float().std().to(kv.dtype)
        safetensors.torch.save_file({"kv_cache": noise.contiguous()}, str(path))
    return len(files)


def expected_injected(prompt_tokens: int, block_size: int) -> int:
    """The tokens the decode instance should load for a prompt of `prompt_tokens`: the prefill
    instance stores the prompt's first `align(n)` tokens and the decode instance looks for its
    first `align(n - 1)` (example_connector.py:50-51, :296-297, :408-416; `align(n)` is
    `(n - 1) // block * block`, :455-457), so they meet only when both are equal and above 0."""
    stored = (prompt_tokens - 1) // block_size * block_size
    looked_for = (prompt_tokens - 2) // block_size * block_size
    return looked_for if looked_for == stored and looked_for > 0 else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--python", default=str(REAL / "vllm-venv" / "bin" / "python"))
    parser.add_argument("--model", default=str((REAL / "answers-model").resolve()))
    parser.add_argument("--served-name", default="answers-llama")
    parser.add_argument("--count", type=int, default=50, help="questions of each set (the model's own, GSM8K's)")
    parser.add_argument("--control", type=int, default=5, help="more GSM8K questions whose stored KV is noised")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=32,
                        help="32: the smallest the CPU build takes (its attention kernel wants a multiple of 32)")
    parser.add_argument("--start-timeout", type=float, default=900)
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    todo = prompts(args)
    started = time.monotonic()
    try:
        with server(args, "single", out, [], {}) as url:
            single = [completion(url, args, p["prompt"], args.max_tokens) for p in todo]
        single_s = time.monotonic() - started
        store = Path(tempfile.mkdtemp(prefix="pd-vllm-kv-"))
        kv = {"kv_connector": "ExampleConnector", "kv_connector_extra_config": {"shared_storage_path": str(store)}}
        decoded: list[dict[str, Any]] = []
        noised: list[int] = []
        with (server(args, "prefill", out, ["--kv-transfer-config", json.dumps({**kv, "kv_role": "kv_producer"})],
                     {"VLLM_CPU_OMP_THREADS_BIND": "0"}) as prefill,
              server(args, "decode", out, ["--kv-transfer-config", json.dumps({**kv, "kv_role": "kv_consumer"})],
                     {"VLLM_CPU_OMP_THREADS_BIND": "1"}) as decode):
            t_pair = time.monotonic()
            for p in todo:
                before = set(store.iterdir())
                completion(prefill, args, p["prompt"], 1)
                new = sorted(set(store.iterdir()) - before)
                if p["control"]:
                    noised.append(sum(corrupt(folder) for folder in new))
                decoded.append(completion(decode, args, p["prompt"], args.max_tokens))
            pair_s = time.monotonic() - t_pair
        folders = len(list(store.iterdir()))
        shutil.rmtree(store, ignore_errors=True)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    decode_log = (out / "decode.log").read_text(errors="replace")
    prefill_log = (out / "prefill.log").read_text(errors="replace")
    injected = [int(n) for n in INJECT.findall(decode_log)]
    rows = []
    for p, one, two in zip(todo, single, decoded, strict=True):
        rows.append({**p, "single": one["choices"][0]["text"], "pair": two["choices"][0]["text"],
                     "prompt_tokens": one["usage"]["prompt_tokens"], "equal": one["choices"][0]["text"] == two["choices"][0]["text"],
                     "expected_injected": expected_injected(one["usage"]["prompt_tokens"], args.block_size)})
    with (out / "answers.jsonl").open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    main_rows = [r for r in rows if not r["control"]]
    control = [r for r in rows if r["control"]]
    summary: dict[str, Any] = {
        "block_size": args.block_size, "max_tokens": args.max_tokens,
        "main_prompts": len(main_rows), "main_equal": sum(r["equal"] for r in main_rows),
        "by_set": {s: {"prompts": len(rs), "equal": sum(r["equal"] for r in rs),
                       "prompt_tokens": sum(r["prompt_tokens"] for r in rs),
                       "expected_injected_tokens": sum(r["expected_injected"] for r in rs),
                       "prompts_expected_to_inject": sum(r["expected_injected"] > 0 for r in rs),
                       "right_single": sum(right(r["single"], r["target"]) for r in rs),
                       "right_pair": sum(right(r["pair"], r["target"]) for r in rs)}
                   for s in SETS for rs in [[r for r in main_rows if r["set"] == s]]},
        "control_prompts": len(control), "control_equal": sum(r["equal"] for r in control),
        "control_files_noised": noised,
        "decode_inject_lines": len(injected), "decode_injected_tokens": sum(injected),
        "decode_tokens_expected_without_prefix_cache": sum(r["expected_injected"] for r in rows),
        "decode_cache_hits": decode_log.count(HIT),
        "prefill_inject_lines": len(INJECT.findall(prefill_log)),
        "store_folders": folders, "single_phase_s": round(single_s, 1), "pair_requests_s": round(pair_s, 1),
        "unequal_main": [{k: r[k] for k in ("set", "index", "single", "pair")} for r in main_rows if not r["equal"]],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    ok = summary["main_equal"] == len(main_rows) and summary["control_equal"] == 0 and bool(injected)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
