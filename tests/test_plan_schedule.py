"""`evalkit plan` says how long the matrix will take, from the history of the same config, and how
many GSM8K repeats catch a failure that shows in some runs only, and what they cost."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.config import load_config
from evalkit.config.cells import expand
from evalkit.history import History
from evalkit.history.timing import cell_times
from evalkit.stats.power import catch_probability, repeats_needed
from evalkit.verdict.schedule import matrix_seconds
from tests.conftest import CONFIGS


def test_one_failure_in_four_needs_nine_repeats_for_ninety_percent() -> None:
    assert catch_probability(0.25, 1) == 0.25
    assert catch_probability(0.25, 8) == pytest.approx(0.8999, abs=1e-4)  # "about 8": just short of 90%
    assert repeats_needed(0.25, 0.9) == 9 and repeats_needed(0.25, 0.89) == 8
    assert repeats_needed(0.5, 0.9) == 4 and repeats_needed(1.0, 0.99) == 1
    with pytest.raises(ValueError):
        repeats_needed(0.0)


def record(history: History, run_id: str, started: str, cell_id: str, ready_s: float, gsm8k_s: float, n: int,
           total_s: float, status: str = "ok", repeats: int | None = None) -> None:
    """One finished cell of a run of configs/demo.yaml, as a matrix records it."""
    run = {"run_id": run_id, "model": "sim/deepseek-v4", "engine": "sim", "config_path": str(CONFIGS / "demo.yaml"),
           "started_at": started}
    cell = {"id": cell_id, "axes": {}, "status": status,
            "timings": {"engine_start_s": ready_s / 2, "engine_ready_s": ready_s, "gsm8k_s": gsm8k_s,
                        "engine_stop_s": 1.0, "total_s": total_s}}
    flat = {"gsm8k.n": n} | ({"gsm8k.repeats": repeats} if repeats else {})
    history.record_cell(run, cell, flat)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "history.db"
    with History(path) as history:
        # two nights of one cell at 100 questions, one at 200 with 2 repeats: 0.1 s a question-run
        record(history, "n1", "2026-12-01T02:00:00", "tp8-full-fixon", 20.0, 10.0, 100, 32.0)
        record(history, "n2", "2026-12-02T02:00:00", "tp8-full-fixon", 30.0, 10.0, 100, 42.0)
        record(history, "n3", "2026-12-03T02:00:00", "tp8-full-fixon", 40.0, 40.0, 200, 82.0, repeats=2)
        record(history, "n3", "2026-12-03T02:00:00", "tp8-full-fixoff", 99.0, 99.0, 100, 999.0, status="failed")
    return path


def test_a_cells_time_is_its_medians_with_evals_per_question_and_repeat(db: Path) -> None:
    with History(db) as history:
        times = cell_times(history, "demo")
    assert set(times) == {"tp8-full-fixon"}  # a failed cell stopped early: not a measure
    time = times["tp8-full-fixon"]
    assert (time.runs, time.startup_s, time.other_s) == (3, 30.0, 2.0)
    assert time.per_sample_s == {"gsm8k": pytest.approx(0.1)}
    total, evals = time.estimate({"gsm8k": 1319}, {"gsm8k": 3})
    assert evals == {"gsm8k": pytest.approx(395.7)} and total == pytest.approx(30 + 395.7 + 2)


def test_plan_prints_each_cells_time_and_the_matrixs_from_the_history(db: Path) -> None:
    result = CliRunner().invoke(main, ["plan", "--model", "demo", "--db", str(db), "--limit", "100"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    known = lines[lines.index("[tp8-full-fixon] parallel=tp8 graph=full fix=fixon") + 1:]
    assert next(line for line in known if "time:" in line) == (
        "  time:   ~42 s, 0.09 GPU-h on 8 devices (start-up 30 s, gsm8k 10 s; median of 3 earlier runs; never timed, left out: repetition, "
        "divergence, consistency)")
    assert "  time:   ~42 s, 0.09 GPU-h on 8 devices (not run before: the median of the config's other cells)" in lines
    head = next(line for line in lines if line.startswith("# wall time:"))
    assert head.startswith("# wall time: ~8.4 min for 12 cells one after another, 1.1 GPU-hours for the verdict")
    cost = next(line for line in lines if line.startswith("#   cost:"))
    assert cost == "#   cost: 8 more GSM8K runs per cell, the matrix ~8.4 min -> ~24.4 min (from the history)"
    repeats = next(line for line in lines if line.startswith("# repeats:"))
    assert "evals.gsm8k.repeats 1 sees a failure that shows in 25% of runs with probability 25%; 9 repeats see " \
           "it with 92.5%" in repeats


def test_cells_on_declared_devices_run_side_by_side_in_the_estimate(tmp_path: Path) -> None:
    config = load_config(CONFIGS / "demo.yaml")
    cells = expand(config)
    seconds = {cell.id: 60.0 for cell in cells}
    assert matrix_seconds(config, cells, seconds) == 12 * 60
    wide = tmp_path / "demo.yaml"
    wide.write_text((CONFIGS / "demo.yaml").read_text() + "devices: {count: 16}\n")
    assert matrix_seconds(load_config(wide), cells, seconds) == 6 * 60  # 8 devices a cell: two at a time


def test_without_a_history_the_plan_says_so_and_creates_none(tmp_path: Path) -> None:
    db = tmp_path / "none" / "history.db"
    result = CliRunner().invoke(main, ["plan", "--model", "demo", "--db", str(db)], catch_exceptions=False)
    assert f"# wall time: no history at {db} (every run of a config records one)" in result.output
    assert "#   cost: 8 more GSM8K runs per cell (9x GSM8K's time; no history to put it in minutes)" in result.output
    assert not db.parent.exists()


def test_an_evals_set_up_is_not_scaled_when_the_history_holds_two_sample_counts(tmp_path: Path) -> None:
    """25 s for 100 questions and 55 s for 400: 15 s of set-up and 0.1 s a question, so 1319
    questions take 147 s, not the 330 s that 25 s scaled by 13 would say."""
    with History(tmp_path / "history.db") as history:
        record(history, "n1", "2026-12-01T02:00:00", "tp8-full-fixon", 20.0, 25.0, 100, 47.0)
        record(history, "n2", "2026-12-02T02:00:00", "tp8-full-fixon", 20.0, 55.0, 400, 77.0)
        time = cell_times(history, "demo")["tp8-full-fixon"]
    assert time.fixed_s["gsm8k"] == pytest.approx(15.0) and time.per_sample_s["gsm8k"] == pytest.approx(0.1)
    assert time.estimate({"gsm8k": 1319}, {})[1] == {"gsm8k": pytest.approx(15 + 131.9)}
