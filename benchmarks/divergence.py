"""Divergence eval client overhead per text: evalkit's scoring path against a raw httpx loop.

A logprob server (tests/logprob_server.py, a real HTTP server in its own process) answers every
text of the shipped reference set with echoed top-k logprobs. Both paths send the same requests
at the same concurrency, ``--rounds`` times interleaved (medians printed; the box is shared):

  (a) raw: an httpx.AsyncClient posting each body and decoding the JSON, nothing else;
  (b) evalkit: `divergence._score_all`, what the eval's `run` does per text (request, retry
      wrapper, parsing the echoed logprobs into the samples row, truncation to max_tokens).

Wall time is bounded by the server (one Python process); the client's CPU seconds (this
process) are what shows evalkit's own cost, per text. Also timed: `divergence_stats.compare` of
two cells' rows, the report-time cost of one cell-vs-reference comparison.

    python benchmarks/divergence.py [--concurrency 8] [--top-k 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalkit.engine import free_port  # noqa: E402
from evalkit.evals import divergence, divergence_stats  # noqa: E402
from evalkit.evals.prompts import Prompt, load_prompt_set  # noqa: E402


@contextmanager
def server() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "logprob_server.py"), "--port", str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait()


async def raw(url: str, settings: divergence.DivergenceSettings, items: list[Prompt]) -> None:
    semaphore = asyncio.Semaphore(settings.concurrency)
    limits = httpx.Limits(max_connections=settings.concurrency, max_keepalive_connections=settings.concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=settings.timeout, limits=limits) as client:

        async def one(item: Prompt) -> None:
            async with semaphore:
                body = {"model": "m", "prompt": item.prompt, "echo": True, "logprobs": settings.top_k,
                        "max_tokens": 1, "temperature": 0}
                response = await client.post("/v1/completions", json=body)
                response.raise_for_status()
                response.json()

        await asyncio.gather(*(one(item) for item in items))


def timed(run: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of one call."""
    me = psutil.Process()
    cpu0, wall0 = sum(me.cpu_times()[:2]), time.perf_counter()
    run()
    return time.perf_counter() - wall0, sum(me.cpu_times()[:2]) - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = divergence.DivergenceSettings(concurrency=args.concurrency, top_k=args.top_k)
    items = list(load_prompt_set(settings.texts).prompts)
    n = len(items)
    results: dict[str, list[tuple[float, float]]] = {"raw httpx": [], "evalkit": []}
    rows: list[dict] = []
    with server() as url:
        for _ in range(args.rounds):
            results["raw httpx"].append(timed(lambda: asyncio.run(raw(url, settings, items))))
            results["evalkit"].append(timed(lambda: rows.extend(asyncio.run(
                divergence._score_all(settings, url, "m", items, lambda i, total: None))[0])))
    tokens = sum(r["n_tokens"] for r in rows[:n])
    print(f"{n} texts, {tokens} scored tokens, top_k {args.top_k}, concurrency {args.concurrency}, "
          f"{args.rounds} rounds (medians)")
    medians = {}
    for name, runs in results.items():
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        medians[name] = cpu
        print(f"  {name:10s} wall {wall:6.2f} s  ({wall / n * 1000:6.1f} ms/text)   "
              f"client CPU {cpu:6.2f} s  ({cpu / n * 1000:6.2f} ms/text)")
    extra = medians["evalkit"] - medians["raw httpx"]
    print(f"  evalkit client overhead over raw httpx: {extra / n * 1000:+.2f} ms CPU per text "
          f"({extra / tokens * 1e6:+.1f} µs per token)")
    by_id = {r["id"]: r for r in rows[:n]}
    other = {r["id"]: r for r in rows[n:2 * n]}
    compare = [timed(lambda: divergence_stats.compare(other, by_id))[1] for _ in range(args.rounds)]
    cpu = statistics.median(compare)
    print(f"  one cell-vs-reference comparison (report time): {cpu:.3f} s CPU, {cpu / n * 1000:.2f} ms per text")


if __name__ == "__main__":
    main()
