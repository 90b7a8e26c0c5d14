"""`evalkit calibrate`: run one cell N times and print the thresholds its noise supports."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evalkit.cli._common import _Command, cache_dir_option, model_options, results_dir_option


@click.command(cls=_Command)
@model_options
@click.option("--cell", "cell_id", required=True, help="The cell to repeat (an id from `evalkit plan`), e.g. the baseline.")
@click.option("--repeats", type=click.IntRange(min=2), default=5, show_default=True,
              help="Runs of the cell, each with its own engine start.")
@click.option("--limit", type=click.IntRange(min=1), help="Cap questions per eval (the detectable drop is also given for a full run).")
@click.option("--alpha", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True),
              help="Significance of the suggested delta thresholds [default: the config's, else 0.01].")
@click.option("--run-id", "name", help="Calibration folder under RESULTS_DIR; an existing one keeps its finished repeats.")
@results_dir_option
@cache_dir_option()
@click.option("--json", "as_json", is_flag=True, help="Print calibrate.json instead of the YAML snippet.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def calibrate(model: str | None, config_path: Path | None, cell_id: str, repeats: int, limit: int | None,
              alpha: float | None, name: str | None, results_dir: Path, cache_dir: Path, as_json: bool,
              quiet: bool) -> None:
    """Run one cell N times and print the thresholds it supports, as YAML to paste into the config.

    Measures how much the unchanged cell moves between runs (spread, questions that flip) and
    from that the smallest drop the paired test detects at the configured alpha. The snippet goes
    to stdout, progress to stderr; every repeat is kept in RESULTS_DIR/NAME/repeat-K/.

    \b
    Example:
      evalkit calibrate --model demo --cell tp8-full-fixon --repeats 5 >> thresholds.yaml
    """
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
