"""history.py and its trend view: the schema after migrations, the m001 -> m002 upgrade, what a
record holds (and never holds), trends of any registered eval's metrics, the table and panels.

Speed is measured by benchmarks/history.py, not asserted here: a loaded machine is no failure."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from evalkit.errors import ConfigError
from evalkit.evals import registry
from evalkit.evals.base import Comparison, Eval, EvalSettings, MetricDisplay, MetricSpec
from evalkit.history.db import (
    History,
    Point,
    by_cell,
    cell_recorder,
    parse_since,
    record_finished_run,
)
from evalkit.history.schema import MIGRATIONS, m001_initial, migrate
from evalkit.render.trend import _alike_segments, layout, panel_label, panels, trend_table
from evalkit.verdict.deltas import flat_metrics
from tests.helpers.runs import CellSpec, cell_record, loop_text, write_run

RUN_COLUMNS = ["run_id", "model", "config_name", "engine", "simulated", "status", "started_at", "finished_at",
               "limit_n", "command", "evalkit_version", "evalkit_git_sha", "lm_eval_version", "hostname",
               "run_path", "recorded_at"]
CELL_COLUMNS = ["run_id", "cell_id", "axes", "status", "error", "source_repo", "source_ref", "source_sha",
                "effective_mode", "started_at", "finished_at", "total_s", "timings", "gsm8k_strict",
                "gsm8k_flexible", "gsm8k_n", "collapse_rate", "collapse_n", "collapsed", "metrics", "recorded_at",
                "setups", "checks", "comparability", "cost"]
MIGRATION_NAMES = ["m001_initial", "m002_cell_metrics", "m003_cell_setups", "m004_cell_checks", "m005_dashboard_points",
                   "m006_cell_keys", "m007_accepted_levels", "m008_cell_costs"]
CELL_METRIC_COLUMNS = ["run_id", "cell_id", "name", "value"]


def columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def run_info(run_id: str, started_at: str, model: str = "sim/deepseek-v4") -> dict:
    return {"run_id": run_id, "model": model, "engine": "sim", "config_path": "configs/demo.yaml",
            "status": "complete", "started_at": started_at, "command": ["evalkit", "matrix", "--model", "demo"]}


def record(history: History, info: dict, cell_id: str, spec: CellSpec, **extra_metrics: Any) -> None:
    parallel, fix = cell_id.split("-")
    cell = cell_record(cell_id, {"parallel": parallel, "fix": fix}, spec)
    cell["metrics"] |= extra_metrics
    history.record_cell(info, cell, flat(cell))


def three_nightlies(history: History) -> None:
    """Runs on Dec 1, 2, 3; the bug's cell gets worse each night."""
    for day, right in ((1, 19), (2, 16), (3, 12)):
        info = run_info(f"night-{day}", f"2026-12-0{day}T02:00:00+00:00")
        for cell_id, spec in (("tp8-fixon", CellSpec(right=19)), ("dp8-fixoff", CellSpec(right=right))):
            record(history, info, cell_id, spec)


def flexible(points: list[Point]) -> list[float | None]:
    return [p.metrics.get("gsm8k.flexible") for p in points]


def rendered(table: object, width: int = 130) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(table)
    return out.getvalue()


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    with History(tmp_path / "history.db") as store:
        yield store


class WordsSettings(EvalSettings):
    pass


class Words(Eval):
    """A toy eval from outside evalkit: one continuous metric, with a column and a plot panel."""

    name = "words"
    settings_model = WordsSettings
    metrics = (MetricSpec("words.count", Comparison.CONTINUOUS,
                          MetricDisplay("words per answer", key="words", column="words per answer",
                                        pivot="Words per answer by configuration")),)
    default_enabled = False

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return {"words.count": raw["count"], "words.note": raw["note"]}


def flat(record: dict[str, Any]) -> dict[str, Any]:
    """A stored cell's flat metrics as the history reads them: by the registered evals."""
    return flat_metrics(record, registry.builtins())


@pytest.fixture
def words_eval() -> Iterator[Words]:
    ev = registry.register(Words())
    try:
        yield ev
    finally:
        registry.unregister(ev.name)


