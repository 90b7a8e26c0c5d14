"""`evalkit history`: backfill stored runs, print the trend, draw it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.history.db import History
from evalkit.store import write_json
from evalkit.verdict.deltas import summarize
from tests.helpers.runs import CellSpec, loop_text, write_run


@pytest.fixture
def three_runs(tmp_path: Path) -> Path:
    """Three stored nightly runs of a 2 x 2 matrix; dp8-fixoff loses accuracy and collapses more."""
    results = tmp_path / "results"
    for day, right, loops in ((1, 19, 0), (2, 16, 1), (3, 12, 3)):
        texts = [loop_text("again ") if i < loops else f"healthy text {i}" for i in range(4)]
        cells = {"tp8-fixon": CellSpec(right=19, long_texts=["fine"] * 4), "tp8-fixoff": CellSpec(right=19, long_texts=["fine"] * 4),
                 "dp8-fixon": CellSpec(right=18, long_texts=["fine"] * 4), "dp8-fixoff": CellSpec(right=right, long_texts=texts)}
        write_run(results, f"night-{day}", cells, started_at=f"2026-12-0{day}T02:00:00+00:00")
    return results


def invoke(*args: str) -> object:
    return CliRunner().invoke(main, list(args))


def test_import_all_then_trend_shows_three_runs_per_cell(three_runs: Path) -> None:
    imported = invoke("history", "--import", "all", "--results-dir", str(three_runs))
    assert imported.exit_code == 0, imported.output
    assert imported.output.count("imported night-") == 3
    shown = invoke("history", "--model", "demo", "--cell", "dp8-fixoff", "--results-dir", str(three_runs))
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.output.splitlines() if "night-" in line]
    assert len(lines) == 3
    assert "0.950" in lines[0] and "-15.0" in lines[1] and "-20.0" in lines[2] and "0.750" in lines[2]


def test_plot_writes_a_png(three_runs: Path, tmp_path: Path) -> None:
    invoke("history", "--import", "all", "--results-dir", str(three_runs))
    out = tmp_path / "trend.png"
    result = invoke("history", "--model", "sim/test-model", "--plot", str(out), "--results-dir", str(three_runs))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_without_a_model_it_names_the_recorded_ones(three_runs: Path) -> None:
    invoke("history", "--import", "night-1", "--results-dir", str(three_runs))
    result = invoke("history", "--results-dir", str(three_runs))
    assert result.exit_code == 2 and "recorded models: sim/test-model (demo)" in result.output
    unknown = invoke("history", "--model", "nope", "--results-dir", str(three_runs))
    assert unknown.exit_code == 2 and "no recorded cells for model 'nope'" in unknown.output


def test_import_of_a_real_demo_run(demo_runs: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    result = invoke("history", "--import", str(demo_runs["a"]), "--db", str(db), "--model", "demo-a")
    assert result.exit_code == 0, result.output
    with History(db) as store:
        points = store.trend("sim/deepseek-v4")
    assert [p.cell_id for p in points] == ["tp8-full-fixon", "tp8-full-fixoff", "dp8-piecewise-fixon",
                                           "dp8-piecewise-fixoff"]  # the run's order
    assert all(p.metrics["gsm8k.n"] == 40 and "gsm8k.flexible" in p.metrics and p.metrics["repetition.n"] == 8
               for p in points)


def test_each_run_of_a_cell_says_its_checks_in_the_reports_words(tmp_path: Path) -> None:
    """The history keeps each cell's checks from its run's summary: the trend and the CSV say
    PASS, FAIL or INCONCLUSIVE per threshold (rules numbered in the table's caption)."""
    results = tmp_path / "results"
    for day, right in ((1, 18), (2, 10)):  # 18 of 20: above min 0.8, not surely; 10 of 20: surely below, 40 points down
        run, config = write_run(results, f"night-{day}", {"dp8-fixon": CellSpec(right=18), "dp8-fixoff": CellSpec(right=right)},
                                started_at=f"2026-12-0{day}T02:00:00+00:00")
        write_json(run / "summary.json", summarize(run, config))
    assert invoke("history", "--import", "all", "--results-dir", str(results)).exit_code == 0
    shown = invoke("history", "--model", "demo", "--cell", "dp8-fixoff", "--results-dir", str(results))
    text = " ".join(shown.output.split())
    assert "checks: #1 gsm8k.flexible min 0.8; #2 gsm8k.flexible max_drop_ab 0.1" in text
    night1, night2 = (line for line in shown.output.splitlines() if "night-" in line)
    assert "INCONCLUSIVE #1 · PASS #2" in night1 and "FAIL #1 #2" in night2
    table = invoke("history", "--model", "demo", "--cell", "dp8-fixoff", "--format", "csv", "--results-dir", str(results))
    assert [row.rsplit(",", 1)[-1] for row in table.output.splitlines()] == [
        "checks", "INCONCLUSIVE gsm8k.flexible min 0.8; PASS gsm8k.flexible max_drop_ab 0.1",
        "FAIL gsm8k.flexible min 0.8; FAIL gsm8k.flexible max_drop_ab 0.1"]
