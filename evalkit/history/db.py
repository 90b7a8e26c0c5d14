"""Every finished cell in one SQLite file, so a nightly's trend is one query away.

A run folder answers "what happened in this run"; the history answers "since when is this cell
worse". It is a cache of the run folders, never the source of truth: `import_run` rebuilds any
run's rows from its folder, and writing the same cell twice replaces it (upsert), so the run's
per-cell hook and a later backfill agree.

The schema upgrades itself when the store is opened (history/schema.py: named migrations, the
simonw/llm way).

What is stored: run and cell identity (ids, axes, model, engine, engine source repo/ref/SHA),
status, timings, timestamps and the flat metrics of every registered eval: all of them as JSON
in `cells.metrics`, and each numeric one as a row of `cell_metrics (run_id, cell_id, name,
value)`, which is what `trend` reads, so a new eval's metrics are recorded and trended with no
edit here. The GSM8K and collapse columns of `cells` (`gsm8k_flexible`, `collapse_rate`, ...)
are still filled for SQL written against the first schema; evalkit itself no longer reads them.
What is not stored: anything from the environment (no env, no argv of the engine launch, no log
tails); clone URLs lose any `user:token@`, and evalkit's own command line goes through
redact_argv.

Showing a trend (table, plot) is `evalkit.render.trend`; this module is the database.
Default location: `<results_dir>/history.db` (`default_db_path`).
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from evalkit.errors import ConfigError
from evalkit.evals.base import SETUP_KEY
from evalkit.history.keys import stored_key
from evalkit.history.schema import migrate, now
from evalkit.redact import redact_argv, strip_userinfo
from evalkit.store import read_json

DB_NAME = "history.db"
BUSY_TIMEOUT_MS = 30_000
"""Two matrices finishing cells at once wait for each other instead of failing."""

def default_db_path(results_dir: Path) -> Path:
    return results_dir / DB_NAME


@dataclass(frozen=True)
class Point:
    """One cell of one run: a point of that cell's trend."""

    run_id: str
    cell_id: str
    started_at: str | None
    model: str
    engine: str
    status: str
    source_sha: str | None
    metrics: dict[str, float] = field(default_factory=dict, hash=False)
    """The cell's numeric flat metrics by dotted name (`gsm8k.flexible`, `repetition.n`, ...);
    a metric the cell did not report (a failed cell, an eval that did not run) is absent."""
    setups: dict[str, Any] = field(default_factory=dict, hash=False)
    """Each eval's setup fingerprint ({"hash", "fields"}) as the cell recorded it ({} before m003)."""
    checks: list[dict[str, Any]] | None = field(default=None, hash=False)
    """The cell's threshold checks in its run's summary (None: not recorded, see m004)."""
    key: str | None = field(default=None, hash=False)
    """The cell's comparability key as stored (history/keys.py; None: recorded before m006)."""

    @property
    def when(self) -> datetime | None:
        try:
            return datetime.fromisoformat(self.started_at) if self.started_at else None
        except ValueError:
            return None


def _run_row(run: dict[str, Any]) -> dict[str, Any]:
    config_path = run.get("config_path")
    return {
        "run_id": run["run_id"], "model": run.get("model") or "?", "engine": run.get("engine") or "?",
        "config_name": Path(config_path).stem if config_path else None,
        "simulated": int(bool(run.get("simulated"))), "status": run.get("status"),
        "started_at": run.get("started_at"), "finished_at": run.get("finished_at"), "limit_n": run.get("limit"),
        "command": json.dumps(redact_argv(run["command"])) if run.get("command") else None,
        "evalkit_version": run.get("evalkit_version"), "evalkit_git_sha": run.get("evalkit_git_sha"),
        "lm_eval_version": run.get("lm_eval_version"), "hostname": (run.get("host") or {}).get("hostname"),
        "run_path": run.get("run_path"), "recorded_at": now(),
    }


LEGACY_COLUMNS = {"gsm8k_strict": "gsm8k.strict", "gsm8k_flexible": "gsm8k.flexible", "gsm8k_n": "gsm8k.n",
                  "collapse_rate": "repetition.collapse_rate", "collapse_n": "repetition.n",
                  "collapsed": "repetition.collapsed"}
