"""`evalkit matrix`: run the matrix, print the report, exit with the run's code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalkit.cli._common import (
    EXIT_CODES_HELP,
    _Command,
    cache_dir_option,
    console,
    lock_file_option,
    model_options,
    only_option,
    results_dir_option,
)
from evalkit.cli.plan import plan
from evalkit.cli.report import show_run

if TYPE_CHECKING:
    from evalkit.api.matrix import MatrixOutcome


@click.command(cls=_Command, epilog=EXIT_CODES_HELP)
@model_options
@only_option
@click.option("--limit", type=click.IntRange(min=1), help="Cap questions per eval (and prompts of the repetition check).")
@click.option("--dry-run", is_flag=True, help="Print the plan and exit.")
@click.option("--run-id", help="Name of the run folder (default: timestamp-model).")
@click.option("--resume", "resume_run", metavar="RUN", help="Finish an interrupted run (id, path or latest).")
@results_dir_option
@cache_dir_option()
@click.option("--base-url", help="Evaluate an already running server (one cell, nothing started): its root, "
              "http://HOST:PORT/v1 or .../v1/completions.")
@click.option("--served-name", help="With --base-url: the model name to request, when the server serves several.")
@click.option("--executor", type=click.Choice(["local", "slurm"]), default=None,
              help="Where cells run: this machine, or one Slurm job per cell (default: the config's executor.kind).")
@click.option("--max-parallel", type=click.IntRange(min=1), default=None,
              help="Cells side by side (needs `devices` in the config). Default: as many as the devices allow.")
@lock_file_option
@click.option("--no-lock", is_flag=True, help="Do not take the device lock.")
@click.option("--wait-for-gpus", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Wait up to SECONDS for GPUs other processes use, instead of refusing (exit 4) at once "
                   "[default: the config's timeouts.gpus_busy].")
@click.option("--history-db", type=click.Path(path_type=Path), help="History database [default: RESULTS_DIR/history.db].")
@click.option("--no-history", is_flag=True, help="Do not record finished cells in the history database.")
@click.option("--notify", metavar="CMD", help="Run CMD (split like a shell would, run without one) with the "
              "markdown report's path appended, after the run; e.g. --notify 'scripts/post-to-chat --channel ci'.")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the run as JUnit XML to FILE (one testcase per cell x threshold check).")
@click.option("--bisect-on-regression", is_flag=True,
              help="For each cell that breaks a failing threshold it passed in the previous run of this config, "
                   "bisect the engine source between the two runs' commits and add the first bad commit to the report "
                   "(never changes the exit code).")
@click.option("--strict", is_flag=True, help="Exit 5 when nothing broke but a failing threshold's check is "
              "INCONCLUSIVE (its test could not have seen the margin): for nightlies that must not pass on too little data.")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json on stdout; progress stays on stderr.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines (the report, the results folder and the "
              "headline still print).")
@click.pass_context
def matrix(ctx: click.Context, model: str | None, config_path: Path | None, only: tuple[str, ...], limit: int | None,
           dry_run: bool, run_id: str | None, resume_run: str | None, results_dir: Path, cache_dir: Path,
           base_url: str | None, served_name: str | None, executor: str | None, max_parallel: int | None, lock_file: Path, no_lock: bool,
           wait_for_gpus: float | None, history_db: Path | None,
           no_history: bool, notify: str | None, junit_path: Path | None, bisect_on_regression: bool, strict: bool,
           as_json: bool, quiet: bool) -> None:
    """Run the matrix: start each cell's engine, run GSM8K and the collapse check, report.

    Results go to RESULTS_DIR/RUN_ID/ (run.json, summary.json, table.md, one folder per cell).

    \b
    Examples:
      evalkit matrix --model demo
      evalkit matrix --model deepseek-v4 --only parallel=dp8,graph=piecewise --limit 200
      evalkit matrix --resume latest                      # after Ctrl-C or a crash
      evalkit matrix --config my.yaml --base-url http://127.0.0.1:8000/v1   # a running server
    """
    from evalkit.api.matrix import MatrixRequest, run_matrix
    from evalkit.api.publish import in_github_actions
    from evalkit.run.progress import make_progress
    from evalkit.verdict.deltas import strict_exit_code

    if dry_run:
        ctx.invoke(plan, model=model, config_path=config_path, only=only, results_dir=results_dir, cache_dir=cache_dir,
                   limit=limit)
        return
    request = MatrixRequest(
        model=model, config_path=config_path, only=only, limit=limit, run_id=run_id, resume=resume_run,
        results_dir=results_dir, cache_dir=cache_dir, base_url=base_url, served_name=served_name, executor=executor, max_parallel=max_parallel,
        lock_file=lock_file, lock=not no_lock, history_db=history_db, history=not no_history,
        command_line=("evalkit", *sys.argv[1:]), wait_for_gpus=wait_for_gpus,
        bisect_on_regression=bisect_on_regression, junit=junit_path, github=in_github_actions(), notify=notify,
    )
    progress = make_progress(quiet)
    try:
        outcome = run_matrix(request, progress)
    finally:
        progress.close()
    if outcome.interrupted:
        click.echo("interrupted: finished cells kept; continue with: evalkit matrix --resume "
                   f"{outcome.run_path.name}", err=True)
    show_run(outcome.summary, outcome.run_path, "json" if as_json else "terminal")
    _last_lines(outcome, as_json)
    if junit_path is not None:
        click.echo(f"junit: {junit_path}", err=True)
    for line in outcome.annotations:  # where the runner reads workflow commands: stdout, unless it carries the document
        click.echo(line, err=as_json)
    for warning in outcome.warnings:
        click.echo(warning, err=True)
    sys.exit(strict_exit_code(outcome.summary) if strict and not outcome.interrupted else outcome.exit_code)


def _last_lines(outcome: MatrixOutcome, as_json: bool) -> None:
    """Where the results are, then the headline as the very last line (on stderr under --json,
    whose stdout is the document): what a reader of a CI log or a terminal scrolls to."""
    from evalkit.render.terminal import headline_markup

    out = console(stderr=as_json)
    out.print(f"results: {outcome.run_path}", highlight=False, soft_wrap=True)
    out.print(headline_markup(outcome.summary), highlight=False, soft_wrap=True)
