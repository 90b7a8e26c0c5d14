"""Cells side by side: the demo matrix with 2-device cells on a declared 8-device box, serial vs
parallel, on a simulator paced like a GPU (start-up and token time are waits, not CPU).

    python benchmarks/parallel.py [--limit 200] [--tps 300] [--startup 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--tps", type=int, default=300, help="simulated decode tokens/s per request")
    parser.add_argument("--startup", type=float, default=5.0, help="simulated engine start-up seconds")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="evalkit-par-"))
    text = (ROOT / "configs" / "demo.yaml").read_text()
    text = text.replace("tensor_parallel: 8", "tensor_parallel: 2").replace("count: 64", "count: 16")
    text = text.replace('"--sim-startup-seconds", "0.5"', f'"--sim-startup-seconds", "{args.startup}", '
                        f'"--sim-tokens-per-second", "{args.tps}"').replace("max_tokens: 4096", "max_tokens: 1024")
    (tmp / "cfg.yaml").write_text(text + "devices: {count: 8}\n")
    walls = {}
    for name, extra in (("serial", ["--max-parallel", "1"]), ("parallel", [])):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "evalkit.cli", "matrix", "--config", "cfg.yaml", "--run-id", name,
                        "--limit", str(args.limit), "--quiet", *extra], cwd=tmp, check=False)
        walls[name] = time.perf_counter() - t
        print(f"{name:<9} {walls[name]:7.1f} s wall  (12 cells, 2 devices each, 8 devices declared)")
    print(f"parallel / serial = {walls['parallel'] / walls['serial']:.2f} (ideal with 4 cells at once: 0.25)")


if __name__ == "__main__":
    main()
