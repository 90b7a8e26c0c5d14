"""`evalkit bisect`: which commit of the engine broke a cell; print the report, exit with its code."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalkit.cli._common import (
    _Command,
    cache_dir_option,
    console,
    echo_output,
    lock_file_option,
    model_options,
    results_dir_option,
)
from evalkit.errors import BISECT_EXIT_CODES
from evalkit.render import BISECT_FORMATS

BISECT_EXIT_HELP = "\b\nExit codes:\n" + "\n".join(f"  {code:<4} {meaning}" for code, meaning in BISECT_EXIT_CODES.items())


@click.command(cls=_Command, epilog=BISECT_EXIT_HELP)
@model_options
@click.option("--cell", "cell_id", metavar="CELL_ID", help="The matrix cell to bisect (e.g. dp8-piecewise-fixoff).")
@click.option("--good", metavar="REF", help="A commit of the cell's engine source where the cell is good.")
@click.option("--bad", metavar="REF", help="A later commit where it is bad.")
@click.option("--axis", help="The axis whose value's source gives the commits, when several axes carry a source.")
@click.option("--good-run", metavar="RUN", help="Take the good end from this run's cell folder (id or path) instead of running it.")
@click.option("--all-parents", is_flag=True, help="Follow merged branches too (default: the first-parent line).")
@click.option("--limit", type=click.IntRange(min=1), help="Cap questions per eval (and long-generation prompts).")
@click.option("--resume", "resume_id", metavar="BISECT_ID", help="Continue an interrupted bisect; finished steps are reused.")
@click.option("--bisect-id", help="Name of the bisect (folder RESULTS_DIR/bisect-ID; default: timestamp-cell).")
@results_dir_option
@cache_dir_option()
@lock_file_option
@click.option("--no-lock", is_flag=True, help="Do not take the device lock.")
@click.option("--format", "fmt", type=click.Choice(BISECT_FORMATS), default="terminal", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print bisect.json on stdout; progress stays on stderr.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def bisect(model: str | None, config_path: Path | None, cell_id: str | None, good: str | None, bad: str | None,
           axis: str | None, good_run: str | None, all_parents: bool, limit: int | None, resume_id: str | None,
           bisect_id: str | None, results_dir: Path, cache_dir: Path, lock_file: Path, no_lock: bool, fmt: str,
           as_json: bool, quiet: bool) -> None:
    """Find the first commit of the cell's engine source between --good and --bad that breaks it.

    The good end and the bad end run as full cells; each commit in between runs the cell until a
    sequential test decides good or bad. Results: RESULTS_DIR/bisect-ID/ (bisect.json, one
    folder per commit).

    \b
    Examples:
      evalkit bisect --model deepseek-v4 --cell dp8-piecewise-fixoff --good v0.3.0 --bad main
      evalkit bisect --resume 20261204-010203-dp8-piecewise-fixoff     # after Ctrl-C
    """
    from evalkit.bisect.driver import BisectRequest, run_bisect
    from evalkit.render.bisect import render
    from evalkit.run.progress import make_progress

    request = BisectRequest(
        model=model, config_path=config_path, cell=cell_id, good=good, bad=bad, axis=axis, good_run=good_run,
        all_parents=all_parents, limit=limit, resume=resume_id, bisect_id=bisect_id, results_dir=results_dir,
        cache_dir=cache_dir, lock_file=lock_file, lock=not no_lock, command_line=("evalkit", *sys.argv[1:]),
    )
    progress = make_progress(quiet, "evalkit bisect")
    try:
        outcome = run_bisect(request, progress)
    finally:
        progress.close()
    record = outcome.record.model_dump(mode="json")
    if outcome.record.status == "interrupted":
        click.echo(f"interrupted: finished steps kept; continue with: evalkit bisect --resume {outcome.record.bisect_id}",
                   err=True)
    fmt = "json" if as_json else fmt
    if fmt != "terminal":
        echo_output(render(record, fmt))  # type: ignore[arg-type]
    elif not quiet:
        out = console()
        for renderable in render(record, "terminal"):
            out.print(renderable)
        out.print(f"results: {outcome.folder}")
    sys.exit(outcome.exit_code)
