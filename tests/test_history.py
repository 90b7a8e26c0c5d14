"""history.py: the schema after migrations, what a record holds (and never holds), trends, speed."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from evalkit.errors import ConfigError
from evalkit.store.history import MIGRATIONS, History, Point, cell_recorder, m001_initial, migrate, parse_since, record_finished_run
from tests.test_report_helpers import CellSpec, cell_record, loop_text, write_run

RUN_COLUMNS = ["run_id", "model", "config_name", "engine", "simulated", "status", "started_at", "finished_at",
               "limit_n", "command", "evalkit_version", "evalkit_git_sha", "lm_eval_version", "hostname",
               "run_path", "recorded_at"]
CELL_COLUMNS = ["run_id", "cell_id", "axes", "status", "error", "source_repo", "source_ref", "source_sha",
                "effective_mode", "started_at", "finished_at", "total_s", "timings", "gsm8k_strict",
                "gsm8k_flexible", "gsm8k_n", "collapse_rate", "collapse_n", "collapsed", "metrics", "recorded_at"]


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def run_info(run_id: str, started_at: str, model: str = "sim/deepseek-v4") -> dict:
    return {"run_id": run_id, "model": model, "engine": "sim", "config_path": "configs/demo.yaml",
            "status": "complete", "started_at": started_at, "command": ["evalkit", "matrix", "--model", "demo"]}


def three_nightlies(history: History) -> None:
    """Runs on Dec 1, 2, 3; the bug's cell gets worse each night."""
    for day, right in ((1, 19), (2, 16), (3, 12)):
        info = run_info(f"night-{day}", f"2026-12-0{day}T02:00:00+00:00")
        for cell_id, spec in (("tp8-fixon", CellSpec(right=19)), ("dp8-fixoff", CellSpec(right=right))):
            parallel, fix = cell_id.split("-")
            history.record_cell(info, cell_record(cell_id, {"parallel": parallel, "fix": fix}, spec))


@pytest.fixture
def history(tmp_path: Path) -> History:
    with History(tmp_path / "history.db") as store:
        yield store


def test_schema_after_migrations(tmp_path: Path) -> None:
    with History(tmp_path / "h.db") as store:
        db = store.db
        assert [name for (name,) in db.execute("SELECT name FROM _migrations")] == ["m001_initial", "m002_cell_metrics"]
        assert columns(db, "runs") == RUN_COLUMNS
        assert columns(db, "cells") == CELL_COLUMNS
        assert columns(db, "cell_metrics") == ["run_id", "cell_id", "name", "value"]
        indexes = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}
        assert indexes == {"runs_by_model", "runs_by_config", "cells_by_cell", "cell_metrics_by_name"}


