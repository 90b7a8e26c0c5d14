"""Per-cell overhead: what a cell costs besides engine start-up and request traffic.

Runs the demo matrix (or `--only` a part of it) on the simulator and prints, per cell and in
total, each phase from cell.json: engine start (to /health), warm-up, the evals (one wave, or one
after another: cell.json `cost.spans`), engine stop, what is left (evalkit's own work), GSM8K's
overhead inside the evals (lm-eval task building, prompt construction, scoring, writing samples)
and the eval the cell waited on;
then the CPU seconds the run cost, evalkit's and its engines' together (they are its children),
in total and a cell: on a 2-core box that, not the wall time, bounds how fast the tests that run
demo cells can go.

    python benchmarks/overhead.py [--limit N] [--only AXIS=VALUE]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="evalkit-overhead-"))
    cmd = [sys.executable, "-m", "evalkit.cli", "matrix", "--model", "demo", "--run-id", "o", "--quiet",
           "--results-dir", str(tmp / "results")]
    cmd += [f"--only={o}" for o in args.only] + (["--limit", str(args.limit)] if args.limit else [])
    t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, cwd=ROOT, check=False)
    wall, after = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run = tmp / "results" / "o"
    header = f"{'cell':<22} {'start':>6} {'warmup':>6} {'evals':>6} {'stop':>6} {'other':>6} {'total':>6} {'g.over':>6}  waited on"
    print(header)
    sums: dict[str, float] = {}
    cells = json.loads((run / "run.json").read_text())["cells"]
    for cell_id in cells:
        record = json.loads((run / cell_id / "cell.json").read_text())
        t, cost = record["timings"], record["cost"]
        evals = next(s for s in cost["spans"] if s["kind"] == "evals")  # the wave, or the evals one after another
        phases = {
            "start": t["engine_start_s"],
            "warmup": t["engine_ready_s"] - t["engine_start_s"],
            "evals": evals["end_s"] - evals["start_s"],
            "stop": t.get("engine_stop_s", 0.0),
        }
        phases["other"] = t["total_s"] - sum(phases.values())
        phases["total"] = t["total_s"]
        phases["g.over"] = t["gsm8k_s"] - record["metrics"]["gsm8k"]["requests_s"]  # lm-eval's own work, inside evals
        for k, v in phases.items():
            sums[k] = sums.get(k, 0.0) + v
        print(f"{cell_id:<22} " + " ".join(f"{v:6.2f}" for v in phases.values()) + f"  {cost.get('waited_on', '-')}")
    n = len(cells)
    print(f"{'mean':<22} " + " ".join(f"{v / n:6.2f}" for v in sums.values()))
    # In a wave GSM8K's own work runs beside the long generations, so only `other` adds to a cell.
    print(f"\nper-cell overhead outside the evals (other) = {sums['other'] / n:.2f} s  (target <= 1 s); "
          f"GSM8K's own work inside them {sums['g.over'] / n:.2f} s")
    print(f"matrix wall time {wall:.1f} s for {n} cells, of which process start-up, planning and report "
          f"{wall - sums['total']:.1f} s")
    print(f"CPU: {cpu:.1f} s, evalkit and its engines together ({cpu / n:.1f} s a cell)")


if __name__ == "__main__":
    main()
