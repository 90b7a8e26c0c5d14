"""What teacher-forced scoring costs the simulator: one echo + logprobs request on a long text.

A divergence eval scores reference texts with ``echo``, ``logprobs`` and ``max_tokens`` 1 in
every cell, so the simulator's cost per scored token bounds that eval's cost in the demo.
This sends a 1024-token text (GSM8K train solutions, so every position has real context) to
a real simulator process in the buggy cell (the most work: its flips) and prints the
request's wall time, the server's own CPU time per request (so the client on the same CPUs
does not count), the response size, and what 64 texts x 12 cells would take.

    python benchmarks/sim_logprobs.py [--tokens 1024] [--logprobs 5] [--requests 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib import resources
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalkit.sim.tokens import tokenize  # noqa: E402
from tests.helpers.sim import SimServer  # noqa: E402

BUGGY = ("-tp", "8", "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off")


def long_text(tokens: int) -> str:
    """Exactly ``tokens`` simulator tokens of GSM8K train solutions."""
    path = resources.files("evalkit").joinpath("data", "gsm8k", "train.jsonl")
    answers: list[str] = []
    with path.open("r", encoding="utf-8") as lines:
        for line in lines:
            answers.append(json.loads(line)["answer"])
            if len(tokenize("\n\n".join(answers))) >= tokens:
                break
    text = "".join(tokenize("\n\n".join(answers))[:tokens])
    assert len(tokenize(text)) == tokens
    return text


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main(tokens: int, logprobs: int, requests: int) -> None:
    text = long_text(tokens)
    body = {"model": "sim-model", "prompt": text, "echo": True, "logprobs": logprobs, "max_tokens": 1,
            "temperature": 0}
    with SimServer(*BUGGY) as server, server.client(timeout=120) as client:
        client.post("/v1/completions", json=body).raise_for_status()  # warm up imports and caches
        walls, size = [], 0
        cpu = cpu_seconds(server.pid)
        for _ in range(requests):
            start = time.perf_counter()
            response = client.post("/v1/completions", json=body)
            response.raise_for_status()
            walls.append(time.perf_counter() - start)
            size = len(response.content)
        server_cpu = (cpu_seconds(server.pid) - cpu) / requests
    scored = response.json()["usage"]["prompt_tokens"]
    wall = statistics.median(walls)
    print(f"echo + logprobs {logprobs}, {scored}-token text: {wall * 1000:.0f} ms a request (median of {requests}), "
          f"server CPU {server_cpu * 1000:.0f} ms ({server_cpu / scored * 1e6:.0f} us a token), "
          f"response {size / 1024:.0f} KiB")
    print(f"64 such texts x 12 cells: ~{64 * 12 * server_cpu:.0f} s of server CPU "
          f"({64 * server_cpu:.1f} s a cell)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--logprobs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=10)
    args = parser.parse_args()
    main(args.tokens, args.logprobs, args.requests)
