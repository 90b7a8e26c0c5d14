"""The HTML report of a large run: 100 cells x 1,319 GSM8K questions (+ 64 long generations each).

Prints the page's size and how long rendering and a headless Chromium load take (issue #18:
"100 cells x 1319 questions opens within 2 s in a browser"). The run is hand-made, written like
the runner writes it: ~3% of answers flip per cell, 5 cells carry a bug (7-point drop, loops).

    python3 benchmarks/html_report.py [--cells 100]
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalkit.config import parse_config  # noqa: E402
from evalkit.render import render  # noqa: E402
from evalkit.store import write_json, write_jsonl  # noqa: E402
from evalkit.verdict.deltas import summarize  # noqa: E402

QUESTIONS, LONG = 1319, 64
CHROMIUM = Path("/usr/bin/chromium")


def make_run(folder: Path, pairs: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    raw = {"model": "sim/big", "engine": {"profile": "sim"},
           "axes": {"x": {f"v{i}": {"args": [f"--x{i}"]} for i in range(pairs)},
                    "fix": {"fixon": {"args": ["--on"]}, "fixoff": {"args": ["--off"]}}},
           "baseline": {"x": "v0", "fix": "fixon"}, "ab": {"axis": "fix", "on": "fixon", "off": "fixoff"},
           "thresholds": [{"metric": "gsm8k.flexible", "max_drop_ab": 0.02, "alpha": 0.01},
                          {"metric": "repetition.collapse_rate", "max_rise_ab": 0.05, "alpha": 0.01}]}
    config = parse_config(raw, "big.yaml")
    run = folder / "big"
    ids = [f"v{i}-{fix}" for i in range(pairs) for fix in ("fixon", "fixoff")]
    base = [rng.random() < 0.94 for _ in range(QUESTIONS)]
    write_json(run / "run.json", {"run_id": "big", "status": "complete", "model": "sim/big", "engine": "sim",
                                  "simulated": True, "config_path": "big.yaml", "config": config.model_dump(mode="json"),
                                  "cells": ids, "started_at": "2026-12-04T02:00:00+00:00"})
    for n, cell_id in enumerate(ids):
        buggy = cell_id.endswith("fixoff") and n % 20 == 1
        marks = [(not ok if rng.random() < 0.015 else ok) for ok in base]
        if buggy:
            marks = [False if ok and rng.random() < 0.075 else ok for ok in marks]
        samples = [{"doc_id": i, "id": f"test-{i}", "target": f"... #### {i}", "response": f" so {i}\n#### {i if ok else i + 1}",
                    "finish_reason": "stop", "strict-match.correct": ok, "flexible-extract.correct": ok,
                    "strict-match.extracted": str(i if ok else i + 1), "flexible-extract.extracted": str(i if ok else i + 1)}
                   for i, ok in enumerate(marks)]
        loops = [buggy and rng.random() < 0.3 for _ in range(LONG)]
        long = [{"id": f"lg-{i:03d}", "kind": "story", "collapsed": c, "verdict": "collapsed" if c else "healthy",
                 "evidence": {"onset": 300, "period": 1, "signals": ["token_run"], "loop_tokens": 500,
                              "excerpt": "healthy words | " + "again " * 40, "unit_text": "again"} if c else {},
                 "metrics": {"n_tokens": 800}, "text": "words " * 300 + ("again " * 500 if c else "")}
                for i, c in enumerate(loops)]
        right, collapsed = sum(marks), sum(loops)
        write_json(run / cell_id / "cell.json", {
            "id": cell_id, "axes": dict(zip(("x", "fix"), cell_id.split("-"))), "status": "ok",
            "timings": {"total_s": 60.0}, "metrics": {
                "gsm8k": {"strict": right / QUESTIONS, "flexible": right / QUESTIONS, "n": QUESTIONS},
                "repetition": {"collapse_rate": collapsed / LONG, "collapsed": collapsed, "n": LONG}}})
        write_jsonl(run / cell_id / "gsm8k.samples.jsonl", samples)
        write_jsonl(run / cell_id / "repetition.samples.jsonl", long)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=100)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="evalkit-html-"))
    try:
        run = make_run(folder, args.cells // 2)
        config = parse_config(__import__("json").loads((run / "run.json").read_text())["config"], "big.yaml")
        t = time.perf_counter()
        summary = summarize(run, config)
        t_summary = time.perf_counter() - t
        t = time.perf_counter()
        page = render(summary, "html", run) or ""
        t_render = time.perf_counter() - t
        out = folder / "report.html"
        out.write_text(page, encoding="utf-8")
        print(f"{len(summary['cells'])} cells x {QUESTIONS} questions: summary {t_summary:.2f} s, "
              f"html render {t_render:.2f} s, {len(page.encode()) / 1e6:.2f} MB")
        if not CHROMIUM.exists():
            print("chromium: absent (apt-get install chromium), load not measured")
            return
        for label, extra in (("about:blank (browser start-up)", "about:blank"), ("the report", out.as_uri())):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
                                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                "--no-first-run", f"--user-data-dir={folder / 'profile'}", "--dump-dom", extra],
                               capture_output=True, timeout=120, check=True)
                times.append(time.perf_counter() - t)
            print(f"chromium --dump-dom {label}: median {sorted(times)[1]:.2f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
