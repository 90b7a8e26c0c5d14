"""Client-path benchmark: evalkit's GSM8K and streaming paths against raw asyncio loops.

The simulator runs in zero-latency mode, so any difference is client cost. Each path sends the
same requests at the same concurrency, side by side in one run, ``--rounds`` times interleaved
(the median is printed, the box is shared):

  (a) GSM8K: the exact prompts lm-eval builds (3-shot), a raw httpx loop, a raw aiohttp loop
      (the HTTP library lm-eval's client uses), and `evalkit.evals.gsm8k.run_gsm8k` (lm-eval's
      client, task building and scoring included);
  (b) long generations: the shipped prompt set streamed at max_tokens with token ids, a raw
      httpx SSE loop vs `evalkit.evals.repetition.run_repetition` (streaming + detector, early
      abort off so both generate the same tokens).

Besides wall time it prints the CPU seconds of the client (this process) and of the simulator
for each path: when the simulator's CPU is the bottleneck both wall times meet, and the
client's CPU is then what shows evalkit's own cost.

    python benchmarks/client.py [--concurrency 32] [--prompts 64] [--max-tokens 4096] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalkit.engine import EngineProcess, free_port  # noqa: E402
from evalkit.evals import gsm8k, repetition  # noqa: E402
from evalkit.evals.base import EvalContext, Server  # noqa: E402
from evalkit.evals.gsm8k import GSM8KSettings  # noqa: E402
from evalkit.evals.lm_eval_adapter import TASK_DIR  # noqa: E402
from evalkit.evals.prompts import load_prompt_set  # noqa: E402
from evalkit.evals.repetition import RepetitionSettings  # noqa: E402
from evalkit.wire import Wire

SERVED = "bench"


def lm_eval_prompts(task_dir: Path) -> tuple[list[str], list[str]]:
    """The prompts and stop strings lm-eval sends for this task file (built by lm-eval itself)."""
    from lm_eval.tasks import TaskManager

    loaded = TaskManager(include_path=str(task_dir), include_defaults=False).load([gsm8k.TASK_NAME])
    task = next(iter(loaded["tasks"].values())) if "tasks" in loaded else next(iter(loaded.values()))
    task.build_all_requests(limit=None, rank=0, world_size=1)
    return [inst.arguments[0] for inst in task.instances], list(task.config.generation_kwargs["until"])


def _httpx_client(url: str, concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(base_url=url, timeout=300, limits=limits)


async def _bounded(concurrency: int, jobs: list[Callable[[], object]]) -> None:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], object]) -> None:
        async with semaphore:
            await job()  # type: ignore[misc]

    await asyncio.gather(*(one(job) for job in jobs))


def _completion_body(prompt: str, until: list[str]) -> dict[str, object]:
    return {"model": SERVED, "prompt": prompt, "max_tokens": 256, "temperature": 0, "stop": until, "seed": 1234}


async def raw_httpx_completions(url: str, prompts: list[str], until: list[str], concurrency: int) -> int:
    tokens = 0
    async with _httpx_client(url, concurrency) as client:

        async def one(prompt: str) -> None:
            nonlocal tokens
            r = await client.post("/v1/completions", json=_completion_body(prompt, until))
            tokens += r.json()["usage"]["completion_tokens"]

        await _bounded(concurrency, [lambda p=p: one(p) for p in prompts])
    return tokens


async def raw_aiohttp_completions(url: str, prompts: list[str], until: list[str], concurrency: int) -> int:
    tokens = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(base_url=url, connector=connector) as session:

        async def one(prompt: str) -> None:
            nonlocal tokens
            async with session.post("/v1/completions", json=_completion_body(prompt, until)) as r:
                tokens += (await r.json())["usage"]["completion_tokens"]

        await _bounded(concurrency, [lambda p=p: one(p) for p in prompts])
    return tokens


async def raw_httpx_streams(url: str, prompts: list[str], concurrency: int, max_tokens: int) -> int:
    tokens = 0
    async with _httpx_client(url, concurrency) as client:

        async def one(prompt: str) -> None:
            nonlocal tokens
            body = {"model": SERVED, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                    "stream": True, "logprobs": 1, "return_tokens_as_token_ids": True}
            async with client.stream("POST", "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: ") and line[6:] != "[DONE]":
                        for choice in json.loads(line[6:])["choices"]:
                            tokens += len((choice.get("logprobs") or {}).get("tokens") or [])

        await _bounded(concurrency, [lambda p=p: one(p) for p in prompts])
    return tokens


async def raw_aiohttp_streams(url: str, prompts: list[str], concurrency: int, max_tokens: int) -> int:
    tokens = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(base_url=url, connector=connector) as session:

        async def one(prompt: str) -> None:
            nonlocal tokens
            body = {"model": SERVED, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                    "stream": True, "logprobs": 1, "return_tokens_as_token_ids": True}
            async with session.post("/v1/completions", json=body) as r:
                async for line in r.content:
                    if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                        for choice in json.loads(line[6:])["choices"]:
                            tokens += len((choice.get("logprobs") or {}).get("tokens") or [])

        await _bounded(concurrency, [lambda p=p: one(p) for p in prompts])
    return tokens


@dataclass
class Run:
    wall: float
    client_cpu: float
    server_cpu: float
    requests: int
    tokens: int


def measure(server: psutil.Process, requests: int, work: Callable[[], int]) -> Run:
    """Run ``work`` (returns tokens) and time it: wall, this process's CPU, the server's CPU."""
    server_before = sum(server.cpu_times()[:2])
    cpu, wall = time.process_time(), time.perf_counter()
    tokens = work()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return Run(wall, cpu, sum(server.cpu_times()[:2]) - server_before, requests, tokens)


def report(name: str, runs: list[Run]) -> Run:
    """Print the median run of a path (by wall time) and return it."""
    run = sorted(runs, key=lambda r: r.wall)[len(runs) // 2]
    print(f"  {name:<36} {run.wall:6.2f} s  {run.requests / run.wall:7.1f} req/s  {run.tokens / run.wall:8.0f} tok/s"
          f"   client CPU {run.client_cpu:5.2f} s  server CPU {run.server_cpu:5.2f} s")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    c = args.concurrency
    tmp = Path(tempfile.mkdtemp(prefix="evalkit-bench-"))
    settings = GSM8KSettings(num_fewshot=3, num_concurrent=c)
    task_dir = tmp / TASK_DIR
    gsm8k.write_task_yaml(task_dir, settings)
    prompts, until = lm_eval_prompts(task_dir)
    long_prompts = [p.prompt for p in load_prompt_set().prompts[: args.prompts]]
    rep = RepetitionSettings(count=args.prompts, max_tokens=args.max_tokens, concurrency=c, early_abort=False)

    def evalkit_gsm8k() -> int:
        result = gsm8k.run_gsm8k(settings, EvalContext(Server(url, SERVED), tmp, tmp))
        return sum(r.get("completion_tokens") or 0 for r in result.samples)

    def evalkit_streams() -> int:
        return sum(s["metrics"]["n_tokens"] for s in repetition.run_repetition(rep, Server(url, SERVED, Wire(token_ids="return_tokens_as_token_ids"))).samples)

    gsm8k_paths: dict[str, Callable[[], int]] = {
        "raw asyncio httpx": lambda: asyncio.run(raw_httpx_completions(url, prompts, until, c)),
        "raw asyncio aiohttp": lambda: asyncio.run(raw_aiohttp_completions(url, prompts, until, c)),
        "evalkit run_gsm8k (lm-eval)": evalkit_gsm8k,
    }
    stream_paths: dict[str, Callable[[], int]] = {
        "raw asyncio httpx SSE": lambda: asyncio.run(raw_httpx_streams(url, long_prompts, c, args.max_tokens)),
        "raw asyncio aiohttp SSE": lambda: asyncio.run(raw_aiohttp_streams(url, long_prompts, c, args.max_tokens)),
        "evalkit run_repetition (+detector)": evalkit_streams,
    }
    gsm8k_title = f"GSM8K: {len(prompts)} requests, concurrency {c}, max_tokens 256"
    with running_sim(tmp, COALESCED) as (url, server):
        asyncio.run(raw_httpx_completions(url, prompts[:64], until, c))  # warm both sides
        compare(gsm8k_title, gsm8k_paths, len(prompts), server, args.rounds)
    for interval in (COALESCED, 1):
        with running_sim(tmp, interval) as (url, server):
            compare(f"Long generations: {len(long_prompts)} streams, concurrency {c}, max_tokens {args.max_tokens}, "
                    f"token ids, {interval} token(s) per event", stream_paths, len(long_prompts), server, args.rounds)


COALESCED = 16
"""The simulator's tokens per event when unpaced; real engines default to 1 (--stream-interval)."""