def test_opening_again_applies_nothing_and_new_migrations_apply_once(tmp_path: Path) -> None:
    History(tmp_path / "h.db").close()
    db = sqlite3.connect(tmp_path / "h.db")
    assert migrate(db) == []

    def m999_add_note(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE runs ADD COLUMN note TEXT")

    assert migrate(db, [*MIGRATIONS, m999_add_note]) == ["m999_add_note"]
    assert migrate(db, [*MIGRATIONS, m999_add_note]) == []
    assert columns(db, "runs")[-1] == "note"


def test_three_recorded_runs_give_three_points_per_cell_in_time_order(history: History) -> None:
    three_nightlies(history)
    points = history.trend("sim/deepseek-v4")
    by_cell: dict[str, list[Point]] = {}
    for p in points:
        by_cell.setdefault(p.cell_id, []).append(p)
    assert {cell: len(series) for cell, series in by_cell.items()} == {"dp8-fixoff": 3, "tp8-fixon": 3}
    assert [p.run_id for p in by_cell["dp8-fixoff"]] == ["night-1", "night-2", "night-3"]
    assert [p.gsm8k_flexible for p in by_cell["dp8-fixoff"]] == [0.95, 0.8, 0.6]


def test_trend_filters_by_config_name_cell_and_since(history: History) -> None:
    three_nightlies(history)
    assert len(history.trend("demo")) == 6  # the config's name works as well as the model's
    assert [p.run_id for p in history.trend("demo", cells=["dp8-fixoff"], since="2026-12-02")] == ["night-2", "night-3"]
    assert history.trend("other-model") == []


def test_recording_a_cell_again_replaces_it_and_keeps_its_run_s_other_cells(history: History) -> None:
    three_nightlies(history)
    info = run_info("night-3", "2026-12-03T02:00:00+00:00") | {"status": "interrupted"}
    history.record_cell(info, cell_record("dp8-fixoff", {"parallel": "dp8", "fix": "fixoff"}, CellSpec(right=20)))
    night3 = [p for p in history.trend("demo") if p.run_id == "night-3"]
    assert sorted((p.cell_id, p.gsm8k_flexible) for p in night3) == [("dp8-fixoff", 1.0), ("tp8-fixon", 0.95)]
    assert history.db.execute("SELECT status FROM runs WHERE run_id = 'night-3'").fetchone() == ("interrupted",)


def test_nothing_from_the_environment_is_stored(tmp_path: Path) -> None:
    run_path, _ = write_run(tmp_path / "results", "r1", {"tp8-fixon": CellSpec(source_sha="c" * 40)})
    with History(tmp_path / "h.db") as store:
        assert store.import_run(run_path) == 1
    dump = "\n".join(sqlite3.connect(tmp_path / "h.db").iterdump())
    for secret in ("sk-launch-secret", "env-value-not-for-history", "HF_TOKEN", "sk-cmd-secret", "hunter2"):
        assert secret not in dump
    assert "https://github.com/ROCm/ATOM.git" in dump and "c" * 40 in dump


def test_import_of_a_stored_run_records_its_metrics(tmp_path: Path) -> None:
    cells = {"tp8-fixon": CellSpec(right=18, long_texts=["fine", loop_text("again and ")]),
             "tp8-fixoff": CellSpec(status="error", error="engine died")}
    run_path, _ = write_run(tmp_path / "results", "r1", cells)
    with History(tmp_path / "h.db") as store:
        assert store.import_run(run_path) == 2
        row = store.db.execute("SELECT gsm8k_strict, gsm8k_flexible, gsm8k_n, collapse_rate, collapse_n, status "
                               "FROM cells WHERE cell_id = 'tp8-fixon'").fetchone()
        failed = store.db.execute("SELECT status, error, gsm8k_flexible FROM cells WHERE cell_id = 'tp8-fixoff'").fetchone()
        run = store.db.execute("SELECT model, config_name, engine, limit_n, run_path FROM runs").fetchone()
        metrics = dict(store.db.execute("SELECT name, value FROM cell_metrics WHERE cell_id = 'tp8-fixon'"))
    assert metrics == {"gsm8k.strict": 0.9, "gsm8k.flexible": 0.9, "gsm8k.n": 20, "repetition.collapse_rate": 0.5,
                       "repetition.n": 2, "repetition.collapsed": 1}
    assert row == (0.9, 0.9, 20, 0.5, 2, "ok")
    assert failed == ("error", "engine died", None)
    assert run == ("sim/test-model", "demo", "sim", 20, str(run_path.resolve()))


def test_the_runner_hook_records_each_cell_and_never_raises(tmp_path: Path) -> None:
    write_run(tmp_path / "results", "r1", {"tp8-fixon": CellSpec()})
    hook = cell_recorder(tmp_path / "results" / "history.db", tmp_path / "results", "r1")
    hook(cell_record("tp8-fixon", {"parallel": "tp8", "fix": "fixon"}, CellSpec(right=10)))
    with History(tmp_path / "results" / "history.db") as store:
        assert [p.gsm8k_flexible for p in store.trend("demo")] == [0.5]
    warnings: list[str] = []
    (tmp_path / "blocked").write_text("a file where the database folder should be")
    broken = cell_recorder(tmp_path / "blocked" / "history.db", tmp_path / "results", "r1", warn=warnings.append)
    broken({"id": "tp8-fixon"})
    broken({"id": "tp8-fixoff"})
    assert len(warnings) == 1 and "evalkit history --import r1" in warnings[0]


def test_after_the_matrix_the_run_s_final_state_is_recorded_or_warned(tmp_path: Path) -> None:
    run_path, _ = write_run(tmp_path / "results", "r1", {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec()})
    record_finished_run(tmp_path / "h.db", run_path)
    with History(tmp_path / "h.db") as store:
        assert store.db.execute("SELECT status FROM runs").fetchall() == [("complete",)]
        assert len(store.trend("demo")) == 2
    warnings: list[str] = []
    record_finished_run(tmp_path / "h.db", tmp_path / "no-such-run", warn=warnings.append)
    assert len(warnings) == 1 and "no-such-run not recorded" in warnings[0]


def test_opening_an_m001_database_adds_cell_metrics_from_its_metrics_json(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "h.db")
    assert migrate(db, [m001_initial]) == ["m001_initial"]
    with db:
        db.execute("INSERT INTO runs (run_id, model, engine, started_at, recorded_at) VALUES ('r1', 'm', 'sim', "
                   "'2026-12-01T02:00:00+00:00', '')")
        for cell_id, metrics in (("ok", '{"gsm8k.flexible": 0.9, "gsm8k.n": 20, "gsm8k.flexible_ci95": [0.7, 0.97], '
                                        '"gsm8k.retries": null, "repetition.collapsed": 1, "x.flag": true}'),
                                 ("failed", "{}"), ("hand-written", "not json")):
            db.execute("INSERT INTO cells (run_id, cell_id, axes, status, metrics, recorded_at) "
                       "VALUES ('r1', ?, '{}', 'ok', ?, '')", (cell_id, metrics))
    db.close()
    with History(tmp_path / "h.db") as store:
        applied = [name for (name,) in store.db.execute("SELECT name FROM _migrations ORDER BY rowid")]
        rows = sorted(store.db.execute("SELECT cell_id, name, value FROM cell_metrics"))
    assert applied == ["m001_initial", "m002_cell_metrics"]
    assert rows == [("ok", "gsm8k.flexible", 0.9), ("ok", "gsm8k.n", 20.0), ("ok", "repetition.collapsed", 1.0),
                    ("ok", "x.flag", 1.0)]


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-12-01", "2026-12-01T00:00:00+00:00"),
    ("2026-12-01T03:00:00+01:00", "2026-12-01T02:00:00+00:00"),
])
def test_since_accepts_dates_and_iso_times(text: str, expected: str) -> None:
    assert parse_since(text) == expected


