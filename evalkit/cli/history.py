"""`evalkit history`: how each cell's accuracy and collapse rate moved across runs; `judge` and
`audit`: each series' newest night against its own noise, and each gate against it."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalkit.cli._common import _Command, _CommandGroup, console, results_dir_option
from evalkit.errors import ConfigError

if TYPE_CHECKING:
    from evalkit.evals.base import MetricSpec
    from evalkit.history.db import Point
    from evalkit.history.judge import Judge
    from evalkit.history.series import Series
    from evalkit.history.verdicts import Judged


@click.group(cls=_CommandGroup, invoke_without_command=True)
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
@click.option("--import", "imports", multiple=True, metavar="RUN|FILE",
              help="First record a stored run (id, path, `latest` or `all`), or every point of a github-action-benchmark "
                   "data.js or its JSON, into the history (repeatable; importing again replaces the same rows).")
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="History database [default: RESULTS_DIR/history.db].")
@results_dir_option
@click.pass_context
def history(ctx: click.Context, model: str | None, cells: tuple[str, ...], since: str | None, last: int, fmt: str,
            better: str, plot_path: Path | None,
            imports: tuple[str, ...], db_path: Path | None, results_dir: Path) -> None:
    """Show how each cell's accuracy and collapse rate moved across runs.

    Every finished cell of `evalkit matrix` is recorded in RESULTS_DIR/history.db; --import
    backfills runs stored before that (recording a run again replaces its rows) and reads
    dashboards evalkit did not write (github-action-benchmark's data.js). `judge` and `audit`
    read every series of the history against its own noise.

    \b
    Examples:
      evalkit history --import all
      evalkit history --import data.js --db nightly.db    # a github-action-benchmark dashboard
      evalkit history judge --db nightly.db
      evalkit history --model demo --cell dp8-piecewise-fixoff --since 7d
      evalkit history --model demo --plot trend.png
      evalkit history --model demo --format benchmark-json --better smaller > collapse.json
    """
    from evalkit import history as hist
    from evalkit.evals import registry
    from evalkit.history.imports import check_import, import_dashboard, is_dashboard_file
    from evalkit.store import check_writable, read_json, removed_on_failure, resolve_run
    from evalkit.verdict.deltas import flat_metrics

    if ctx.invoked_subcommand is not None and not imports:
        return  # judge, audit, accept open the database they are given: none is made here for them
    if plot_path:
        check_writable(plot_path, "--plot")  # one line before any work, not a traceback after it
    for ref in imports:  # bad input said before a database exists
        check_import(ref, results_dir)
    path = db_path or hist.default_db_path(results_dir)
    with removed_on_failure(path), hist.History(path) as store:  # a failed command leaves no empty database
        for ref in imports:
            if is_dashboard_file(ref):
                click.echo(f"imported {ref}: {import_dashboard(store.db, Path(ref))} points", err=True)
                continue
            paths = list(hist.run_folders(results_dir)) if ref == "all" else [resolve_run(results_dir, ref)]
            for path in paths:
                evals = registry.recorded(read_json(path / "run.json"))  # its cells, read by the evals it had
                for missing in evals.missing:
                    click.echo(f"warning: {path.name}: {missing}: its metrics are left out", err=True)
                flat = functools.partial(flat_metrics, evals=evals)
                click.echo(f"imported {path.name}: {store.import_run(path, flat)} cells", err=True)
        if ctx.invoked_subcommand is not None:
            return
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
    """What the points' numbers are: the metrics their stored cells report (`EvalSet.metrics`;
    those that depend on a run's config, one per lm-eval task, need the cell), one cell.json per
    distinct set of eval setups while its run folder exists, read by the evals those runs had
    (`registry.recorded`: a plugin they named, where it imports; the history keeps numbers, not
    what they mean). A plugin that does not import is said on stderr: its metrics are left out."""
    from evalkit.evals import registry
    from evalkit.store import read_json

    seen: set[tuple[tuple[str, str], ...]] = set()
    cells, runs = [], {}
    for point in points:
        setups = tuple(sorted((name, str((setup or {}).get("hash"))) for name, setup in point.setups.items()))
        cell = results_dir / point.run_id / point.cell_id / "cell.json"
        if setups not in seen and cell.is_file():
            seen.add(setups)
            cells.append(read_json(cell))
            if point.run_id not in runs and (run := cell.parent.parent / "run.json").is_file():
                runs[point.run_id] = read_json(run)
    evals = registry.recorded(*runs.values())
    for missing in evals.missing:
        click.echo(f"warning: {missing}: its metrics are left out", err=True)
    return evals.metrics(None, cells)


def _show_trend(points: list[Point], title: str, last: int | None, plot_path: Path | None,
                specs: list[MetricSpec]) -> None:
    """The trend table on stdout, and the PNG when --plot is given."""
    from evalkit.render.trend import plot, trend_table

    console().print(trend_table(points, title, last, specs))
    if plot_path:
        plot(points, plot_path, title, specs)
        click.echo(f"plot: {plot_path}", err=True)


def _judge_options(f: Callable[..., None]) -> Callable[..., None]:
    """What judge and audit share: the database, the false-alarm rate, which series."""
    f = results_dir_option(f)
    f = click.option("--db", "db_path", type=click.Path(path_type=Path),
                     help="History database [default: RESULTS_DIR/history.db].")(f)
    f = click.option("--series", "patterns", multiple=True, metavar="TEXT",
                     help="Only series whose name contains TEXT (repeatable); the others still inform the noise.")(f)
    f = click.option("--false-alarm-rate", "rate", type=click.FloatRange(min=0, max=0.5, min_open=True),
                     default=0.01, show_default=True,
                     help="Chance that a healthy nightly alarms on any of its series; each series gets "
                          "1 - (1 - rate)^(1/N) of it (one-sided).")(f)
    return click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)(f)


@history.command(cls=_Command)
@click.option("--all", "every", is_flag=True, help="Judge every point against the points before it, not only the newest.")
@_judge_options
def judge(every: bool, fmt: str, rate: float, patterns: tuple[str, ...], db_path: Path | None, results_dir: Path) -> None:
    """Judge each series' newest night against its own history: ok, regression, intermittent, shift, insufficient.

    A series is one metric of one (model, configuration): each cell of evalkit's recorded runs and
    each bench of an imported dashboard. Exits 1 when the newest point of any series is a
    regression, an intermittent failure or a shift, so a nightly can run it after the matrix.

    \b
    Examples:
      evalkit history judge --db results/history.db
      evalkit history judge --db nightly.db --all --format json > verdicts.json
    """
    from evalkit.history.verdicts import regressed, to_json
    from evalkit.render.nightly import judge_text

    judged, left_out = _judged(db_path, results_dir, rate, patterns, every)
    if fmt == "json":
        click.echo(json.dumps(to_json(judged, left_out), indent=2))
    else:
        click.echo(judge_text(judged, every, rate, left_out), nl=False)
    sys.exit(1 if regressed(judged) else 0)


@history.command(cls=_Command)
@_judge_options
def audit(fmt: str, rate: float, patterns: tuple[str, ...], db_path: Path | None, results_dir: Path) -> None:
    """Audit every gate (a config's `min`, a dashboard's `Threshold:`) against its series' noise.

    For each series with a floor: how often it failed healthy nights, the smallest drop it
    catches, the floor the false-alarm rate suggests, and which floors sit within the noise or
    above the median. Prints; exits 0.

    \b
    Example:
      evalkit history audit --db nightly.db --false-alarm-rate 0.01
    """
    from evalkit.history.verdicts import to_json
    from evalkit.render.nightly import audit_text

    judged = [j for j in _judged(db_path, results_dir, rate, patterns, every=True)[0] if j.audit is not None]
    if fmt == "json":
        click.echo(json.dumps({"series": [{k: v for k, v in row.items() if k != "points"}
                                          for row in to_json(judged)["series"]]}, indent=2))
    else:
        click.echo(audit_text(judged, rate), nl=False)


def _judged(db_path: Path | None, results_dir: Path, rate: float, patterns: tuple[str, ...],
            every: bool) -> tuple[list[Judged], list[Series]]:
    """Every series of the history, judged; the selected ones returned, and those another
    comparability key replaced (left out, said once)."""
    judge_ = _judge(db_path, results_dir, rate)
    series = judge_.series
    matching = [i for i, s in enumerate(series) if not patterns or any(p in s.name for p in patterns)]
    if not matching:
        raise ConfigError(f"--series {' '.join(patterns)}: no series matches (e.g. {series[0].name!r})")
    chosen = [i for i in matching if series[i].replaced is None]
    return judge_.judge(every, chosen), [series[i] for i in matching if series[i].replaced is not None]


def _judge(db_path: Path | None, results_dir: Path, rate: float) -> Judge:
    """The judge of every series of the history (one line naming the database when there is none)."""
    from evalkit import history as hist
    from evalkit.history.judge import judge_history

    path = db_path or hist.default_db_path(results_dir)
    if not path.is_file():
        raise ConfigError(f"{path}: no history database (record a run, or --import a dashboard, first)")
    with hist.History(path) as store:
        judge_ = judge_history(store, rate)
    if not judge_.series:
        raise ConfigError(f"{path}: no series recorded yet")
    return judge_


@history.command(cls=_Command)
@click.argument("series_name", metavar="SERIES")
@click.option("--from", "commit", required=True, metavar="COMMIT",
              help="The first commit of the new level (a prefix of a commit of the series' points).")
@click.option("--why", required=True, metavar="TEXT", help="Why the new level is right: recorded and shown beside every verdict it shapes.")
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="History database [default: RESULTS_DIR/history.db].")
@results_dir_option
def accept(series_name: str, commit: str, why: str, db_path: Path | None, results_dir: Path) -> None:
    """Accept a series' new level from COMMIT on: the judge never moves a level by itself.

    A series that falls and stays down is a regression every night until it recovers or a person
    accepts the new level here. From the first point of COMMIT on, the series' level is read from
    its points there and after (its noise from its whole history); the acceptance is recorded in
    the history database and shown beside the verdicts. Prints the series' newest verdict after it.

    \b
    Example:
      evalkit history accept "sim/deepseek-v4 tp8-full-fixon gsm8k.flexible" --from 3f2a1c0b --why "new tokenizer"
    """
    from evalkit import history as hist
    from evalkit.history.accept import accept as record

    if not why.strip():
        raise ConfigError("--why: say why the new level is right (it is shown beside every verdict it shapes)")
    judge_ = _judge(db_path, results_dir, 0.01)
    found = next((s for s in judge_.series if s.name == series_name), None)
    if found is None:
        near = [s.name for s in judge_.series if series_name.lower() in s.name.lower()][:3]
        raise ConfigError(f"{series_name}: no such series" + (f" (did you mean {', '.join(map(repr, near))}?)" if near
                                                             else "; `evalkit history judge` names every series"))
    commits = list(dict.fromkeys(p.commit for p in found.points if p.commit.startswith(commit)))
    if len(commits) != 1:
        raise ConfigError(f"--from {commit}: " + (f"matches {len(commits)} commits of {series_name}; give more of it"
                                                  if commits else f"no point of {series_name} ran it"))
    with hist.History(db_path or hist.default_db_path(results_dir)) as store:
        accepted = record(store.db, series_name, commits[0], why.strip())
    click.echo(f"{series_name}: {accepted.said()}")
    after = _judge(db_path, results_dir, 0.01)
    (judged,) = after.judge(only=[next(i for i, s in enumerate(after.series) if s.name == series_name)])
    if judged.newest is not None:
        click.echo(f"newest night now: {judged.newest.verdict}: {judged.newest.why}")
