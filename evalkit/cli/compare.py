"""`evalkit compare`: two runs of the same matrix, cell by cell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from evalkit.cli._common import FORMATS, _Command, console, results_dir_option
from evalkit.cli._github import in_github_actions, publish
from evalkit.cli.report import check_output, deliver, output_option


@click.command(cls=_Command)
@click.argument("run_a")
@click.argument("run_b", default="latest")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal", show_default=True)
@output_option
@results_dir_option
def compare(run_a: str, run_b: str, fmt: str, output: Path | None, results_dir: Path) -> None:
    """Compare two runs of the same matrix (e.g. before and after a PR), cell by cell.

    Per cell id found in both runs: B - A of GSM8K flexible and strict (McNemar exact test on
    the questions both runs answered) and of the collapse rate (Fisher exact test).

    \b
    Example:
      evalkit compare 20261201-020000-demo latest --format markdown > pr-comment.md
      evalkit compare 20261201-020000-demo latest --format html -o compare.html
      evalkit compare 20261201-020000-demo latest --format junit -o compare-junit.xml
    """
    from evalkit.comparison import compare_runs
    from evalkit.store import resolve_run

    check_output(fmt, output)
    result = compare_runs(resolve_run(results_dir, run_a), resolve_run(results_dir, run_b))
    show_comparison(result, fmt, output)
    if in_github_actions():
        from evalkit.render import render_compare

        markdown = render_compare(result, "markdown") or ""
        publish(markdown, str(output) if output and fmt == "markdown" else f"evalkit compare {run_a} {run_b}",
                stdout_is_data=fmt != "terminal" and output is None)


def show_comparison(result: dict[str, Any], fmt: str, output: Path | None = None) -> None:
    """Print a run comparison on stdout in one of FORMATS, or write it to `output`."""
    from evalkit.render import render_compare

    deliver(render_compare(result, fmt, console=console()), output)
