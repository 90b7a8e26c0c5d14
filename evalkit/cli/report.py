"""`evalkit report`: a stored run as a table, markdown, CSV or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from evalkit.cli._common import FORMATS, _Command, console, echo_output, results_dir_option


@click.command(cls=_Command)
@click.argument("run", default="latest")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal",
              show_default=True, help="markdown: for a PR comment; csv: one row per cell; json: summary.json.")
@results_dir_option
def report(run: str, fmt: str, results_dir: Path) -> None:
    """Show a stored run (a run id, a path, or `latest`) as a table, markdown, CSV or JSON.

    The verdict is recomputed from the stored cells with the run's own config snapshot, so it
    equals the run's summary.json.

    \b
    Examples:
      evalkit report latest --format markdown > pr-comment.md
      evalkit report 20261203-111333-demo --format csv > cells.csv
    """
    from evalkit.config import parse_config
    from evalkit.store import read_json, resolve_run
    from evalkit.verdicts import summarize

    run_path = resolve_run(results_dir, run)
    info = read_json(run_path / "run.json")
    show_run(summary=summarize(run_path, parse_config(info["config"], run_path / "run.json")), run_path=run_path, fmt=fmt)


def show_run(summary: dict[str, Any], run_path: Path, fmt: str) -> None:
    """Print a run's summary on stdout in one of FORMATS (also `evalkit matrix`'s report)."""
    from evalkit.render import render

    echo_output(render(summary, fmt, run_path, console=console()))