def test_schema_after_migrations(tmp_path: Path) -> None:
    with History(tmp_path / "h.db") as store:
        db = store.db
        assert [name for (name,) in db.execute("SELECT name FROM _migrations")] == MIGRATION_NAMES
        assert columns(db, "runs") == RUN_COLUMNS
        assert columns(db, "dashboard_points") == ["source", "suite", "name", "commit_sha", "date", "value", "unit",
                                                   "bigger_is_better", "run_url", "floor", "extra"]
        assert columns(db, "cells") == CELL_COLUMNS
        assert columns(db, "cell_metrics") == CELL_METRIC_COLUMNS
        assert columns(db, "accepted_levels") == ["series", "from_commit", "why", "accepted_at"]
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
    series = by_cell(history.trend("sim/deepseek-v4"))
    assert {cell: len(points) for cell, points in series.items()} == {"tp8-fixon": 3, "dp8-fixoff": 3}
    assert [p.run_id for p in series["dp8-fixoff"]] == ["night-1", "night-2", "night-3"]
    assert flexible(series["dp8-fixoff"]) == [0.95, 0.8, 0.6]
    assert series["dp8-fixoff"][0].metrics == {"gsm8k.strict": 0.95, "gsm8k.flexible": 0.95, "gsm8k.n": 20,
                                               "gsm8k.n_eff": 20.0, "gsm8k.unscorable": 0.0}


def test_trend_filters_by_config_name_cell_and_since(history: History) -> None:
    three_nightlies(history)
    assert len(history.trend("demo")) == 6  # the config's name works as well as the model's
    assert [p.run_id for p in history.trend("demo", cells=["dp8-fixoff"], since="2026-12-02")] == ["night-2", "night-3"]
    assert history.trend("other-model") == []


def test_recording_a_cell_again_replaces_it_and_keeps_its_run_s_other_cells(history: History) -> None:
    three_nightlies(history)
    info = run_info("night-3", "2026-12-03T02:00:00+00:00") | {"status": "interrupted"}
    record(history, info, "dp8-fixoff", CellSpec(right=20))
    night3 = [p for p in history.trend("demo") if p.run_id == "night-3"]
    assert sorted((p.cell_id, p.metrics["gsm8k.flexible"]) for p in night3) == [("dp8-fixoff", 1.0), ("tp8-fixon", 0.95)]
    assert history.db.execute("SELECT status FROM runs WHERE run_id = 'night-3'").fetchone() == ("interrupted",)


def test_a_rewritten_cell_keeps_no_metric_of_its_old_record(history: History) -> None:
    info = run_info("night-1", "2026-12-01T02:00:00+00:00")
    record(history, info, "tp8-fixon", CellSpec(long_texts=["fine"]))
    record(history, info, "tp8-fixon", CellSpec(status="error", error="engine died"))
    [point] = history.trend("demo")
    assert (point.status, point.metrics) == ("error", {})
    assert history.db.execute("SELECT COUNT(*) FROM cell_metrics").fetchone() == (0,)


def test_nothing_from_the_environment_is_stored(tmp_path: Path) -> None:
    run_path, _ = write_run(tmp_path / "results", "r1", {"tp8-fixon": CellSpec(source_sha="c" * 40)})
    with History(tmp_path / "h.db") as store:
        assert store.import_run(run_path, flat) == 1
        (key,) = store.db.execute("SELECT comparability FROM cells").fetchone()
    dump = "\n".join(sqlite3.connect(tmp_path / "h.db").iterdump())
    for secret in ("sk-launch-secret", "env-value-not-for-history", "HF_TOKEN", "sk-cmd-secret", "hunter2"):
        assert secret not in dump
    assert "https://github.com/ROCm/ATOM.git" in dump and "c" * 40 in dump
    stored = json.loads(key)  # the comparability key is kept, its launch's argv and env as hashes only
    assert stored["argv"][0].startswith("sha256:") and stored["env"][0][0] == "sha256" and stored["model"] == "sim/test-model"