@contextlib.contextmanager
def running_sim(tmp: Path, stream_interval: int) -> Iterator[tuple[str, psutil.Process]]:
    """The simulator in zero-latency mode, started by evalkit's EngineProcess: (URL, process)."""
    port = free_port()
    argv = [sys.executable, "-m", "evalkit.sim", "--model", SERVED, "--server-port", str(port),
            "--sim-stream-interval", str(stream_interval)]
    engine = EngineProcess(argv=argv, env=dict(os.environ), log_path=tmp / "sim.log",
                           base_url=f"http://127.0.0.1:{port}", served_name=SERVED, stop_grace_s=5)
    with engine:
        engine.wait_ready(timeout_s=60)
        assert engine.pid is not None
        yield engine.base_url, psutil.Process(engine.pid)


def compare(title: str, paths: dict[str, Callable[[], int]], requests: int, server: psutil.Process, rounds: int) -> None:
    """Run every path ``rounds`` times, interleaved; print the medians and evalkit's ratios."""
    runs: dict[str, list[Run]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, work in paths.items():
            runs[name].append(measure(server, requests, work))
    print(f"\n{title} (median of {rounds} rounds)")
    chosen = {name: report(name, r) for name, r in runs.items()}
    *references, evalkit = chosen
    for name in references:
        ref, ours = chosen[name], chosen[evalkit]
        print(f"  evalkit / {name}: throughput {ref.wall / ours.wall:.2f}x, "
              f"client CPU per token {ours.client_cpu / ours.tokens / (ref.client_cpu / ref.tokens):.2f}x")

if __name__ == "__main__":
    main()
