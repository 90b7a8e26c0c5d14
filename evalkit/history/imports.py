"""Dashboards evalkit did not write: github-action-benchmark's `data.js` (or its JSON) into the history.

Real nightly data already exists in this shape. github-action-benchmark
(benchmark-action/github-action-benchmark at 09d9d21a, src/write/loadData.ts: `SCRIPT_PREFIX =
'window.BENCHMARK_DATA = '`, and the external-JSON variant without it) keeps `{lastUpdate, repoUrl,
entries: {SUITE: [entry, ...]}}` on a gh-pages branch, each entry `{commit: {id, timestamp, url,
...}, date (ms), tool, benches: [{name, value, unit, extra?, range?}]}`; `evalkit history --format
benchmark-json` writes the benches of one entry. ATOM's dashboard (ROCm/ATOM at ffdf3bb5,
.github/scripts/accuracy_to_dashboard.py, fed to the action with `tool: customBiggerIsBetter`,
`benchmark-data-dir-path: benchmark-dashboard`) writes `extra` as `Run: <actions url> | Threshold:
0.94 | Baseline: ...`: the run link and the gate.

A bench is one point of the series named `name`: its commit (full SHA), the entry's date (when
the workflow ran, which orders re-runs of one commit), its value and unit, the run link and the
floor found in `extra`. Rows are keyed by (source, suite, name, commit, date), so importing the
same file twice, or two versions of a dashboard that overlap (the action drops its oldest entries
as the file grows: merging old versions from the branch's git history recovers them), stores
each point once.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.errors import ConfigError

BIGGER_TOOLS = {"customBiggerIsBetter"}
"""The action's tools whose values improve as they grow; every other tool it knows (customSmallerIsBetter,
and the timing tools: benchmarkjs, pytest, go, cargo, ...) reports times or costs that improve as they shrink."""

_RUN = re.compile(r"(?:^|\|)\s*Run:\s*(\S+)")
_FLOOR = re.compile(r"(?:^|\|)\s*Threshold:\s*([-+0-9.eE]+)")


def m005_dashboard_points(db: sqlite3.Connection) -> None:
    """Points of dashboards evalkit did not write (github-action-benchmark's data.js), one row per bench."""
    db.execute("""
        CREATE TABLE dashboard_points (
            source TEXT NOT NULL,
            suite TEXT NOT NULL,
            name TEXT NOT NULL,
            commit_sha TEXT NOT NULL,
            date TEXT NOT NULL,
            value REAL NOT NULL,
            unit TEXT,
            bigger_is_better INTEGER NOT NULL,
            run_url TEXT,
            floor REAL,
            extra TEXT,
            PRIMARY KEY (source, suite, name, commit_sha, date)
        ) WITHOUT ROWID""")


@dataclass(frozen=True)
class DashboardPoint:
    """One bench of one entry: a point of the series `name`."""

    source: str
    suite: str
    name: str
    commit: str
    date: str
    value: float
    unit: str
    bigger_is_better: bool
    run_url: str | None
    floor: float | None
    extra: str | None


def read_dashboard(path: Path) -> dict[str, Any]:
    """The object of a data.js (`window.BENCHMARK_DATA = {...};`) or of its JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read ({e})") from e
    start = text.find("{")
    body = text[start:].rstrip().removesuffix(";") if start >= 0 else ""
    try:
        data = json.loads(body)
    except ValueError as e:
        raise ConfigError(f"{path}: not a github-action-benchmark data.js or JSON ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        raise ConfigError(f"{path}: entries: expected github-action-benchmark's {{suite: [entry, ...]}}")
    return data


def dashboard_points(data: dict[str, Any], origin: str) -> list[DashboardPoint]:
    """Every bench of every entry; `origin` (the file) names the source when `repoUrl` is absent."""
    source = str(data.get("repoUrl") or origin)
    points = []
    for suite, entries in data["entries"].items():
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            where = f"entries.{suite}[{i}]"
            try:
                commit = str(entry["commit"]["id"])
                date = datetime.fromtimestamp(float(entry["date"]) / 1000, tz=timezone.utc)
                benches = entry["benches"]
            except (KeyError, TypeError, ValueError, OverflowError) as e:
                raise ConfigError(f"{origin}: {where}: expected commit.id, date (ms) and benches ({e!r})") from e
            bigger = entry.get("tool") in BIGGER_TOOLS
            for bench in benches:
                value = bench.get("value") if isinstance(bench, dict) else None
                if not isinstance(value, (int, float)) or not math.isfinite(value) or "name" not in bench:
                    raise ConfigError(f"{origin}: {where}.benches: expected {{name, value}} with a finite value, "
                                      f"got {bench!r:.120}")
                extra = bench.get("extra")
                run = _RUN.search(extra) if isinstance(extra, str) else None
                floor = _FLOOR.search(extra) if isinstance(extra, str) else None
                points.append(DashboardPoint(
                    source, str(suite), str(bench["name"]), commit, date.isoformat(timespec="milliseconds"),
                    float(value), str(bench.get("unit") or ""), bigger, run[1] if run else None,
                    float(floor[1]) if floor else None, extra if isinstance(extra, str) else None))
    return points


def import_dashboard(db: sqlite3.Connection, path: Path) -> int:
    """Store every bench of the dashboard at `path`; returns the points read (a re-import replaces its rows)."""
    points = dashboard_points(read_dashboard(path), str(path))
    with db:
        db.executemany(
            "INSERT OR REPLACE INTO dashboard_points (source, suite, name, commit_sha, date, value, unit, "
            "bigger_is_better, run_url, floor, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(p.source, p.suite, p.name, p.commit, p.date, p.value, p.unit, int(p.bigger_is_better), p.run_url,
              p.floor, p.extra) for p in points])
    return len(points)


def stored_dashboard_points(db: sqlite3.Connection) -> list[DashboardPoint]:
    """Every imported point, each series' points in time order."""
    rows = db.execute("SELECT source, suite, name, commit_sha, date, value, unit, bigger_is_better, run_url, floor, "
                      "extra FROM dashboard_points ORDER BY source, suite, name, date")
    return [DashboardPoint(s, suite, n, c, d, v, u or "", bool(b), r, f, x) for s, suite, n, c, d, v, u, b, r, f, x in rows]


def is_dashboard_file(ref: str) -> bool:
    """`--import REF` names a dashboard (a file) rather than a run (an id, a run folder, latest, all)."""
    return Path(ref).is_file()


DASHBOARD_SUFFIXES = (".js", ".json")
"""How a dashboard's file is named (data.js, or its JSON): such a REF that is no file is a missing file."""


def check_import(ref: str, results_dir: Path) -> None:
    """`--import REF`'s bad input as one line, before any database is opened: a run that does not
    resolve (`resolve_run`'s words: no such run, a file, no run.json), a results folder that is a
    file (`all`), and a dashboard file that is missing, said missing (not "not a run")."""
    from evalkit.store import check_results_dir, resolve_run

    if is_dashboard_file(ref):
        return
    if ref == "all":
        check_results_dir(results_dir)
        return
    try:
        resolve_run(results_dir, ref)
    except ConfigError:
        if Path(ref).suffix.lower() in DASHBOARD_SUFFIXES:
            raise ConfigError(f"{ref}: no such file (--import reads a dashboard's data.js or its JSON, or a run)") from None
        raise
