"""`evalkit calibrate`: run one cell N times and print the thresholds its noise supports."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evalkit.cli._common import _Command, cache_dir_option, model_options, results_dir_option
from evalkit.errors import ConfigError


@click.command(cls=_Command)
@model_options
@click.option("--cell", "cell_id", help="A cell to repeat (an id from `evalkit plan`), e.g. the baseline: its runs "
                                         "measure a night's spread; with --from-history, only this cell's series "
                                         "[default: no repeats; every cell].")
@click.option("--repeats", type=click.IntRange(min=2), default=5, show_default=True,
              help="Runs of --cell, each with its own engine start.")
@click.option("--run", "runs", multiple=True, metavar="RUN",
              help="A matrix run of the config whose healthy cells the gates are measured on and checked against "
                   "(an id, `latest` or a path; repeatable) [default: the newest complete one in RESULTS_DIR].")
@click.option("--limit", type=click.IntRange(min=1), help="Cap questions per eval of the repeats (the detectable drop "
                                                            "is also given for a full run).")
@click.option("--alpha", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True),
              help="Significance of the suggested delta thresholds [default: the config's, else 0.01].")
@click.option("--run-id", "name", help="Calibration folder under RESULTS_DIR; an existing one keeps its finished repeats.")
@results_dir_option
@cache_dir_option()
@click.option("--json", "as_json", is_flag=True, help="Print calibrate.json instead of the YAML snippet.")
@click.option("--from-history", "from_history", is_flag=True,
              help="Run nothing: suggest floors from the nightlies in the history, by the judge of "
                   "`evalkit history judge`.")
@click.option("--db", "db_path", type=click.Path(path_type=Path),
              help="--from-history: the history database [default: RESULTS_DIR/history.db].")
@click.option("--false-alarm-rate", "rate", type=click.FloatRange(min=0, max=0.5, min_open=True), default=0.01,
              show_default=True, help="--from-history: the chance that a healthy nightly alarms (split over its series).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def calibrate(model: str | None, config_path: Path | None, cell_id: str | None, repeats: int, runs: tuple[str, ...],
              limit: int | None, alpha: float | None, name: str | None, results_dir: Path, cache_dir: Path,
              as_json: bool, from_history: bool, db_path: Path | None, rate: float, quiet: bool) -> None:
    """Print the thresholds the measured noise supports, as YAML to paste into the config, each
    checked on the runs it came from.

    Gates that compare cells (a drop against the twin or the baseline, a rise of a rate, a
    divergence) are measured on the spread between the healthy cells of the config's matrix run
    (--run, default its newest); floors (`min`, a rate's `max`) sit below the lowest healthy cell
    by a night's spread, which --cell's repeats measure (each its own engine start, kept in
    RESULTS_DIR/NAME/repeat-K/). Every rule is judged on those runs before it is printed: none
    leaves a healthy cell FAIL or INCONCLUSIVE, and the comments say what each one catches among
    the cells left out as broken. Without a matrix run the rules print commented out. The snippet
    goes to stdout, progress to stderr.

    --from-history runs nothing: it reads the cells of --model already in the history and
    suggests each metric's floor at the boundary `evalkit history judge` holds its next night to.

    \b
    Examples (the first two after `evalkit matrix --model demo`):
      evalkit calibrate --model demo >> thresholds.yaml
      evalkit calibrate --model demo --cell tp8-full-fixon --repeats 5
      evalkit calibrate --model demo --from-history --db results/history.db
    """
    if from_history:
        click.echo(_from_history(model or (config_path.stem if config_path else None), cell_id,
                                 db_path or results_dir / "history.db", rate), nl=False)
        return
    from evalkit.api.calibrate import run_calibration
    from evalkit.api.matrix import MatrixRequest
    from evalkit.run.progress import make_progress

    request = MatrixRequest(model=model, config_path=config_path, limit=limit, results_dir=results_dir,
                            cache_dir=cache_dir, command_line=("evalkit", "calibrate", "--cell", cell_id or ""))
    progress = make_progress(quiet, "evalkit calibrate")
    try:
        result = run_calibration(request, cell_id, repeats, alpha=alpha, name=name, progress=progress, runs=runs)
    finally:
        progress.close()
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else result.yaml, nl=as_json)
    if result.path is not None:
        click.echo(f"calibration: {result.path}", err=True)


def _from_history(model: str | None, cell_id: str | None, db_path: Path, rate: float) -> str:
    """The snippet for `model`'s series (one cell's with `cell_id`), judged among every series of the history."""
    from evalkit.history.db import History
    from evalkit.history.judge import model_floors
    from evalkit.verdict.calibrate import from_history

    if model is None:
        raise ConfigError("--from-history: give --model NAME (or --config PATH): whose cells to read")
    if not db_path.is_file():
        raise ConfigError(f"{db_path}: no history database (record a run first)")
    with History(db_path) as store:
        judge, judged = model_floors(store, model, cell_id, rate)
    if not judged:
        raise ConfigError(f"--from-history: no recorded cells for model {model!r}" + (f", cell {cell_id}" if cell_id else ""))
    header = [f"evalkit calibrate --from-history: {len(judged)} series of {model} in {db_path}",
              f"false alarms {rate:g} a night over the history's {len(judge.series)} series ({judge.rate:.3g} each); "
              "each floor is where `evalkit history judge` calls the next night a regression"]
    return from_history(judge, judged, header)
