"""`evalkit compare` of two stored runs against `evalkit report` of one: CPU and wall seconds.

Issue 38 measured `compare` of two 50-question demo runs at 33-36 s, 93% of it in
`stats.power.fisher_n` (scipy's hypergeometric tail per table, working out "needs n"); it should
take no longer than `report` of one run. Each command runs as its own process (`python -m
evalkit.cli`, imports included), `--repeats` times; the figures are the fastest of them, CPU
(user + system of the process, what a loaded machine does not inflate) and wall.

    evalkit matrix --model demo --limit 50 --run-id a50 && evalkit matrix --model demo --limit 50 --run-id b50
    python benchmarks/compare_speed.py results/a50 results/b50
    PYTHONPATH=/path/to/an/older/checkout python benchmarks/compare_speed.py results/a50 results/b50   # before
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def timed(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of `python -m evalkit.cli ARGV`, its output discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evalkit.cli", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "COLUMNS": "200"}, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path, help="a stored run folder (the reference)")
    parser.add_argument("run_b", type=Path, help="a stored run folder of the same matrix")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import evalkit

    print(f"evalkit from {Path(evalkit.__file__).parent}; fastest of {args.repeats}")
    for name, argv in (("report A", ["report", str(args.run_a)]),
                       ("compare A B", ["compare", str(args.run_a), str(args.run_b)])):
        cpu, wall = min(timed(argv) for _ in range(args.repeats))
        print(f"{name:<12} {cpu:6.1f} s CPU  {wall:6.1f} s wall")


if __name__ == "__main__":
    main()
