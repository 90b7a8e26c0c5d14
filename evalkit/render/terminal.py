"""The terminal: rich tables of a run's report and of two runs compared.

A renderer here returns what to print (rich tables and markup lines), and render() prints them
on the console it is given, so colours follow that console (a TTY, a CI log, a test's buffer).
Broken values are bold red with ✗, warnings yellow with !; every text goes through term_text.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.table import Table

from evalkit.render.compare_table import compare_columns, compare_legend, compare_rows, compare_title, run_facts
from evalkit.render.details import Details
from evalkit.render.header import SIM_NOTE, facts, legend, title, verdict_line
from evalkit.render.table import Pivot, columns, pivots, table_rows
from evalkit.render.text import MAX_CELL_CHARS, term_text, truncate


def _marked(text: str, mark: str) -> str:
    safe = term_text(text)
    return f"[bold red]{safe} ✗[/bold red]" if mark == "fail" else f"[yellow]{safe} ![/yellow]" if mark == "warn" else safe


def _pivot(p: Pivot) -> Table:
    table = Table(title=term_text(p.title), title_justify="left")
    for header in [p.corner, *p.columns]:
        table.add_column(term_text(header))
    for line, marks in zip(p.rows, p.marks):
        table.add_row(*(_marked(text, mark) for text, mark in zip(line, marks)))
    return table


def _matrix(summary: dict[str, Any], details: Details) -> Table:
    table = Table(title=term_text(title(summary)), caption=term_text(" · ".join(facts(summary, details.run))))
    cols = columns()
    for column in cols:  # a cell id is never folded: it is what a reader searches for and copies
        table.add_column(term_text(column.header), overflow="fold", no_wrap=column.key == "cell")
    for row in table_rows(summary):
        style = None if row.texts["status"] == "ok" else "yellow"
        table.add_row(*(_marked(truncate(row.texts[c.key], MAX_CELL_CHARS), row.mark(c.key)) for c in cols), style=style)
    return table


def report(summary: dict[str, Any], details: Details) -> list[RenderableType]:
    """The matrix, its legend, the pivots, the broken thresholds and the verdict."""
    out: list[RenderableType] = [_matrix(summary, details), f"[dim]{term_text(legend(summary))}[/dim]"]
    out += [_pivot(p) for p in pivots(summary)]
    if summary.get("simulated"):
        out.append(f"[dim]{term_text(SIM_NOTE)}[/dim]")
    for cell in summary["cells"]:
        for flag in cell["flags"]:
            marker = "[bold red]FAIL[/bold red]" if flag["action"] == "fail" else "[yellow]warn[/yellow]"
            out.append(f"{marker} {term_text(flag['message'])}")
    ok, words = verdict_line(summary)
    out.append(("[green]OK[/green] " if ok else "[bold red]NOT OK[/bold red] ") + term_text(words))
    return out


def compare(result: dict[str, Any]) -> list[RenderableType]:
    """The compare table, each run in a line, and the legend."""
    table = Table(title=term_text(compare_title(result)))
    cols = compare_columns()
    for column in cols:
        table.add_column(term_text(column.header), overflow="fold")
    for texts in compare_rows(result):
        table.add_row(*(term_text(texts[c.key]) for c in cols))
    return [table, f"A: {term_text(run_facts(result['a']))}", f"B: {term_text(run_facts(result['b']))}",
            f"[dim]{term_text(compare_legend())}[/dim]"]
