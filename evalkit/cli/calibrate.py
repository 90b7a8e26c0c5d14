"""`evalkit calibrate`: run one cell N times and print the thresholds its noise supports."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evalkit.cli._common import _Command, cache_dir_option, model_options, results_dir_option
from evalkit.errors import ConfigError


@click.command(cls=_Command)
@model_options
@click.option("--cell", "cell_id", help="The cell to repeat (an id from `evalkit plan`), e.g. the baseline; with "
                                         "--from-history, only this cell's series [default: every cell].")
@click.option("--repeats", type=click.IntRange(min=2), default=5, show_default=True,
              help="Runs of the cell, each with its own engine start.")
@click.option("--limit", type=click.IntRange(min=1), help="Cap questions per eval (the detectable drop is also given for a full run).")
@click.option("--alpha", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True),
              help="Significance of the suggested delta thresholds [default: the config's, else 0.01].")
@click.option("--run-id", "name", help="Calibration folder under RESULTS_DIR; an existing one keeps its finished repeats.")
@results_dir_option
@cache_dir_option()
@click.option("--json", "as_json", is_flag=True, help="Print calibrate.json instead of the YAML snippet.")
@click.option("--from-history", "from_history", is_flag=True,
              help="Run nothing: suggest `min` gates from the nightlies in the history, by the noise model of "
                   "`evalkit history judge`.")
@click.option("--db", "db_path", type=click.Path(path_type=Path),
              help="--from-history: the history database [default: RESULTS_DIR/history.db].")
@click.option("--false-alarm-rate", "rate", type=click.FloatRange(min=0, max=0.5, min_open=True), default=0.01,
              show_default=True, help="--from-history: the chance that a healthy nightly alarms (split over its series).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def calibrate(model: str | None, config_path: Path | None, cell_id: str | None, repeats: int, limit: int | None,
              alpha: float | None, name: str | None, results_dir: Path, cache_dir: Path, as_json: bool,
              from_history: bool, db_path: Path | None, rate: float, quiet: bool) -> None:
    """Run one cell N times and print the thresholds it supports, as YAML to paste into the config.

    Measures how much the unchanged cell moves between runs (spread, questions that flip) and
    from that the smallest drop the paired test detects at the configured alpha. The snippet goes
    to stdout, progress to stderr; every repeat is kept in RESULTS_DIR/NAME/repeat-K/.

    --from-history runs nothing: it reads the cells of --model already in the history and
    suggests each metric's `min` at the boundary `evalkit history judge` holds its next night to.

    \b
    Examples:
      evalkit calibrate --model demo --cell tp8-full-fixon --repeats 5 >> thresholds.yaml
      evalkit calibrate --model demo --from-history --db results/history.db
    """
    if from_history:
        click.echo(_from_history(model or (config_path.stem if config_path else None), cell_id,
                                 db_path or results_dir / "history.db", rate), nl=False)
        return
    if cell_id is None:
        raise ConfigError("--cell: give the cell to repeat (or --from-history to read the nightlies already run)")
    from evalkit.api.calibrate import run_calibration
    from evalkit.api.matrix import MatrixRequest
    from evalkit.run.progress import make_progress

    request = MatrixRequest(model=model, config_path=config_path, limit=limit, results_dir=results_dir,
                            cache_dir=cache_dir, command_line=("evalkit", "calibrate", "--cell", cell_id))
    progress = make_progress(quiet, "evalkit calibrate")
    try:
        result = run_calibration(request, cell_id, repeats, alpha=alpha, name=name, progress=progress)
    finally:
        progress.close()
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else result.yaml, nl=as_json)
    click.echo(f"calibration: {result.path}", err=True)


def _from_history(model: str | None, cell_id: str | None, db_path: Path, rate: float) -> str:
    """The snippet for `model`'s series (one cell's with `cell_id`), judged among every series of the history."""
    from evalkit.history.db import History
    from evalkit.history.judge import Judge
    from evalkit.history.series import all_series, from_runs
    from evalkit.verdict.calibrate import from_history

    if model is None:
        raise ConfigError("--from-history: give --model NAME (or --config PATH): whose cells to read")
    if not db_path.is_file():
        raise ConfigError(f"{db_path}: no history database (record a run first)")
    with History(db_path) as store:
        everything = all_series(store)
        wanted = {s.name for s in from_runs(store.trend(model, [cell_id] if cell_id else []))}
    if not wanted:
        raise ConfigError(f"--from-history: no recorded cells for model {model!r}" + (f", cell {cell_id}" if cell_id else ""))
    judge = Judge(everything, rate)
    judged = judge.judge(only=[i for i, s in enumerate(everything) if s.name in wanted])
    header = [f"evalkit calibrate --from-history: {len(judged)} series of {model} in {db_path}",
              f"false alarms {rate:g} a night over the history's {len(everything)} series ({judge.rate:.3g} each); "
              "each floor is where `evalkit history judge` calls the next night a regression"]
    return from_history(judged, header)
