"""Per-cell overhead: what a cell costs besides engine start-up and request traffic.

Runs the demo matrix (or `--only` a part of it) on the simulator and prints, per cell and in
total, each phase from cell.json: engine start (to /health), warm-up, GSM8K requests (first
request to last answer), GSM8K overhead (lm-eval task building, prompt construction, scoring,
writing samples), the repetition check, engine stop, and what is left (evalkit's own work).

    python benchmarks/overhead.py [--limit N] [--only AXIS=VALUE]
"""

from __future__ import annotations

import argparse
import json
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
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=False)
    wall = time.perf_counter() - t
    run = tmp / "results" / "o"
    header = f"{'cell':<22} {'start':>6} {'warmup':>6} {'g.req':>6} {'g.over':>6} {'rep':>6} {'stop':>6} {'other':>6} {'total':>6}"
    print(header)
    sums: dict[str, float] = {}
    cells = json.loads((run / "run.json").read_text())["cells"]
    for cell_id in cells:
        record = json.loads((run / cell_id / "cell.json").read_text())
        t = record["timings"]
        g = record["metrics"]["gsm8k"]
        phases = {
            "start": t["engine_start_s"],
            "warmup": t["engine_ready_s"] - t["engine_start_s"],
            "g.req": g["requests_s"],
            "g.over": t["gsm8k_s"] - g["requests_s"],
            "rep": t.get("repetition_s", 0.0),
            "stop": t.get("engine_stop_s", 0.0),
        }
        phases["other"] = t["total_s"] - sum(phases.values())
        phases["total"] = t["total_s"]
        for k, v in phases.items():
            sums[k] = sums.get(k, 0.0) + v
        print(f"{cell_id:<22} " + " ".join(f"{v:6.2f}" for v in phases.values()))
    n = len(cells)
    print(f"{'mean':<22} " + " ".join(f"{v / n:6.2f}" for v in sums.values()))
    overhead = (sums["g.over"] + sums["other"]) / n
    print(f"\nper-cell overhead (GSM8K overhead + other) = {overhead:.2f} s  (target <= 1 s)")
    print(f"matrix wall time {wall:.1f} s for {n} cells, of which process start-up, planning and report "
          f"{wall - sums['total']:.1f} s")


if __name__ == "__main__":
    main()
