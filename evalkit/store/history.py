"""Every finished cell in one SQLite file, so a nightly's trend is one query away.

A run folder answers "what happened in this run"; the history answers "since when is this cell
worse". It is a cache of the run folders, never the source of truth: `import_run` rebuilds any
run's rows from its folder, and writing the same cell twice replaces it (upsert), so the runner's
per-cell hook and a later backfill agree.

The schema upgrades itself when the store is opened, the simonw/llm way: each migration is a
named function `mNNN_what(db)`, applied once, in order, and recorded in `_migrations`. Never
edit a released migration; append a new one.

What is stored: run and cell identity (ids, axes, model, engine, engine source repo/ref/SHA),
status, timings, timestamps and the flat metrics of every registered eval: all of them as JSON
in `cells.metrics`, and each numeric one as a row of `cell_metrics (run_id, cell_id, name,
value)`. The GSM8K and collapse columns of `cells` (`gsm8k_flexible`, `collapse_rate`, ...)
are still filled for SQL written against the first schema. What is not: anything from the
environment (no env, no argv of the engine launch, no log tails); clone URLs lose any
`user:token@`, and evalkit's own command line goes through redact_argv.

Default location: `<results_dir>/history.db` (`default_db_path`).
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from evalkit.errors import ConfigError
from evalkit.redact import redact_argv
from evalkit.render.report import strip_userinfo
from evalkit.store import read_json
from evalkit.verdicts import flat_metrics

DB_NAME = "history.db"
BUSY_TIMEOUT_MS = 30_000
"""Two matrices finishing cells at once wait for each other instead of failing."""

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
            db.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (fn.__name__, _now()))
        applied.append(fn.__name__)
    return applied


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
    gsm8k_strict: float | None
    gsm8k_flexible: float | None
    gsm8k_n: int | None
    collapse_rate: float | None
    collapse_n: int | None

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
        "run_path": run.get("run_path"), "recorded_at": _now(),
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


def _cell_row(run_id: str, record: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """The columns of one cell; only the fields named here leave cell.json (no launch, no env)."""
    source = record.get("source") or {}
    timings = record.get("timings") or {}
    return {
        "run_id": run_id, "cell_id": record["id"], "axes": json.dumps(record.get("axes", {})),
        "status": record.get("status") or "?", "error": (record.get("error") or {}).get("message"),
        "source_repo": strip_userinfo(source["repo"]) if source.get("repo") else None,
        "source_ref": source.get("ref"), "source_sha": source.get("sha"),
        "effective_mode": record.get("effective_mode"), "started_at": record.get("started_at"),
        "finished_at": record.get("finished_at"), "total_s": timings.get("total_s"), "timings": json.dumps(timings),
        **{column: metrics.get(name) for column, name in LEGACY_COLUMNS.items()},
        "metrics": json.dumps(metrics, allow_nan=False, default=str), "recorded_at": _now(),
    }


def _upsert(db: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    names = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    db.execute(f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({marks})", row)

def _write_cell(db: sqlite3.Connection, run_id: str, record: dict[str, Any]) -> None:
    """The cell's row and its metric rows; a rewrite replaces both (a metric the new record lacks
    is gone, not left over from the old one)."""
    metrics = flat_metrics(record)
    _upsert(db, "cells", _cell_row(run_id, record, metrics))
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

    def record_cell(self, run_info: dict[str, Any], cell_record: dict[str, Any]) -> None:
        """Write one finished cell (and its run); writing it again replaces it."""
        with self.db:
            self._write_run(run_info)
            _write_cell(self.db, run_info["run_id"], cell_record)

    def import_run(self, run_path: Path) -> int:
        """Backfill a stored run folder; returns the number of cells recorded."""
        run = {**read_json(run_path / "run.json"), "run_path": str(run_path.resolve())}
        count = 0
        with self.db:
            self._write_run(run)
            for cell_id in run.get("cells", []):
                path = run_path / cell_id / "cell.json"
                if path.is_file():
                    _write_cell(self.db, run["run_id"], read_json(path))
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
        sql = f"""
            SELECT c.run_id, c.cell_id, r.started_at, r.model, r.engine, c.status, c.source_sha,
                   c.gsm8k_strict, c.gsm8k_flexible, c.gsm8k_n, c.collapse_rate, c.collapse_n
            FROM runs r JOIN cells c ON c.run_id = r.run_id
            WHERE {' AND '.join(where)}
            ORDER BY r.started_at, r.run_id, c.rowid"""
        return [Point(*row) for row in self.db.execute(sql, params)]

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


def cell_recorder(db_path: Path, results_dir: Path, run_id: str,
                  warn: Callable[[str], None] | None = None) -> Callable[[dict[str, Any]], None]:
    """The runner's `on_cell_done` hook: record each finished cell as it finishes.

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
                history.record_cell(run, record)
        except (OSError, ValueError, sqlite3.Error, ConfigError) as e:
            if not warned:
                warn(f"history {db_path}: cell {record.get('id')} not recorded ({e}); "
                     f"backfill with: evalkit history --import {run_id}")
                warned = True

    return on_cell_done


