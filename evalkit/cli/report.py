"""`evalkit report`: a stored run as a table, markdown, CSV, JSON or a self-contained HTML page."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evalkit.cli._common import _Command, console, echo_output, results_dir_option
from evalkit.errors import ConfigError
from evalkit.render import FORMATS

if TYPE_CHECKING:  # the CLI imports the library where a command runs (`--help` stays fast)
    from evalkit.verdict.summary import RunSummary


def output_option(f: Any) -> Any:
    """-o/--output FILE: write the document there and print its path (not for terminal)."""
    return click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False), default=None,
                        help="Write the document to FILE (and print its path) instead of stdout.")(f)


def check_output(fmt: str, output: Path | None) -> None:
    """-o needs a document (the terminal format prints itself) and a place a file can go: one line,
    exit 2, before anything is read or rendered."""
    from evalkit.store import check_writable

    if output is not None and fmt == "terminal":
        documents = ", ".join(f for f in FORMATS if f != "terminal")
        raise ConfigError(f"-o/--output needs a document format: --format {documents}")
    if output is not None:
        check_writable(output, "-o/--output")


def deliver(text: str | None, output: Path | None) -> None:
    """A rendered document on stdout, or written whole to `output` (via a temporary file) with its path printed."""
    if output is None or text is None:
        echo_output(text)
        return
    _write_whole(text, output)
    click.echo(str(output))


def _write_whole(text: str, output: Path) -> None:
    """`text` into `output` through a temporary file: a reader never sees half a document."""
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".tmp")
    partial.write_text(text, encoding="utf-8")
    partial.replace(output)


@click.command(cls=_Command)
@click.argument("run", default="latest")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="terminal",
              show_default=True, help="markdown: for a PR comment; csv: one row per cell; json: summary.json; "
                                      "html: one self-contained page (use with -o); junit: JUnit XML for CI test "
                                      "reporters (one testcase per cell x threshold check).")
@output_option
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also draw each cell's differences from its baseline and twin (95% intervals, threshold margins) "
                   "to this PNG, to attach to a PR.")
@results_dir_option
def report(run: str, fmt: str, output: Path | None, plot_path: Path | None, results_dir: Path) -> None:
    """Show a stored run (a run id, a path, or `latest`) as a table, markdown, CSV, JSON or HTML.

    The verdict is recomputed from the stored cells with the run's own config snapshot, so it
    equals the run's summary.json; the headline is the last line (on stderr when stdout carries
    a document) and the exit code is the run's, as `evalkit matrix` exits (1: a threshold broke).

    \b
    Examples:
      evalkit report latest --format markdown > pr-comment.md
      evalkit report 20261203-111333-demo --format csv > cells.csv
      evalkit report latest --format html -o report.html
      evalkit report latest --format junit -o evalkit-junit.xml
      evalkit report latest --format markdown --plot deltas.png > pr-comment.md
    """
    from evalkit.render.terminal import headline_markup
    from evalkit.store import check_writable, resolve_run

    check_output(fmt, output)
    if plot_path is not None:
        check_writable(plot_path, "--plot")
    run_path = resolve_run(results_dir, run)
    summary = stored_verdict(run_path)
    show_run(summary=summary, run_path=run_path, fmt=fmt, output=output)
    if plot_path is not None:
        from evalkit.render.forest import png

        drawn = png(summary, plot_path)
        click.echo(f"plot: {plot_path}" if drawn else "plot: no cell was compared with a baseline or twin: nothing "
                   "drawn", err=True)
    # the headline last, as `matrix` ends (on stderr where stdout carries the document), folded as
    # the report's own first line is; and the exit code the report prints (NOT OK: 1 here too)
    console(stderr=fmt != "terminal" and output is None).print(headline_markup(summary), highlight=False)
    sys.exit(summary.exit_code)


def stored_verdict(run_path: Path) -> RunSummary:
    """A stored run's verdict, recomputed from its cells with its own config and evals (the
    built-ins and the plugins its config named, `registry.recorded`). When a plugin cannot be
    imported here, the verdict cannot be recomputed (its metrics come from its code): the run's
    summary.json is shown as written, its metrics as recorded, and stderr says so."""
    from evalkit.config import parse_config
    from evalkit.evals import registry
    from evalkit.store import read_json
    from evalkit.verdict.deltas import summarize_run
    from evalkit.verdict.summary import RunSummary

    info = read_json(run_path / "run.json")
    if not isinstance(info, dict) or not isinstance(info.get("config"), dict):
        raise ConfigError(f"{run_path / 'run.json'}: no config snapshot (config): not a run.json evalkit wrote")
    evals = registry.recorded(info)
    if not evals.missing:
        return summarize_run(run_path, parse_config(info["config"], run_path / "run.json"))
    lacking = "; ".join(evals.missing)
    try:
        written = RunSummary.load(run_path / "summary.json")  # one a newer evalkit wrote is refused
    except FileNotFoundError:
        raise ConfigError(f"{lacking}; and {run_path / 'summary.json'} is absent: nothing to report without "
                          "that eval (install it, then report again)") from None
    click.echo(f"warning: {lacking}: showing summary.json as the run wrote it, not recomputed; that eval's metrics "
               "as recorded, without its samples", err=True)
    return written.carrying(evals)


def show_run(summary: RunSummary | Mapping[str, Any], run_path: Path, fmt: str, output: Path | None = None) -> None:
    """Print a run's summary on stdout in one of FORMATS, or write it to `output` (also `evalkit
    matrix`'s report)."""
    from evalkit.render import render

    deliver(render(summary, fmt, run_path, console=console()), output)