"""m001's metric columns of `cells` -> the flat metric each holds. Still written, for users' SQL;
new evals get no column (their metrics are rows of `cell_metrics`)."""


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The flat metrics that are rows of `cell_metrics`: finite numbers and booleans (as 1/0).
    Lists (`gsm8k.flexible_ci95`), strings and None stay in the JSON column only."""
    return {name: float(value) for name, value in metrics.items()
            if isinstance(value, (int, float)) and math.isfinite(value)}


def _cell_row(run: dict[str, Any], record: dict[str, Any], metrics: dict[str, Any],
              checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The columns of one cell; only the fields named here leave cell.json (no launch, no env: the
    comparability key holds the launch's arguments and environment as hashes)."""
    source = record.get("source") or {}
    timings = record.get("timings") or {}
    return {
        "run_id": run["run_id"], "cell_id": record["id"], "axes": json.dumps(record.get("axes", {})),
        "status": record.get("status") or "?", "error": (record.get("error") or {}).get("message"),
        "source_repo": strip_userinfo(source["repo"]) if source.get("repo") else None,
        "source_ref": source.get("ref"), "source_sha": source.get("sha"),
        "effective_mode": record.get("effective_mode"), "started_at": record.get("started_at"),
        "finished_at": record.get("finished_at"), "total_s": timings.get("total_s"), "timings": json.dumps(timings),
        **{column: metrics.get(name) for column, name in LEGACY_COLUMNS.items()},
        "metrics": json.dumps(metrics, allow_nan=False, default=str), "recorded_at": now(),
        "setups": json.dumps({name: raw[SETUP_KEY] for name, raw in (record.get("metrics") or {}).items()
                              if isinstance(raw, dict) and raw.get(SETUP_KEY)}, default=str),
        "checks": None if checks is None else json.dumps(checks, default=str),
        "comparability": stored_key(run, record),
        "cost": json.dumps(record["cost"]) if record.get("cost") else None,
    }


