"""Scale: plan expansion for 10 axes (1,024 cells), and summaries/history over 1,000 stored runs.

    python benchmarks/scale.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalkit.config import parse_config  # noqa: E402
from evalkit.config.cells import expand  # noqa: E402
from evalkit.engine.launch import PORT_PLACEHOLDER, build_launch  # noqa: E402
from evalkit.store import write_json, write_jsonl  # noqa: E402


def timed(label: str, fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    print(f"{label:<58} {time.perf_counter() - t:7.3f} s")
    return out


def main() -> None:
    axes = {f"axis{i}": {"a": {"args": [f"--a{i}"]}, "b": {"env": {f"E{i}": "1"}}} for i in range(10)}
    data = {"model": "m", "engine": {"profile": "sim"}, "axes": axes,
            "baseline": {f"axis{i}": "a" for i in range(10)}}
    config = timed("parse a 10-axis config", lambda: parse_config(data, "scale.yaml"))
    cells = timed("expand to cells", lambda: expand(config))
    timed(f"build the launch (argv, env) of all {len(cells)} cells", lambda: [build_launch(config, c, PORT_PLACEHOLDER) for c in cells])

    from evalkit.history.db import History

    tmp = Path(tempfile.mkdtemp(prefix="evalkit-scale-"))
    demo = parse_config({"model": "m", "engine": {"profile": "sim"},
                         "axes": {"fix": {"on": {"args": ["-a"]}, "off": {"args": ["-b"]}}},
                         "baseline": {"fix": "on"}, "ab": {"axis": "fix", "on": "on", "off": "off"}}, "x")
    rows = [{"id": f"test-{i}", "strict-match.correct": i % 17 != 0, "flexible-extract.correct": i % 19 != 0}
            for i in range(1319)]

    def make_runs() -> None:
        for r in range(1000):
            run = tmp / "results" / f"run{r:04d}"
            write_json(run / "run.json", {"run_id": run.name, "model": "m", "engine": "sim", "status": "complete",
                                          "cells": ["on", "off"], "config": demo.model_dump(mode="json"),
                                          "started_at": f"2026-01-01T00:{r // 60 % 60:02d}:{r % 60:02d}+00:00"})
            for cell_id in ("on", "off"):
                write_jsonl(run / cell_id / "gsm8k.samples.jsonl", rows)
                write_json(run / cell_id / "cell.json", {
                    "id": cell_id, "axes": {"fix": cell_id}, "status": "ok", "timings": {"total_s": 1.0},
                    "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:00:01+00:00",
                    "metrics": {"gsm8k": {"strict": 0.94, "flexible": 0.95, "n": 1319},
                                "repetition": {"collapse_rate": 0.01, "collapsed": 1, "n": 64}}})

    timed("write 1,000 runs x 2 cells x 1,319 samples (set-up)", make_runs)
    from evalkit.verdict.deltas import summarize

    timed("summary of one stored run (paired stats on 1,319 questions)", lambda: summarize(tmp / "results" / "run0999", demo))
    db = tmp / "history.db"
    history = History(db)
    timed("history: import 1,000 runs", lambda: [history.import_run(p) for p in sorted((tmp / "results").iterdir())])
    timed("history: trend of model m over 1,000 runs", lambda: history.trend(model="m"))
    for questions in (1_319, 13_190):
        run = tmp / "memory" / f"q{questions}"
        write_json(run / "run.json", {"run_id": run.name, "model": "m", "engine": "sim", "status": "complete",
                                      "cells": ["on", "off"], "config": demo.model_dump(mode="json")})
        for cell_id in ("on", "off"):
            write_jsonl(run / cell_id / "gsm8k.samples.jsonl", (
                {"id": f"test-{i}", "strict-match.correct": i % 17 != 0, "flexible-extract.correct": i % 19 != 0,
                 "prompt_hash": f"{i:016x}", "response": "The answer is 42 because " * 16}  # ~400 characters
                for i in range(questions)))
            write_json(run / cell_id / "cell.json", {"id": cell_id, "axes": {"fix": cell_id}, "status": "ok",
                                                     "metrics": {"gsm8k": {"strict": 0.94, "flexible": 0.95, "n": questions}}})
        on_disk = sum(f.stat().st_size for f in run.rglob("*.jsonl"))
        tracemalloc.start()
        summarize(run, demo)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{f'peak Python memory of a summary, {questions:,} questions/cell':<58} {peak / 1e6:7.1f} MB"
              f"  (samples on disk {on_disk / 1e6:.1f} MB)")


if __name__ == "__main__":
    # No options; the parser gives `--help` (the docstring) instead of a full benchmark run.
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
