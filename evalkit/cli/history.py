"""`evalkit history`: how each cell's accuracy and collapse rate moved across runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalkit.cli._common import _Command, console, results_dir_option
from evalkit.errors import ConfigError

if TYPE_CHECKING:
    from evalkit.evals.base import MetricSpec
    from evalkit.history.db import Point


@click.command(cls=_Command)
@click.option("--model", "-m", help="Model name (run.json `model`) or config name (e.g. demo).")
@click.option("--cell", "cells", multiple=True, metavar="CELL", help="Only this cell id (repeatable).")
@click.option("--since", metavar="DATE", help="Runs started on or after: YYYY-MM-DD, an ISO time, or 7d / 12h.")
@click.option("--last", type=click.IntRange(min=0), default=20, show_default=True,
              help="Runs per cell in the table (0: all); the plot draws every run.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "benchmark-json"]), default="table",
              show_default=True, help="csv: every run x cell with its metrics; benchmark-json: the newest run in "
                                      "github-action-benchmark's custom format (see --better).")
@click.option("--better", type=click.Choice(["bigger", "smaller"]), default="bigger", show_default=True,
              help="benchmark-json: the metrics that improve this way (customBiggerIsBetter / customSmallerIsBetter).")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), help="Also draw accuracy and collapse rate to this PNG.")
@click.option("--import", "imports", multiple=True, metavar="RUN",
              help="First record a stored run (id, path, `latest` or `all`) into the history (repeatable).")
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="History database [default: RESULTS_DIR/history.db].")
@results_dir_option
def history(model: str | None, cells: tuple[str, ...], since: str | None, last: int, fmt: str, better: str,
            plot_path: Path | None,
            imports: tuple[str, ...], db_path: Path | None, results_dir: Path) -> None:
    """Show how each cell's accuracy and collapse rate moved across runs.

    Every finished cell of `evalkit matrix` is recorded in RESULTS_DIR/history.db; --import
    backfills runs stored before that (recording a run again replaces its rows).

    \b
    Examples:
      evalkit history --import all
      evalkit history --model demo --cell dp8-piecewise-fixoff --since 7d
      evalkit history --model demo --plot trend.png
      evalkit history --model demo --format benchmark-json --better smaller > collapse.json
    """
    from evalkit import history as hist
    from evalkit.store import resolve_run
    from evalkit.verdict.deltas import flat_metrics

    with hist.History(db_path or hist.default_db_path(results_dir)) as store:
        for ref in imports:
            paths = list(hist.run_folders(results_dir)) if ref == "all" else [resolve_run(results_dir, ref)]
            for path in paths:
                click.echo(f"imported {path.name}: {store.import_run(path, flat_metrics)} cells", err=True)
        if model is None:
            if not imports:
                known = ", ".join(f"{m} ({c})" if c else m for m, c, _ in store.models()) or "none yet"
                raise ConfigError(f"give --model NAME; recorded models: {known}")
            return
        points = store.trend(model, cells, hist.parse_since(since) if since else None)
    if not points:
        raise ConfigError(f"history: no recorded cells for model {model!r}"
                          + (f", cells {', '.join(cells)}" if cells else "") + (f" since {since}" if since else ""))
    specs = _metrics_of(points, results_dir)
    if fmt != "table":
        from evalkit.render.history_export import benchmark_json, history_csv

        click.echo(history_csv(points) if fmt == "csv" else benchmark_json(points, better == "bigger", specs), nl=False)
        return
    _show_trend(points, f"evalkit history: {model}" + (f" since {since}" if since else ""), last or None, plot_path,
                specs)


def _metrics_of(points: list[Point], results_dir: Path) -> list[MetricSpec]:
    """What the points' numbers are: the metrics their stored cells report (`registry.metrics`;
    those that depend on a run's config, one per lm-eval task, need the cell), one cell.json per
    distinct set of eval setups while its run folder exists (the history keeps numbers, not what
    they mean)."""
    from evalkit.evals import registry
    from evalkit.store import read_json

    seen: set[tuple[tuple[str, str], ...]] = set()
    cells = []
    for point in points:
        setups = tuple(sorted((name, str((setup or {}).get("hash"))) for name, setup in point.setups.items()))
        cell = results_dir / point.run_id / point.cell_id / "cell.json"
        if setups not in seen and cell.is_file():
            seen.add(setups)
            cells.append(read_json(cell))
    return registry.metrics(None, cells)


def _show_trend(points: list[Point], title: str, last: int | None, plot_path: Path | None,
                specs: list[MetricSpec]) -> None:
    """The trend table on stdout, and the PNG when --plot is given."""
    from evalkit.render.trend import plot, trend_table

    console().print(trend_table(points, title, last, specs))
    if plot_path:
        plot(points, plot_path, title, specs)
        click.echo(f"plot: {plot_path}", err=True)
