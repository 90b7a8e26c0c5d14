"""History at scale: 1,000 nightly runs x 12 cells, each cell with 10 numeric metrics.

    python benchmarks/history.py

Times what `evalkit history` does (the trend query of one cell and of every cell, the table of
the last 20 runs per cell) and the one-off upgrade of a first-schema database (m002 backfills
`cell_metrics` from the `metrics` JSON of 12,000 cells). tests/test_history.py checks the same
shape returns the right points; the figure lives here because a shared, loaded machine makes a
time assertion flaky. Budget: each trend query well under a second (0.5 s on a 2-core box).
"""

from __future__ import annotations

import argparse
import io
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalkit.history.db import History  # noqa: E402
from evalkit.history.schema import m001_initial, migrate  # noqa: E402

RUNS, CELLS = 1000, 12
METRICS = ("gsm8k.strict", "gsm8k.flexible", "gsm8k.n", "gsm8k.strict_stderr", "gsm8k.flexible_stderr",
           "gsm8k.cut_by_max_gen_toks", "gsm8k.retries", "repetition.collapse_rate", "repetition.n",
           "repetition.collapsed")
"""The numeric flat metrics of a built-in cell (the `_ci95` pairs are not rows)."""


def timed(label: str, fn):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn()
    print(f"{label:<58} {time.perf_counter() - t:7.3f} s")
    return out


def fill_m001(db: sqlite3.Connection) -> None:
    """RUNS runs (half of them of model m) x CELLS cells, written the way m001 stored them."""
    with db:
        for i in range(RUNS):
            day = f"2026-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}T02:{i % 60:02d}:00+00:00"
            db.execute("INSERT INTO runs (run_id, model, config_name, engine, started_at, recorded_at) "
                       "VALUES (?, ?, 'demo', 'sim', ?, ?)", (f"r{i}", "m" if i % 2 else "other", day, day))
            metrics = json.dumps({name: 0.9 for name in METRICS} | {"gsm8k.flexible_ci95": [0.88, 0.92]})
            db.executemany("INSERT INTO cells (run_id, cell_id, axes, status, gsm8k_flexible, metrics, recorded_at) "
                           "VALUES (?, ?, '{}', 'ok', 0.9, ?, '')", [(f"r{i}", f"cell-{c}", metrics) for c in range(CELLS)])


def main() -> None:
    from rich.console import Console

    from evalkit.render.trend import trend_table

    tmp = Path(tempfile.mkdtemp(prefix="evalkit-history-"))
    db = sqlite3.connect(tmp / "history.db")
    migrate(db, [m001_initial])
    timed(f"write {RUNS:,} runs x {CELLS} cells, first schema (set-up)", lambda: fill_m001(db))
    db.close()
    history = timed(f"open: m002 backfills {RUNS * CELLS * len(METRICS):,} metric rows", lambda: History(tmp / "history.db"))
    one = timed(f"trend of one cell of model m ({RUNS // 2} runs)", lambda: history.trend("m", cells=["cell-3"]))
    every = timed(f"trend of every cell of model m ({RUNS // 2 * CELLS:,} points)", lambda: history.trend("m"))
    assert len(one) == RUNS // 2 and len(every) == RUNS // 2 * CELLS and len(every[0].metrics) == len(METRICS)

    def table() -> None:
        Console(file=io.StringIO(), width=160).print(trend_table(every, "evalkit history: m"))

    timed(f"trend table, last 20 runs of {CELLS} cells", table)
    history.close()


if __name__ == "__main__":
    # No options; the parser gives `--help` (the docstring) instead of a full benchmark run.
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