def test_import_of_a_stored_run_records_its_metrics(tmp_path: Path) -> None:
    cells = {"tp8-fixon": CellSpec(right=18, long_texts=["fine", loop_text("again and ")]),
             "tp8-fixoff": CellSpec(status="error", error="engine died")}
    run_path, _ = write_run(tmp_path / "results", "r1", cells)
    with History(tmp_path / "h.db") as store:
        assert store.import_run(run_path, flat) == 2
        metrics = dict(store.db.execute("SELECT name, value FROM cell_metrics WHERE cell_id = 'tp8-fixon'"))
        legacy = store.db.execute("SELECT gsm8k_strict, gsm8k_flexible, gsm8k_n, collapse_rate, collapse_n, collapsed, "
                                  "status FROM cells WHERE cell_id = 'tp8-fixon'").fetchone()
        failed = store.db.execute("SELECT status, error, gsm8k_flexible FROM cells WHERE cell_id = 'tp8-fixoff'").fetchone()
        failed_metrics = store.db.execute("SELECT COUNT(*) FROM cell_metrics WHERE cell_id = 'tp8-fixoff'").fetchone()
        run = store.db.execute("SELECT model, config_name, engine, limit_n, run_path FROM runs").fetchone()
    # Every numeric flat metric is a row; lists (the _ci95 pairs) stay in the JSON column only.
    assert metrics == {"gsm8k.strict": 0.9, "gsm8k.flexible": 0.9, "gsm8k.n": 20, "gsm8k.n_eff": 20.0,
                       "gsm8k.unscorable": 0.0, "repetition.collapse_rate": 0.5,
                       "repetition.n": 2, "repetition.collapsed": 1}
    assert legacy == (0.9, 0.9, 20, 0.5, 2, 1, "ok")  # m001's columns are still filled, for users' SQL
    assert failed == ("error", "engine died", None) and failed_metrics == (0,)
    assert run == ("sim/test-model", "demo", "sim", 20, str(run_path.resolve()))


def test_the_runner_hook_records_each_cell_and_never_raises(tmp_path: Path) -> None:
    write_run(tmp_path / "results", "r1", {"tp8-fixon": CellSpec()})
    hook = cell_recorder(tmp_path / "results" / "history.db", tmp_path / "results", "r1", flat)
    hook(cell_record("tp8-fixon", {"parallel": "tp8", "fix": "fixon"}, CellSpec(right=10)))
    with History(tmp_path / "results" / "history.db") as store:
        assert flexible(store.trend("demo")) == [0.5]
    warnings: list[str] = []
    (tmp_path / "blocked").write_text("a file where the database folder should be")
    broken = cell_recorder(tmp_path / "blocked" / "history.db", tmp_path / "results", "r1", flat,
                           warn=warnings.append)
    broken({"id": "tp8-fixon"})
    broken({"id": "tp8-fixoff"})
    assert len(warnings) == 1 and "evalkit history --import r1" in warnings[0]


def test_after_the_matrix_the_run_s_final_state_is_recorded_or_warned(tmp_path: Path) -> None:
    run_path, _ = write_run(tmp_path / "results", "r1", {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec()})
    record_finished_run(tmp_path / "h.db", run_path, flat)
    with History(tmp_path / "h.db") as store:
        assert store.db.execute("SELECT status FROM runs").fetchall() == [("complete",)]
        assert len(store.trend("demo")) == 2
    warnings: list[str] = []
    record_finished_run(tmp_path / "h.db", tmp_path / "no-such-run", flat, warn=warnings.append)
    assert len(warnings) == 1 and "no-such-run not recorded" in warnings[0]


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


def test_a_thousand_runs_give_every_point_of_the_cell_asked_for(tmp_path: Path) -> None:
    """benchmarks/history.py times this shape (1,000 runs x 12 cells); here only what comes back."""
    with History(tmp_path / "h.db") as store:
        with store.db:
            for i in range(1000):
                day = f"2026-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}T02:{i % 60:02d}:00+00:00"
                store.db.execute("INSERT INTO runs (run_id, model, config_name, engine, started_at, recorded_at) "
                                 "VALUES (?, ?, 'demo', 'sim', ?, ?)", (f"r{i}", "m" if i % 2 else "other", day, day))
                store.db.executemany(
                    "INSERT INTO cells (run_id, cell_id, axes, status, metrics, recorded_at) VALUES (?, ?, '{}', 'ok', '{}', '')",
                    [(f"r{i}", f"cell-{c}") for c in range(12)])
                store.db.executemany("INSERT INTO cell_metrics VALUES (?, ?, ?, ?)",
                                     [(f"r{i}", f"cell-{c}", name, i / 1000) for c in range(12) for name in ("a.x", "a.n")])
        points = store.trend("m", cells=["cell-3"])
        everything = store.trend("m")
    assert len(points) == 500 and len(everything) == 6000
    assert {p.cell_id for p in points} == {"cell-3"} and len({p.run_id for p in points}) == 500
    assert [p.started_at for p in points] == sorted(p.started_at for p in points)
    assert all(p.metrics == {"a.x": int(p.run_id[1:]) / 1000, "a.n": int(p.run_id[1:]) / 1000} for p in everything)


