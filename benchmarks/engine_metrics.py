"""What reading the engine's own report costs a cell: `/metrics` scrapes and the `/version` check.

A cell scrapes its engine once before its first eval and once after each eval (evalkit/run/
engine_report.py), so the figure that matters is one scrape's latency, request and parse
together (engine/metrics.py `scrape`, which is what a cell calls). Measured against the real
simulator, serving vLLM's metric names with speculative decoding counters on, first after it
has generated `--tokens` tokens (its registry then has every series a cell reads):

* the first scrape of a cell's client (a new connection, prometheus_client's parser imported);
* the median, 90th percentile and maximum of the next `--scrapes` scrapes;
* the same for `GET /version`, which a cell reads once, with a client of its own (so each call
  here pays for building an httpx client, ~100 ms of TLS context, as the cell does once).

    python benchmarks/engine_metrics.py [--scrapes 200] [--tokens 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalkit.engine.metrics import read_version, scrape  # noqa: E402
from tests.helpers.sim import SimServer  # noqa: E402


def _timed(call: object, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        call()  # type: ignore[operator]
        out.append(time.perf_counter() - t)
    return out


def _line(name: str, first: float, rest: list[float]) -> str:
    rest = sorted(rest)
    p90 = rest[int(0.9 * (len(rest) - 1))]
    return (f"{name:<16} first {first * 1000:6.2f} ms   median {statistics.median(rest) * 1000:6.2f} ms   "
            f"p90 {p90 * 1000:6.2f} ms   max {rest[-1] * 1000:6.2f} ms   ({len(rest)} calls)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=20000, help="generated before measuring")
    args = parser.parse_args()
    with SimServer("--sim-spec-decode", "3") as sim:
        with httpx.Client(base_url=sim.url, timeout=60) as client:
            while (sent := int(scrape(client, sim.url, "/metrics").totals.get("vllm:generation_tokens_total", 0))) < args.tokens:
                client.post("/v1/completions", json={"model": "sim-model", "prompt": [f"p{sent}-{i}" for i in range(8)],
                                                     "max_tokens": 2000}).raise_for_status()
        with httpx.Client(timeout=60) as cell_client:  # what a cell does: one client, every scrape through it
            first = scrape(cell_client, sim.url, "/metrics")
            assert first.error is None, first.error
            size = len(cell_client.get(sim.url + "/metrics").text)
            rest = _timed(lambda: scrape(cell_client, sim.url, "/metrics"), args.scrapes)
        version_first = _timed(lambda: read_version(sim.url, "/version"), 1)[0]
        versions = _timed(lambda: read_version(sim.url, "/version"), args.scrapes)
    print(f"simulator /metrics after {sent} generated tokens: {len(first.totals)} series, {size} bytes of text")
    print(_line("scrape /metrics", first.seconds, rest))
    print(_line("GET /version", version_first, versions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