def record_finished_run(db_path: Path, run_path: Path, warn: Callable[[str], None] | None = None) -> None:
    """After a matrix: the run's final status and every stored cell, from its folder.

    Also covers cells the per-cell hook could not write. Like the hook, it only warns.
    """
    warn = warn or (lambda message: print(f"warning: {message}", file=sys.stderr))
    try:
        with History(db_path) as history:
            history.import_run(run_path)
    except (OSError, ValueError, sqlite3.Error, ConfigError) as e:
        warn(f"history {db_path}: run {run_path.name} not recorded ({e}); "
             f"backfill with: evalkit history --import {run_path.name}")


def run_folders(results_dir: Path) -> Iterator[Path]:
    """Every run folder under results_dir (those holding run.json), oldest name first."""
    if results_dir.is_dir():
        yield from sorted(p.parent for p in results_dir.glob("*/run.json"))


# ---------------------------------------------------------------------------------------------
# Showing a trend


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _utc_minute(point: Point) -> str:
    when = point.when
    if when is None:
        return point.started_at or "?"
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return f"{when:%Y-%m-%d %H:%M}"


DEFAULT_LAST = 20
"""Runs per cell in the trend table: a table of 1,000 nights is read by nobody (the plot has all)."""


def _rows(series: list[Point]) -> list[tuple[Point, str]]:
    """Each point with its flexible-accuracy change since the cell's previous measured run."""
    out, previous = [], None
    for p in series:
        change = "-" if p.gsm8k_flexible is None or previous is None else f"{(p.gsm8k_flexible - previous) * 100:+.1f}"
        previous = p.gsm8k_flexible if p.gsm8k_flexible is not None else previous
        out.append((p, change))
    return out


def trend_table(points: list[Point], title: str, last: int | None = DEFAULT_LAST) -> Any:
    """A rich table: one section per cell, its last `last` runs (all when None), with the change
    since the run before."""
    from rich.markup import escape
    from rich.table import Table

    from evalkit.render.report import clean

    table = Table(title=escape(clean(title)))
    for header in ("cell", "run started (UTC)", "run", "source", "status", "strict", "flexible", "Δ flexible",
                   "collapse", "n"):
        table.add_column(header)
    for cell_id, series in by_cell(points).items():
        rows = _rows(series)
        shown = rows[-last:] if last else rows
        for i, (p, change) in enumerate(shown):
            label = cell_id if i == 0 else ""
            if i == 0 and len(shown) < len(rows):
                label += f" (last {len(shown)} of {len(rows)})"
            collapse = "-" if p.collapse_rate is None else f"{p.collapse_rate:.3f}"
            table.add_row(*(escape(clean(text)) for text in (
                label, _utc_minute(p), p.run_id, (p.source_sha or "-")[:12], p.status, _fmt(p.gsm8k_strict),
                _fmt(p.gsm8k_flexible), change, collapse, str(p.gsm8k_n or "-"))))
        table.add_section()
    return table


def plot(points: list[Point], out_path: Path, title: str) -> None:
    """Accuracy (GSM8K flexible) and collapse rate over time, one line per cell, as a PNG.

    Runs headless (Agg backend). matplotlib is imported here so that the rest of evalkit does
    not need it.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt
        import matplotlib.ticker as mticker
    except ImportError as e:
        raise ConfigError("--plot needs matplotlib: pip install matplotlib") from e
    series = {cell: [p for p in pts if p.when is not None] for cell, pts in by_cell(points).items()}
    has_collapse = any(p.collapse_rate is not None for pts in series.values() for p in pts)
    fig, axes = plt.subplots(2 if has_collapse else 1, 1, sharex=True, squeeze=False,
                             figsize=(11, 7 if has_collapse else 4.5), layout="constrained")
    colours = plt.get_cmap("tab20" if len(series) > 10 else "tab10")
    panels = [("gsm8k_flexible", "GSM8K flexible accuracy")] + ([("collapse_rate", "collapse rate")] if has_collapse else [])
    for (attr, label), ax in zip(panels, axes[:, 0]):
        for i, (cell, pts) in enumerate(series.items()):
            xs = [p.when for p in pts if getattr(p, attr) is not None]
            ys = [getattr(p, attr) for p in pts if getattr(p, attr) is not None]
            # tab20 pairs a dark and a light shade of one hue; with the A/B axis last, twins are
            # neighbours, so a twin pair shares a hue and differs in shade and line style.
            ax.plot(xs, ys, "--" if i % 2 else "-", marker="o", markersize=4, linewidth=1.8, color=colours(i % colours.N), label=cell)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.yaxis.set_major_formatter(mticker.PercentFormatter(1.0, decimals=0))
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    axes[-1, 0].xaxis.set_major_locator(locator)
    axes[-1, 0].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    axes[-1, 0].set_xlabel("run started (UTC)")
    axes[0, 0].set_title(title)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside right upper", title="cell", fontsize="small")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
