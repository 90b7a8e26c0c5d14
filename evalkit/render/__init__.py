"""Render stored results: one table model, one renderer per output format.

    from evalkit.render import render, render_compare, FORMATS
    text = render(summary, "markdown", run_path)          # str: the PR comment
    render(summary, "terminal", run_path, console=console)  # prints; returns None
    text = render_compare(compare_runs(a, b), "csv")

Every format reads the same summary, a `RunSummary` (verdicts.summarize_run; summary.json is its
dump, which render() validates once), or run comparison (comparison.compare_runs), so the
terminal, the PR comment and the CSV show the same numbers.
The layers, each in its module:

* text.py: escaping for markdown, HTML, the terminal and CSV (model text is hostile input);
* numbers.py: how values, deltas and dates are written;
* table.py, header.py, compare_table.py: the table model, pure data, its columns, pivots and
  legend read from the metrics the summary records and the run's evals it carries (a new eval's
  metrics appear with no edit here);
* details.py: what the summary leaves out (flipped questions' answers, event samples), read
  from the run folder;
* headline.py: the one line about cells that every format opens with (`--format headline`: only it);
* terminal.py, markdown.py (+ markdown_details.py), csv.py, html.py (+ html_details.py): the renderers.

A new format is one module with `report(summary, details)` and `comparison(result)` and one entry
in FORMATS.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, RenderableType

from evalkit.render import csv, html, junit, markdown, terminal
from evalkit.render.details import Details, load_details
from evalkit.render.headline import headline
from evalkit.verdict.summary import RunSummary, Verdict

Output = str | Sequence[RenderableType]
"""A document (text), or for a console format the renderables to print in order."""


@dataclass(frozen=True)
class Format:
    """One output format: how it renders a run's report and a run comparison."""

    report: Callable[[RunSummary, Details], Output]
    comparison: Callable[[dict[str, Any]], Output]
    reads_run: bool = False
    """The report shows material from the run folder (run.json, samples): load_details first."""


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


FORMATS: dict[str, Format] = {
    "terminal": Format(terminal.report, terminal.comparison, reads_run=True),
    "markdown": Format(markdown.report, markdown.comparison, reads_run=True),
    "csv": Format(lambda summary, details: csv.report(summary), csv.comparison),
    "json": Format(lambda summary, details: _json(summary.dump()), _json),
    "html": Format(html.report, html.comparison, reads_run=True),
    "headline": Format(lambda summary, details: headline(summary) + "\n",
                       lambda result: "B against A: " + headline(Verdict.model_validate(result)) + "\n"),
    "junit": Format(lambda summary, details: junit.report(summary, markdown.report(summary, details)),
                    lambda result: junit.comparison(result, markdown.comparison(result)), reads_run=True),
}
"""Format name -> renderer; the CLI's `--format` choices, in this order (terminal first)."""


def _emit(out: Output, console: Console | None) -> str | None:
    if isinstance(out, str):
        return out
    console = console or Console()
    for renderable in out:
        console.print(renderable)
    return None


def render(summary: RunSummary | Mapping[str, Any], fmt: str, run_path: Path | None = None,
           console: Console | None = None) -> str | None:
    """A run's report in format `fmt` (a key of FORMATS; KeyError otherwise).

    `summary` is the model, or summary.json as read (validated here, once, so a renderer reads
    typed fields; a file written by an older evalkit validates too). Text formats return the
    text, ending in a newline (print it as is). "terminal" prints on `console` (default: a new
    rich Console on stdout) and returns None. `run_path` is the run's folder, for run facts and
    folded examples; without it those are left out.
    """
    form = FORMATS[fmt]
    model = summary if isinstance(summary, RunSummary) else RunSummary.model_validate(summary)
    details = load_details(run_path, model) if form.reads_run and run_path is not None else Details()
    return _emit(form.report(model, details), console)


def render_compare(result: dict[str, Any], fmt: str, console: Console | None = None) -> str | None:
    """Two runs compared (comparison.compare_runs) in format `fmt`, returned or printed as render()."""
    return _emit(FORMATS[fmt].comparison(result), console)


__all__ = ["FORMATS", "Details", "Format", "load_details", "render", "render_compare"]