def _upsert(db: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    names = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    db.execute(f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({marks})", row)


Flatten = Callable[[dict[str, Any]], dict[str, Any]]
"""A cell record -> its flat metrics (`verdict.deltas.flat_metrics`): the caller's, so the history, below
the verdicts, never imports them."""


def _write_cell(db: sqlite3.Connection, run: dict[str, Any], record: dict[str, Any], metrics: dict[str, Any],
                checks: list[dict[str, Any]] | None = None) -> None:
    """The cell's row and its metric rows (`metrics`: its flat metrics); a rewrite replaces both (a
    metric the new record lacks is gone, not left over from the old one)."""
    run_id = run["run_id"]
    _upsert(db, "cells", _cell_row(run, record, metrics, checks))
    # With foreign keys on, the REPLACE above already cascaded; SQL clients without them did not.
    db.execute("DELETE FROM cell_metrics WHERE run_id = ? AND cell_id = ?", (run_id, record["id"]))
    db.executemany("INSERT INTO cell_metrics (run_id, cell_id, name, value) VALUES (?, ?, ?, ?)",
                   [(run_id, record["id"], name, value) for name, value in numeric(metrics).items()])


def parse_since(text: str) -> str:
    """`2026-12-01`, an ISO time, or `7d` / `12h` (ago) -> an ISO UTC bound for started_at."""
    match = re.fullmatch(r"(\d+)\s*([dh])", text.strip())
    if match:
        amount, unit = int(match[1]), match[2]
        moment = datetime.now(timezone.utc) - timedelta(days=amount if unit == "d" else 0,
                                                        hours=amount if unit == "h" else 0)
    else:
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError as e:
            raise ConfigError(f"--since {text!r}: expected YYYY-MM-DD, an ISO time, or Nd / Nh") from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


class History:
    """The history database at `db_path`, migrated on open. Use as a context manager."""

    def __init__(self, db_path: Path) -> None:
        self.path = db_path
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(db_path, timeout=BUSY_TIMEOUT_MS / 1000)
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.db.execute("PRAGMA foreign_keys = ON")
            migrate(self.db)
        except (OSError, sqlite3.Error) as e:
            raise ConfigError(f"{db_path}: cannot open the history database ({e})") from e

    def __enter__(self) -> History:  # noqa: PYI034 - History is not meant to be subclassed
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def record_run(self, run_info: dict[str, Any]) -> None:
        """Insert or update a run's row (status and finish time change as it goes)."""
        with self.db:
            self._write_run(run_info)

    def _write_run(self, run_info: dict[str, Any]) -> None:
        row = _run_row(run_info)
        # INSERT OR REPLACE would delete the run's cells through ON DELETE CASCADE; update in place.
        updated = self.db.execute(
            "UPDATE runs SET " + ", ".join(f"{k} = :{k}" for k in row if k != "run_id") + " WHERE run_id = :run_id", row
        ).rowcount
        if not updated:
            _upsert(self.db, "runs", row)

    def record_cell(self, run_info: dict[str, Any], cell_record: dict[str, Any], metrics: dict[str, Any]) -> None:
        """Write one finished cell (and its run) with its flat metrics; writing it again replaces it."""
        with self.db:
            self._write_run(run_info)
            _write_cell(self.db, run_info, cell_record, metrics)

    def import_run(self, run_path: Path, flat: Flatten) -> int:
        """Backfill a stored run folder, each cell's metrics as `flat` finds them; returns the
        number of cells recorded."""
        run = {**read_json(run_path / "run.json"), "run_path": str(run_path.resolve())}
        summary = read_json(run_path / "summary.json") if (run_path / "summary.json").is_file() else {}
        checks = {row["id"]: row.get("checks") for row in summary.get("cells", [])}
        count = 0
        with self.db:
            self._write_run(run)
            for cell_id in run.get("cells", []):
                path = run_path / cell_id / "cell.json"
                if path.is_file():
                    record = read_json(path)
                    _write_cell(self.db, run, record, flat(record), checks.get(cell_id))
                    count += 1
        return count

    def trend(self, model: str, cells: Iterable[str] = (), since: str | None = None) -> list[Point]:
        """Points of `model` (its name or its config's name) in time order, each run's cells in the
        order they were recorded (the matrix order); `by_cell` groups them per cell."""
        cells = list(cells)
        where = ["(r.model = :model OR r.config_name = :model)"]
        params: dict[str, Any] = {"model": model}
        if since:
            where.append("r.started_at >= :since")
            params["since"] = since
        if cells:
            where.append(f"c.cell_id IN ({', '.join(f':c{i}' for i in range(len(cells)))})")
            params |= {f"c{i}": c for i, c in enumerate(cells)}
        # One row per (cell, metric), a cell's rows adjacent: the order key is unique per cell.
        sql = f"""
            SELECT c.run_id, c.cell_id, r.started_at, r.model, r.engine, c.status, c.source_sha, c.setups,
                   c.checks, c.comparability, m.name, m.value
            FROM runs r JOIN cells c ON c.run_id = r.run_id
                 LEFT JOIN cell_metrics m ON m.run_id = c.run_id AND m.cell_id = c.cell_id
            WHERE {' AND '.join(where)}
            ORDER BY r.started_at, r.run_id, c.rowid, m.name"""
        points: list[Point] = []
        for run_id, cell_id, started, run_model, engine, status, sha, setups, checks, key, name, value in self.db.execute(
                sql, params):
            if not points or (points[-1].run_id, points[-1].cell_id) != (run_id, cell_id):
                points.append(Point(run_id, cell_id, started, run_model, engine, status, sha,
                                    setups=json.loads(setups) if setups else {},
                                    checks=json.loads(checks) if checks else None, key=key))
            if name is not None:
                points[-1].metrics[name] = value
        return points

    def models(self) -> list[tuple[str, str | None, int]]:
        """(model, config name, runs) for every model recorded: what `--model` can name."""
        return list(self.db.execute(
            "SELECT model, config_name, COUNT(*) FROM runs GROUP BY model, config_name ORDER BY model"))


def by_cell(points: Iterable[Point]) -> dict[str, list[Point]]:
    """Points per cell, cells in order of first appearance, each cell's points in input order."""
    out: dict[str, list[Point]] = {}
    for point in points:
        out.setdefault(point.cell_id, []).append(point)
    return out


def cell_recorder(db_path: Path, results_dir: Path, run_id: str, flat: Flatten,
                  warn: Callable[[str], None] | None = None) -> Callable[[dict[str, Any]], None]:
    """The executors' `on_cell_done` hook: record each finished cell as it finishes.

    A history that cannot be written is a warning, never a failed matrix: the run folder
    holds everything, and `evalkit history --import RUN` can backfill it later.
    """
    warn = warn or (lambda message: print(f"warning: {message}", file=sys.stderr))
    warned = False

    def on_cell_done(record: dict[str, Any]) -> None:
        nonlocal warned
        try:
            run_path = results_dir / run_id
            run = {**read_json(run_path / "run.json"), "run_path": str(run_path.resolve())}
            with History(db_path) as history:
                history.record_cell(run, record, flat(record))
        except (OSError, ValueError, sqlite3.Error, ConfigError) as e:
            if not warned:
                warn(f"history {db_path}: cell {record.get('id')} not recorded ({e}); "
                     f"backfill with: evalkit history --import {run_id}")
                warned = True

    return on_cell_done


def record_finished_run(db_path: Path, run_path: Path, flat: Flatten,
                        warn: Callable[[str], None] | None = None) -> None:
    """After a matrix: the run's final status and every stored cell, from its folder.

    Also covers cells the per-cell hook could not write. Like the hook, it only warns.
    """
    warn = warn or (lambda message: print(f"warning: {message}", file=sys.stderr))
    try:
        with History(db_path) as history:
            history.import_run(run_path, flat)
    except (OSError, ValueError, sqlite3.Error, ConfigError) as e:
        warn(f"history {db_path}: run {run_path.name} not recorded ({e}); "
             f"backfill with: evalkit history --import {run_path.name}")


def run_folders(results_dir: Path) -> Iterator[Path]:
    """Every run folder under results_dir (those holding run.json), oldest name first."""
    if results_dir.is_dir():
        yield from sorted(p.parent for p in results_dir.glob("*/run.json"))
