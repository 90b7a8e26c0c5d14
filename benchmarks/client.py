"""Client-path benchmark: evalkit's GSM8K and streaming paths against a raw asyncio httpx loop.

The simulator runs in zero-latency mode, so any difference is client cost. Each pair sends the
same requests at the same concurrency, side by side in one run:

  (a) GSM8K: the exact prompts lm-eval builds (3-shot), raw httpx vs `evalkit.evals.gsm8k.run_gsm8k`
      (lm-eval's client, task building and scoring included);
  (b) long generations: the shipped prompt set streamed at max_tokens, raw httpx SSE vs
      `evalkit.evals.repetition.run_repetition` (streaming + detector, early abort off so both
      generate the same tokens).

    python benchmarks/client.py [--concurrency 32] [--prompts 64] [--max-tokens 4096]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalkit.config import GSM8KSettings, RepetitionSettings  # noqa: E402
from evalkit.evals import gsm8k, repetition  # noqa: E402
from evalkit.evals.prompts import load_prompt_set  # noqa: E402
from tests.conftest import running_sim  # noqa: E402


def lm_eval_prompts(settings: GSM8KSettings, task_dir: Path) -> tuple[list[str], list[str]]:
    """The prompts and stop strings lm-eval sends for this task file (built by lm-eval itself)."""
    from lm_eval.tasks import TaskManager

    task = TaskManager(include_path=str(task_dir), include_defaults=False).load([gsm8k.TASK_NAME])
    task = next(iter(task["tasks"].values())) if isinstance(task, dict) and "tasks" in task else next(iter(task.values()))
    task.build_all_requests(limit=None, rank=0, world_size=1)
    prompts = [inst.arguments[0] for inst in task.instances]
    return prompts, list(task.config.generation_kwargs["until"])


async def raw_completions(url: str, prompts: list[str], until: list[str], concurrency: int, max_tokens: int) -> tuple[float, int]:
    sem = asyncio.Semaphore(concurrency)
    tokens = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        async def one(prompt: str) -> None:
            nonlocal tokens
            async with sem:
                r = await client.post("/v1/completions", json={
                    "model": "bench", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                    "stop": until, "seed": 1234})
                tokens += r.json()["usage"]["completion_tokens"]

        t = time.perf_counter()
        await asyncio.gather(*(one(p) for p in prompts))
        return time.perf_counter() - t, tokens


async def raw_streams(url: str, prompts: list[str], concurrency: int, max_tokens: int) -> tuple[float, int]:
    sem = asyncio.Semaphore(concurrency)
    tokens = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        async def one(prompt: str) -> None:
            nonlocal tokens
            async with sem:
                body = {"model": "bench", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                        "stream": True, "logprobs": 1, "return_tokens_as_token_ids": True}
                async with client.stream("POST", "/v1/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: ") and line[6:] != "[DONE]":
                            for choice in json.loads(line[6:])["choices"]:
                                tokens += len((choice.get("logprobs") or {}).get("tokens") or [])

        t = time.perf_counter()
        await asyncio.gather(*(one(p) for p in prompts))
        return time.perf_counter() - t, tokens


def row(name: str, seconds: float, requests: int, tokens: int) -> tuple[float, float]:
    rps, tps = requests / seconds, tokens / seconds
    print(f"  {name:<34} {seconds:7.2f} s  {rps:8.1f} req/s  {tps:10.0f} tok/s")
    return rps, tps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=4096)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="evalkit-bench-"))
    settings = GSM8KSettings(num_fewshot=3, num_concurrent=args.concurrency)
    task_dir = tmp / "tasks"
    gsm8k.write_task_yaml(task_dir, settings)
    prompts, until = lm_eval_prompts(settings, task_dir)
    long_prompts = [p.prompt for p in load_prompt_set().prompts[: args.prompts]]
    rep = RepetitionSettings(count=args.prompts, max_tokens=args.max_tokens, concurrency=args.concurrency,
                             early_abort=False)
    with running_sim(tmp, served="bench") as url:
        asyncio.run(raw_completions(url, prompts[:64], until, args.concurrency, 256))  # warm both sides
        print(f"GSM8K: {len(prompts)} requests, concurrency {args.concurrency}, max_tokens 256")
        raw_s, raw_tok = asyncio.run(raw_completions(url, prompts, until, args.concurrency, 256))
        raw_rps, _ = row("raw asyncio httpx", raw_s, len(prompts), raw_tok)
        t = time.perf_counter()
        result = gsm8k.run_gsm8k(settings, url, "bench", task_dir, limit=None)
        ours_s = time.perf_counter() - t
        ours_tok = sum(r.get("completion_tokens") or 0 for r in result.samples)
        ours_rps, _ = row("evalkit run_gsm8k (lm-eval)", ours_s, len(result.samples), ours_tok)
        print(f"  ratio evalkit / raw: {ours_rps / raw_rps:.2f}")
        print(f"\nLong generations: {len(long_prompts)} streams, max_tokens {args.max_tokens}, token ids")
        raw_s, raw_tok = asyncio.run(raw_streams(url, long_prompts, args.concurrency, args.max_tokens))
        _, raw_tps = row("raw asyncio httpx SSE", raw_s, len(long_prompts), raw_tok)
        t = time.perf_counter()
        out = repetition.run_repetition(rep, url, "bench", token_ids=True)
        ours_s = time.perf_counter() - t
        ours_tok = sum(s["metrics"]["n_tokens"] for s in out.samples)
        _, ours_tps = row("evalkit run_repetition (+detector)", ours_s, len(out.samples), ours_tok)
        print(f"  ratio evalkit / raw: {ours_tps / raw_tps:.2f}")


if __name__ == "__main__":
    main()
