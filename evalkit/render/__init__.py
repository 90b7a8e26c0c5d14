"""Render stored results: one table model, one renderer per output format.

    from evalkit.render import render, render_compare, FORMATS
    text = render(summary, "markdown", run_path)          # str: the PR comment
    render(summary, "terminal", run_path, console=console)  # prints; returns None
    text = render_compare(compare_runs(a, b), "csv")

Every format reads the same summary, a `RunSummary` (verdict.deltas.summarize_run; summary.json is its
dump, which render() validates once), or a `RunComparison` (verdict.compare.compare_runs), so the
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
* terminal.py, markdown.py (+ markdown_details.py), csv.py, json_document.py, html.py (+ html_details.py),
  junit.py: the renderers.

A new format is one module under evalkit/render/ with `report(summary, details)` and
`comparison(result)` (the `Renderer` protocol) and one entry in FORMATS, naming that module. The
entries are names, the modules imported when a format is first rendered: the CLI reads its
`--format` choices from FORMATS without paying for any renderer.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from rich.console import Console, RenderableType

if TYPE_CHECKING:
    from evalkit.render.details import Details
    from evalkit.verdict.summary import RunComparison, RunSummary

Output = str | Sequence[RenderableType]
"""A document (text), or for a console format the renderables to print in order."""


class Renderer(Protocol):
    """What a format's module holds."""

    def report(self, summary: RunSummary, details: Details) -> Output: ...

    def comparison(self, result: RunComparison) -> Output: ...


@dataclass(frozen=True)
class Format:
    """One output format: the module under evalkit.render that renders it."""

    module: str
    reads_run: bool = False
    """The report shows material from the run folder (run.json, samples): load_details first."""

    def renderer(self) -> Renderer:
        """The format's module, imported on first use."""
        return cast(Renderer, importlib.import_module(f"{__name__}.{self.module}"))


FORMATS: dict[str, Format] = {
    "terminal": Format("terminal", reads_run=True),
    "markdown": Format("markdown", reads_run=True),
    "csv": Format("csv"),
    "json": Format("json_document"),
    "html": Format("html", reads_run=True),
    "headline": Format("headline"),
    "junit": Format("junit", reads_run=True),
}
"""Format name -> renderer; the CLI's `--format` choices, in this order (terminal first)."""

BISECT_FORMATS = ("terminal", "markdown", "json")
"""What a bisect's report (render/bisect.py, from bisect.json) is written in: `evalkit bisect --format`."""


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
    from evalkit.render.details import Details, load_details
    from evalkit.verdict.summary import RunSummary

    form = FORMATS[fmt]
    model = summary if isinstance(summary, RunSummary) else RunSummary.model_validate(summary)
    details = load_details(run_path, model) if form.reads_run and run_path is not None else Details()
    return _emit(form.renderer().report(model, details), console)


def render_compare(result: RunComparison, fmt: str, console: Console | None = None) -> str | None:
    """Two runs compared (verdict.compare.compare_runs) in format `fmt`, returned or printed as render()."""
    return _emit(FORMATS[fmt].renderer().comparison(result), console)


__all__ = ["BISECT_FORMATS", "FORMATS", "Format", "Output", "Renderer", "render", "render_compare"]