def test_since_accepts_relative_days_and_rejects_nonsense() -> None:
    assert parse_since("7d") < parse_since("1d") < parse_since("1h")
    with pytest.raises(ConfigError, match="--since 'last tuesday'"):
        parse_since("last tuesday")


def test_a_thousand_runs_trend_in_well_under_a_second(tmp_path: Path) -> None:
    with History(tmp_path / "h.db") as store:
        with store.db:
            for i in range(1000):
                day = f"2026-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}T02:{i % 60:02d}:00+00:00"
                store.db.execute("INSERT INTO runs (run_id, model, config_name, engine, started_at, recorded_at) "
                                 "VALUES (?, ?, 'demo', 'sim', ?, ?)", (f"r{i}", "m" if i % 2 else "other", day, day))
                store.db.executemany(
                    "INSERT INTO cells (run_id, cell_id, axes, status, gsm8k_flexible, metrics, recorded_at) "
                    "VALUES (?, ?, '{}', 'ok', 0.9, '{}', '')", [(f"r{i}", f"cell-{c}") for c in range(12)])
        started = time.perf_counter()
        points = store.trend("m", cells=["cell-3"])
        everything = store.trend("m")
        elapsed = time.perf_counter() - started
    assert len(points) == 500 and len(everything) == 6000
    assert elapsed < 0.5
