"""`evalkit compare`: two runs of the same matrix, cell by cell."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalkit.cli._common import _Command, console, results_dir_option
from evalkit.cli.report import check_output, deliver, output_option
from evalkit.errors import (
    EXIT_BAD_INPUT,
    EXIT_CELL_FAILED,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    EXIT_THRESHOLD,
)
from evalkit.render import FORMATS
from evalkit.store.comparability import FIELDS

ALLOWABLE = tuple(f for f in FIELDS if f not in ("build", "questions", "setup"))
"""The parts of a comparability key `--allow` may name (the rest are always allowed)."""

if TYPE_CHECKING:
    from evalkit.verdict.summary import RunComparison

COMPARE_EXIT_CODES = "\b\nExit codes:\n" + "\n".join(textwrap.fill(
    meaning, 78, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7) for code, meaning in (
    (EXIT_OK, "no failing threshold FAILed in B against A"),
    (EXIT_THRESHOLD, "a failing threshold FAILed in B against A"),
    (EXIT_BAD_INPUT, "bad input (a run that is not there, a bad option), or nothing to compare: A and B the "
                     "same run, no cell in common, no question both scored, every shared cell run differently"),
    (EXIT_CELL_FAILED, "a cell failed to run in B"),
    (EXIT_INCONCLUSIVE, "only with --strict: nothing FAILed, but something was not judged: a failing threshold's "
                        "check INCONCLUSIVE, or a cell on one side only, not finished in both, or that no check judged"),
))
"""The matrix's codes (errors.EXIT_CODES) as they read for a comparison."""


@click.command(cls=_Command, epilog=COMPARE_EXIT_CODES)
@click.argument("run_a")
@click.argument("run_b", default="latest")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="terminal", show_default=True)
@output_option
@click.option("--strict", is_flag=True, help="Exit 5 when nothing FAILed but something was not judged: a failing "
              "threshold's check INCONCLUSIVE (too few questions to see its margin), or a cell on one side only or not "
              "finished in both: for a PR gate that must not pass on too little data.")
@click.option("--allow", "allow", multiple=True, type=click.Choice(ALLOWABLE), metavar="PART",
              help="Compare cells whose runs differ in this part of what decides their figures too (repeatable: "
                   f"{', '.join(ALLOWABLE)}); the build, the question set and eval set-ups are expected to differ.")
@results_dir_option
def compare(run_a: str, run_b: str, fmt: str, output: Path | None, strict: bool, allow: tuple[str, ...],
            results_dir: Path) -> None:
    """Compare two runs of the same matrix (e.g. before and after a PR), cell by cell, and judge B against A.

    Per cell id found in both runs: B - A of every compared metric (GSM8K: McNemar exact test on
    the questions both runs answered; the collapse rate: Fisher exact test). B's config's delta
    thresholds (max_drop_*, max_rise_*, equivalent_*) are checked against A's cell, as the matrix
    checks a cell against its baseline: PASS, FAIL or INCONCLUSIVE with the minimum detectable
    effect, p-values adjusted across the cells; the exit status says the verdict.

    A cell is judged only where both runs have it, both finished it and both ran it alike: the
    same model, engine flags, environment and devices (the engine build may differ: it is the
    change under test; runs that scored different questions are compared on those both scored,
    and the headline says so). Any other cell is listed, with why, and never said to hold.

    \b
    Example:
      evalkit compare 20261201-020000-demo latest --format markdown > pr-comment.md
      evalkit compare 20261201-020000-demo latest --format html -o compare.html
      evalkit compare 20261201-020000-demo latest --format junit -o compare-junit.xml --strict
    """
    from evalkit.api.publish import append_step_summary, in_github_actions
    from evalkit.store import resolve_run
    from evalkit.verdict.compare import compare_runs
    from evalkit.verdict.deltas import strict_exit_code

    check_output(fmt, output)
    result = compare_runs(resolve_run(results_dir, run_a), resolve_run(results_dir, run_b), allow=allow)
    if strict:  # every format says the code the command exits with (and never OK beside exit 5)
        result = result.model_copy(update={"exit_code": strict_exit_code(result)})
    show_comparison(result, fmt, output)
    if in_github_actions():
        from evalkit.render import render_compare

        markdown = render_compare(result, "markdown") or ""
        whole_report = str(output) if output and fmt == "markdown" else f"evalkit compare {run_a} {run_b}"
        for warning in append_step_summary(markdown, whole_report):
            click.echo(warning, err=True)
    sys.exit(result.exit_code)


def show_comparison(result: RunComparison, fmt: str, output: Path | None = None) -> None:
    """Print a run comparison on stdout in one of FORMATS, or write it to `output`."""
    from evalkit.render import render_compare

    deliver(render_compare(result, fmt, console=console()), output)
