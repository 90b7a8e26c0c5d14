"""The history database's schema: named migrations, applied once each, in order, when a store is opened.

The simonw/llm way: each migration is a function `mNNN_what(db)`, recorded by name in `_migrations`;
never edit a released one, append a new one. `migrate` applies those not yet recorded, each in its
own transaction. The tables: `runs` and `cells` (m001), `cell_metrics` (m002: one row per numeric
metric), each cell's eval setups (m003) and checks (m004), imported dashboards (m005,
history/imports.py), each cell's comparability key (m006: what decides its figures, so a series is
one key), the levels a person accepted (m007: history/accept.py reads them) and each cell's cost
(m008: history/timing.py reads it).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from evalkit.history.imports import m005_dashboard_points

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    """Register a migration; its function name is its identity in `_migrations`."""
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(db: sqlite3.Connection) -> None:
    db.execute("""
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            model TEXT NOT NULL,
            config_name TEXT,
            engine TEXT NOT NULL,
            simulated INTEGER NOT NULL DEFAULT 0,
            status TEXT,
            started_at TEXT,
            finished_at TEXT,
            limit_n INTEGER,
            command TEXT,
            evalkit_version TEXT,
            evalkit_git_sha TEXT,
            lm_eval_version TEXT,
            hostname TEXT,
            run_path TEXT,
            recorded_at TEXT NOT NULL
        )""")
    db.execute("""
        CREATE TABLE cells (
            run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
            cell_id TEXT NOT NULL,
            axes TEXT NOT NULL,
            status TEXT NOT NULL,
            error TEXT,
            source_repo TEXT,
            source_ref TEXT,
            source_sha TEXT,
            effective_mode TEXT,
            started_at TEXT,
            finished_at TEXT,
            total_s REAL,
            timings TEXT,
            gsm8k_strict REAL,
            gsm8k_flexible REAL,
            gsm8k_n INTEGER,
            collapse_rate REAL,
            collapse_n INTEGER,
            collapsed INTEGER,
            metrics TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            PRIMARY KEY (run_id, cell_id)
        )""")
    # The trend query filters runs by model (or config name) and time, then joins cells by run.
    db.execute("CREATE INDEX runs_by_model ON runs (model, started_at)")
    db.execute("CREATE INDEX runs_by_config ON runs (config_name, started_at)")
    db.execute("CREATE INDEX cells_by_cell ON cells (cell_id, run_id)")


@migration
def m002_cell_metrics(db: sqlite3.Connection) -> None:
    """One row per numeric flat metric of a cell, so any eval's metric is a trend without a column.

    The key is the clustered index (WITHOUT ROWID) of the trend query's join from a cell to its
    metrics; `cell_metrics_by_name` serves one metric of one cell over time (`WHERE name = ?
    AND cell_id = ?`). Backfilled from `cells.metrics`, which has held every flat metric since
    m001. The numeric rule is written out here, not shared, so this migration never changes:
    numbers and booleans (as 1/0) that are finite; lists (`_ci95`), strings and nulls are not rows.
    """
    db.execute("""
        CREATE TABLE cell_metrics (
            run_id TEXT NOT NULL,
            cell_id TEXT NOT NULL,
            name TEXT NOT NULL,
            value REAL NOT NULL,
            PRIMARY KEY (run_id, cell_id, name),
            FOREIGN KEY (run_id, cell_id) REFERENCES cells (run_id, cell_id) ON DELETE CASCADE
        ) WITHOUT ROWID""")
    db.execute("CREATE INDEX cell_metrics_by_name ON cell_metrics (name, cell_id)")
    rows = []
    for run_id, cell_id, text in db.execute("SELECT run_id, cell_id, metrics FROM cells"):
        try:
            metrics = json.loads(text)
        except (TypeError, ValueError):
            continue  # not written by evalkit; the row keeps its JSON, the trend shows "-"
        rows += [(run_id, cell_id, name, float(value)) for name, value in (metrics or {}).items()
                 if isinstance(value, (int, float)) and math.isfinite(value)]
    db.executemany("INSERT INTO cell_metrics (run_id, cell_id, name, value) VALUES (?, ?, ?, ?)", rows)


@migration
def m003_cell_setups(db: sqlite3.Connection) -> None:
    """Each cell's eval setup fingerprints ({eval: hash}), so a trend can say where the setup
    changed instead of showing a delta between unlike scores. Backfilled as NULL: cells recorded
    before fingerprints existed compare as before."""
    db.execute("ALTER TABLE cells ADD COLUMN setups TEXT")


@migration
def m004_cell_checks(db: sqlite3.Connection) -> None:
    """Each cell's threshold checks as its run's summary.json holds them (verdict/checks.py: PASS, FAIL or
    INCONCLUSIVE with the MDE), so a trend says each run's verdict in the report's words. NULL
    before, and while the run has no summary yet (cells are recorded as they finish)."""
    db.execute("ALTER TABLE cells ADD COLUMN checks TEXT")


migration(m005_dashboard_points)  # history/imports.py: dashboards evalkit did not write


@migration
def m006_cell_keys(db: sqlite3.Connection) -> None:
    """Each cell's comparability key (store/comparability.py) as JSON, its engine arguments and
    environment held as hashes only (the history keeps nothing from the environment), so a series is
    the points of one key. NULL before: such a cell's key is read from its setups and n
    (`series.stored_key`), and `evalkit history --import` of its run folder records the whole key."""
    db.execute("ALTER TABLE cells ADD COLUMN comparability TEXT")


@migration
def m007_accepted_levels(db: sqlite3.Connection) -> None:
    """A level a person accepted (`evalkit history accept SERIES --from COMMIT --why TEXT`): from that
    commit on, the series' level is read from its points there and after; the judge never moves a
    level by itself."""
    db.execute("""
        CREATE TABLE accepted_levels (
            series TEXT NOT NULL,
            from_commit TEXT NOT NULL,
            why TEXT NOT NULL,
            accepted_at TEXT NOT NULL,
            PRIMARY KEY (series, from_commit)
        ) WITHOUT ROWID""")


@migration
def m008_cell_costs(db: sqlite3.Connection) -> None:
    """Each cell's cost as cell.json records it (store/costs.py: devices held, wall, device-seconds
    per phase, the eval waited on last), so `evalkit plan` estimates the next night's GPU-hours and
    its evals' wall (one after another, or a wave) from the last ones. NULL before: nothing measured
    the phases' spans, and the devices a cell held are not in its row; plan reads such a cell's
    `timings` as before and takes its devices from the config."""
    db.execute("ALTER TABLE cells ADD COLUMN cost TEXT")


def migrate(db: sqlite3.Connection, migrations: Iterable[Migration] = MIGRATIONS) -> list[str]:
    """Apply the migrations not yet recorded, each in its own transaction; returns their names."""
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    db.commit()
    done = {name for (name,) in db.execute("SELECT name FROM _migrations")}
    applied = []
    for fn in migrations:
        if fn.__name__ in done:
            continue
        with db:
            fn(db)
            db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (fn.__name__, now()))
        applied.append(fn.__name__)
    return applied


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
