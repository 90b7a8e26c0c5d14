"""The history keeps each cell's cost (history/schema.py m008), and `evalkit plan` estimates the
next night from the last ones: start-up from the launch's span, evals one after another or in a
wave (the cell waits on the slowest), and GPU-hours per cell and for the verdict."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.history import History
from evalkit.history.schema import MIGRATIONS, migrate
from evalkit.history.timing import cell_times
from evalkit.store.costs import Span, cell_cost
from tests.conftest import CONFIGS


def cell(cell_id: str, spans: list[tuple[str, str, float, float]], total_s: float, n: int = 100) -> dict[str, Any]:
    """A finished cell of configs/demo.yaml as the lifecycle records it: timings and the cost from one set of spans."""
    made = [Span(name=name, kind=kind, start_s=a, end_s=b) for name, kind, a, b in spans]  # type: ignore[arg-type]
    timings: dict[str, float] = {f"{s.name}_s": s.wall_s for s in made if s.kind == "eval"}
    timings |= {"engine_ready_s": 1.0, "total_s": total_s}  # ready 1 s after the health check: the span says 30
    return {"id": cell_id, "axes": {}, "status": "ok", "timings": timings,
            "cost": cell_cost(8, "tensor_parallel 8 x data_parallel 1", total_s, made).model_dump()}


def night(history: History, run_id: str, started: str, record: dict[str, Any]) -> None:
    run = {"run_id": run_id, "model": "sim/deepseek-v4", "engine": "sim", "config_path": str(CONFIGS / "demo.yaml"),
           "started_at": started}
    history.record_cell(run, record, {"gsm8k.n": 100, "repetition.n": 64})  # the demo's 64 long prompts


SEQUENTIAL = [("startup", "startup", 0, 30), ("evals", "evals", 30, 90), ("gsm8k", "eval", 30, 50),
              ("repetition", "eval", 50, 90), ("teardown", "teardown", 90, 94)]
WAVE = [("startup", "startup", 0, 30), ("evals", "evals", 30, 70), ("repetition", "eval", 30, 70),
        ("gsm8k", "eval", 30, 50), ("teardown", "teardown", 70, 74)]


def test_a_history_from_before_costs_gains_the_column_and_keeps_its_cells(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    migrate(db, MIGRATIONS[:7])  # the history as it was before m008
    db.execute("INSERT INTO runs (run_id, model, engine, recorded_at) VALUES ('r', 'm', 'sim', 'now')")
    db.execute("INSERT INTO cells (run_id, cell_id, axes, status, metrics, recorded_at) "
               "VALUES ('r', 'old', '{}', 'ok', '{}', 'now')")
    db.commit()
    assert migrate(db) == ["m008_cell_costs"] and migrate(db) == []
    assert db.execute("SELECT cell_id, cost FROM cells").fetchall() == [("old", None)]
    db.close()
    with History(path) as history:
        night(history, "new", "2026-12-02T02:00:00", cell("tp8-full-fixon", SEQUENTIAL, 100.0))
        (stored,) = history.db.execute("SELECT cost FROM cells WHERE run_id = 'new'").fetchone()
    assert json.loads(stored)["device_s"] == 800.0 and json.loads(stored)["waited_on"] == "repetition"


def test_plan_estimates_the_next_night_from_two_nights_the_newest_saying_the_evals_ran_in_a_wave(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with History(db) as history:
        night(history, "n1", "2026-12-01T02:00:00", cell("tp8-full-fixon", SEQUENTIAL, 100.0))
        night(history, "n2", "2026-12-02T02:00:00", cell("tp8-full-fixon", WAVE, 80.0))
        time = cell_times(history, "demo")["tp8-full-fixon"]
    # start-up is the launch's span (30 s), not engine_ready_s; the rest: 100-30-60 and 80-30-40
    assert (time.runs, time.startup_s, time.other_s, time.wave) == (2, 30.0, 10.0, True)
    total, evals = time.estimate({"gsm8k": 100, "repetition": 64}, {})
    assert evals == {"gsm8k": pytest.approx(20.0), "repetition": pytest.approx(40.0)}
    assert total == pytest.approx(30 + 40 + 10)  # a wave waits on repetition alone
    result = CliRunner().invoke(main, ["plan", "--model", "demo", "--db", str(db), "--limit", "100"],
                                catch_exceptions=False)
    lines = result.output.splitlines()
    known = lines[lines.index("[tp8-full-fixon] parallel=tp8 graph=full fix=fixon") + 1:]
    # 80 s on 8 devices: 0.18 GPU-hours; every cell of the 12 is estimated so: 2.1 for the verdict
    assert next(line for line in known if "time:" in line).startswith("  time:   ~80 s, 0.18 GPU-h on 8 devices (")
    head = next(line for line in lines if line.startswith("# wall time:"))
    assert head.startswith("# wall time: ~16.0 min for 12 cells one after another, 2.1 GPU-hours for the verdict")


def test_a_night_of_evals_one_after_another_is_estimated_as_their_sum(tmp_path: Path) -> None:
    with History(tmp_path / "history.db") as history:
        night(history, "n1", "2026-12-02T02:00:00", cell("tp8-full-fixon", SEQUENTIAL, 100.0))
        time = cell_times(history, "demo")["tp8-full-fixon"]
    assert not time.wave and time.estimate({"gsm8k": 100, "repetition": 64}, {})[0] == pytest.approx(100.0)
