"""How fast the simulated engine (``python -m evalkit.sim``) starts, warms up and stops.

The figures tests/test_sim_cli.py used to assert as wall times, measured here instead:

* ``--help``: the wall time of the command (Python start-up and imports included);
* time to ready: from spawning the process to its ``sim: ready on`` line, with
  ``--sim-startup-seconds`` 0 and the chosen value (the difference is what the simulated load
  adds; it should be close to the value);
* warm-up: from the ready line to sending the first completion that is answered 200 rather
  than 503, with ``--sim-warmup-seconds`` (should be close to the value), and how long that
  first answer takes;
* SIGTERM mid-stream: from the signal to the process's exit while a long stream is open
  (the simulator allows streams a graceful second, as uvicorn's ``timeout_graceful_shutdown``).

Each figure is the median of ``--repeats`` runs, with the minimum and maximum.

    python benchmarks/sim_startup.py [--repeats 5] [--startup 0.6] [--warmup 0.6]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

import httpx

COMPLETION = {"prompt": "hi", "max_tokens": 1}


def _start(*args: str) -> tuple[subprocess.Popen[str], str, float]:
    """A simulator process, its URL and the seconds from spawn to its ready line."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "evalkit.sim", "--model", "bench", "--server-port", "0", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert process.stdout is not None
    for line in process.stdout:
        if match := re.match(r"sim: ready on (\S+)", line):
            return process, match.group(1), time.perf_counter() - started
    raise RuntimeError(f"the simulator exited {process.wait()} before it was ready")


def _stop(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def help_seconds() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evalkit.sim", "--help"], capture_output=True, check=True)
    return time.perf_counter() - started


def ready_seconds(startup: float) -> float:
    process, _, seconds = _start("--sim-startup-seconds", str(startup))
    _stop(process)
    return seconds


def warmup_seconds(warmup: float) -> tuple[float, float]:
    """From the ready line to sending the first completion answered 200 (polling every 10 ms),
    and how long that first answer took."""
    with httpx.Client(timeout=30) as client:  # made first: building a client takes tens of ms
        process, url, _ = _start("--sim-warmup-seconds", str(warmup))
        ready = time.perf_counter()
        try:
            while True:
                sent = time.perf_counter()
                if client.post(f"{url}/v1/completions", json=COMPLETION).status_code != 503:
                    return sent - ready, time.perf_counter() - sent
                time.sleep(0.01)
        finally:
            _stop(process)


def sigterm_seconds() -> float:
    process, url, _ = _start("--sim-tokens-per-second", "20")
    try:
        with httpx.Client(base_url=url, timeout=30) as client, client.stream(
                "POST", "/v1/completions", json={"prompt": "Write a long story.", "max_tokens": 4096, "stream": True}
        ) as response:
            lines = response.iter_lines()  # kept: a dropped iterator closes the stream
            next(lines)
            started = time.perf_counter()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
            return time.perf_counter() - started
    finally:
        _stop(process)


def _row(label: str, values: list[float]) -> str:
    return (f"{label:<44} {statistics.median(values):7.3f} s   (min {min(values):.3f}, max {max(values):.3f}, "
            f"n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--startup", type=float, default=0.6, help="--sim-startup-seconds to measure")
    parser.add_argument("--warmup", type=float, default=0.6, help="--sim-warmup-seconds to measure")
    args = parser.parse_args()
    n = range(args.repeats)
    print(f"evalkit.sim start-up and stop on {os.cpu_count()} CPUs, median of {args.repeats}")
    print(_row("--help", [help_seconds() for _ in n]))
    bare = [ready_seconds(0) for _ in n]
    loaded = [ready_seconds(args.startup) for _ in n]
    print(_row("spawn to ready, --sim-startup-seconds 0", bare))
    print(_row(f"spawn to ready, --sim-startup-seconds {args.startup:g}", loaded))
    added = statistics.median(loaded) - statistics.median(bare)
    print(f"{'  simulated load adds (median difference)':<44} {added:7.3f} s")
    warm = [warmup_seconds(args.warmup) for _ in n]
    print(_row(f"ready to served, --sim-warmup-seconds {args.warmup:g}", [w for w, _ in warm]))
    print(_row("  the first completion's answer", [first for _, first in warm]))
    print(_row("SIGTERM mid-stream to exit", [sigterm_seconds() for _ in n]))


if __name__ == "__main__":
    main()
