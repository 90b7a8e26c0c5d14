"""Throughput of evalkit's simulated engine (``python -m evalkit.sim``), measured over HTTP.

Prints requests/s for short GSM8K-style completions (5-shot-sized prompts, max_tokens 256,
stop "Question:", as lm-eval sends them) at concurrency 16 and 64, and tokens/s for one
streamed 4096-token generation. The client (httpx, asyncio) runs on the same machine and
shares its CPUs, so wall-clock figures are a lower bound of the server's speed; the server's
own CPU time per request (from /proc) gives its capacity on one core. The server runs with
``--sim-natural-loop-rate 1`` so that the long generation runs to max_tokens (GSM8K answers
never loop).

    python benchmarks/sim.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from importlib import resources

import httpx


def _questions() -> list[str]:
    path = resources.files("evalkit").joinpath("data", "gsm8k", "test.jsonl")
    with path.open("r", encoding="utf-8") as lines:
        return [json.loads(line)["question"] for line in lines]


def _start() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "evalkit.sim", "--model", "bench", "--server-port", "0",
         "--sim-natural-loop-rate", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if match := re.search(r"ready on (\S+)", line):
            return process, match.group(1)
    raise RuntimeError("the simulator exited before it was ready")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _completions(url: str, prompts: list[str], concurrency: int) -> float:
    """Requests per second for ``prompts`` sent ``concurrency`` at a time."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        queue = iter(prompts)

        async def worker() -> None:
            for prompt in queue:
                payload = {"model": "bench", "prompt": prompt, "max_tokens": 256,
                           "temperature": 0, "stop": ["Question:"], "seed": 1234}
                response = await client.post("/v1/completions", json=payload)
                response.raise_for_status()
                response.json()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return len(prompts) / (time.perf_counter() - start)


async def _stream(url: str, max_tokens: int) -> tuple[int, float]:
    """(tokens, tokens per second) of one streamed long generation."""
    payload = {"model": "bench", "prompt": "Write a long story about a lighthouse keeper.",
               "max_tokens": max_tokens, "temperature": 0, "stream": True,
               "stream_options": {"include_usage": True}}
    tokens = 0
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        start = time.perf_counter()
        async with client.stream("POST", "/v1/completions", json=payload) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
        return tokens, tokens / (time.perf_counter() - start)


async def _main(requests: int) -> None:
    process, url = _start()
    try:
        questions = _questions()
        shots = "".join(f"Question: {q}\nAnswer: ...\n\n" for q in questions[-5:])
        prompts = [f"{shots}Question: {questions[i % len(questions)]}\nAnswer:" for i in range(requests)]
        await _completions(url, prompts[:200], 16)  # warm up connections and caches
        for concurrency in (16, 64):
            cpu = _cpu_seconds(process.pid)
            rate = await _completions(url, prompts, concurrency)
            per_request = (_cpu_seconds(process.pid) - cpu) / requests
            print(
                f"completions, concurrency {concurrency:2}: {rate:6.0f} requests/s "
                f"({requests} requests; server CPU {per_request * 1000:.2f} ms/request, "
                f"capacity ~{1 / per_request:.0f} requests/s per core)"
            )
        tokens, rate = await _stream(url, 4096)
        print(f"streamed generation: {tokens} tokens at {rate:,.0f} tokens/s")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    asyncio.run(_main(parser.parse_args().requests))