# ---------------------------------------------------------------------------------------------
# Upgrading a database of the first schema


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
        points = {p.cell_id: p.metrics for p in store.trend("m")}
    assert applied == MIGRATION_NAMES
    assert rows == [("ok", "gsm8k.flexible", 0.9), ("ok", "gsm8k.n", 20.0), ("ok", "repetition.collapsed", 1.0),
                    ("ok", "x.flag", 1.0)]
    assert points == {"ok": {"gsm8k.flexible": 0.9, "gsm8k.n": 20, "repetition.collapsed": 1, "x.flag": 1},
                      "failed": {}, "hand-written": {}}


# ---------------------------------------------------------------------------------------------
# The trend table and plot: columns and panels from the registry


TODAY_S_TABLE = """\
                                                    evalkit history: demo
┏━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━┓
┃ cell                     ┃ run started (UTC) ┃ run     ┃ source ┃ status ┃ strict ┃ flexible ┃ Δ flexible ┃ collapse ┃ n  ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━┩
│ tp8-fixon (last 2 of 3)  │ 2026-12-02 02:00  │ night-2 │ -      │ ok     │ 0.950  │ 0.950    │ +0.0       │ 0.000    │ 20 │
│                          │ 2026-12-03 02:00  │ night-3 │ -      │ ok     │ 0.950  │ 0.950    │ +0.0       │ 0.000    │ 20 │
├──────────────────────────┼───────────────────┼─────────┼────────┼────────┼────────┼──────────┼────────────┼──────────┼────┤
│ dp8-fixoff (last 2 of 3) │ 2026-12-02 02:00  │ night-2 │ -      │ error  │ -      │ -        │ -          │ -        │ -  │
│                          │ 2026-12-03 02:00  │ night-3 │ -      │ ok     │ 0.600  │ 0.600    │ -35.0      │ -        │ 20 │
└──────────────────────────┴───────────────────┴─────────┴────────┴────────┴────────┴──────────┴────────────┴──────────┴────┘
"""
"""The first schema's table, as the code before the registry drove it rendered it (lines rstripped)."""


def test_the_built_in_evals_give_today_s_table_exactly(history: History) -> None:
    for day, right in ((1, 19), (2, 16), (3, 12)):
        info = run_info(f"night-{day}", f"2026-12-0{day}T02:00:00+00:00")
        record(history, info, "tp8-fixon", CellSpec(right=19, long_texts=["fine"]))
        # night 2 failed: Δ on night 3 is against night 1, the cell's last measured run
        record(history, info, "dp8-fixoff", CellSpec(status="error") if day == 2 else CellSpec(right=right))
    table = rendered(trend_table(history.trend("demo"), "evalkit history: demo", last=2))
    assert [line.rstrip() for line in table.splitlines()] == TODAY_S_TABLE.splitlines()


def test_a_trend_never_shows_a_delta_between_runs_of_another_n_without_saying_so(history: History) -> None:
    """Night 2 was a `--limit 10` run: its score is not compared with night 1's 20 questions, and
    night 3, full again, is compared with night 1, the last run alike, by name."""
    for day, right, n in ((1, 19, 20), (2, 8, 10), (3, 17, 20)):
        cell = cell_record("tp8-fixon", {"parallel": "tp8", "fix": "fixon"}, CellSpec(right=right))
        cell["metrics"]["gsm8k"] |= {"n": n, "flexible": right / n, "strict": right / n}
        history.record_cell(run_info(f"night-{day}", f"2026-12-0{day}T02:00:00+00:00"), cell, flat(cell))
    text = " ".join(rendered(trend_table(history.trend("sim/deepseek-v4"), "t", None), width=240).split())
    assert "gsm8k question set: 20 vs 10; no earlier run alike" in text and "-15.0" not in text  # 0.80 vs 0.95 is no trend
    assert "gsm8k question set: 10 vs 20; -10.0 since night-1" in text  # 0.85 vs night 1's 0.95, not vs night 2's 0.80
    segments = _alike_segments(history.trend("sim/deepseek-v4"), "gsm8k")  # the plot draws no line through night 2
    assert [[p.run_id for p in segment] for segment in segments] == [["night-1"], ["night-2"], ["night-3"]]


def test_columns_and_panels_follow_the_report_s_metric_specs() -> None:
    columns = layout()
    assert columns.headers() == ["strict", "flexible", "Δ flexible", "collapse", "tokens/s", "TPOT", "spec_acceptance", "n"]
    assert (columns.headline.name, columns.n_metric) == ("gsm8k.flexible", "gsm8k.n")
    both = [Point("r", "c", None, "m", "sim", "ok", None, {"gsm8k.flexible": 0.9, "repetition.collapse_rate": 0.1})]
    assert [panel_label(spec) for spec in panels(both)] == ["GSM8K flexible accuracy", "collapse rate"]
    no_collapse = [Point("r", "c", None, "m", "sim", "ok", None, {"gsm8k.flexible": 0.9})]
    assert [panel_label(spec) for spec in panels(no_collapse)] == ["GSM8K flexible accuracy"]
    assert [panel_label(spec) for spec in panels([])] == ["GSM8K flexible accuracy"]  # never an empty figure


def test_a_new_eval_s_metric_is_recorded_trended_and_shown(history: History, words_eval: Words) -> None:
    info = run_info("night-1", "2026-12-01T02:00:00+00:00")
    record(history, info, "tp8-fixon", CellSpec(right=19), words={"count": 42, "note": "not a number"})
    [point] = history.trend("demo")
    assert point.metrics["words.count"] == 42 and "words.note" not in point.metrics
    assert layout().headers() == ["strict", "flexible", "Δ flexible", "collapse", "tokens/s", "TPOT", "spec_acceptance", "words", "n"]
    assert [spec.name for spec in panels([point])] == ["gsm8k.flexible", "words.count"]
    row = next(line for line in rendered(trend_table([point], "t"), width=160).splitlines() if "night-1" in line)
    assert [cell.strip() for cell in row.strip("│").split("│")][5:] == ["0.950", "0.950", "-", "42.000", "20"]  # no collapse measured: no column


def test_trend_plot_draws_a_new_eval_s_panel(history: History, words_eval: Words, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from evalkit.render.trend import plot

    for day in (1, 2):
        record(history, run_info(f"night-{day}", f"2026-12-0{day}T02:00:00+00:00"), "tp8-fixon", CellSpec(),
               words={"count": 40 + day, "note": ""})
    out = tmp_path / "trend.png"
    plot(history.trend("demo"), out, "t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_trend_says_where_the_eval_setup_changed_instead_of_a_delta(history: History) -> None:
    """Night 2 ran GSM8K 3-shot, night 3 5-shot: its change is not a regression, it is not comparable."""
    from evalkit.evals.base import fingerprint

    for day, right, shots in ((1, 19, 3), (2, 18, 3), (3, 12, 5)):
        info = run_info(f"night-{day}", f"2026-12-0{day}T02:00:00+00:00")
        parallel, fix = "tp8", "fixon"
        cell = cell_record("tp8-fixon", {"parallel": parallel, "fix": fix}, CellSpec(right=right))
        cell["metrics"]["gsm8k"]["setup"] = fingerprint({"num_fewshot": shots, "endpoint": "completions"})
        history.record_cell(info, cell, flat(cell))
    points = history.trend("sim/deepseek-v4")
    assert [p.setups["gsm8k"]["fields"]["num_fewshot"] for p in points] == [3, 3, 5]
    text = rendered(trend_table(points, "t", None), width=200)
    assert "-5.0" in text  # night 2 against night 1: the same setup, a real delta
    assert "gsm8k setup: num_fewshot 3 vs 5" in text and "-30.0" not in text  # night 3: not compared
