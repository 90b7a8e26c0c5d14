"""The terminal: rich tables of a run's report and of two runs compared.

A renderer here returns what to print (rich tables and markup lines), and render() prints them
on the console it is given, so colours follow that console (a TTY, a CI log, a test's buffer).
Broken values are bold red with ✗, warnings yellow with !; every text goes through term_text.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table

from evalkit.evals.base import MetricSpec
from evalkit.render.checks import check_lines
from evalkit.render.compare_table import (
    compare_columns,
    compare_legend,
    compare_rows,
    compare_title,
    run_facts,
)
from evalkit.render.costs import cost_line
from evalkit.render.details import Details
from evalkit.render.engine_log import engine_log_lines, engine_log_title
from evalkit.render.header import SIM_NOTE, facts, imports, legend, title, verdict_line
from evalkit.render.headline import headline
from evalkit.render.regressions import regression_lines
from evalkit.render.table import Column, Pivot, Row, columns, pivots, table_rows
from evalkit.render.text import MAX_CELL_CHARS, term_text, truncate
from evalkit.verdict.summary import CellRow, ComparedCell, Flag, RunComparison, RunSummary


def _marked(text: str, mark: str) -> str:
    safe = term_text(text)
    return f"[bold red]{safe} ✗[/bold red]" if mark == "fail" else f"[yellow]{safe} ![/yellow]" if mark == "warn" else safe


def _pivot(p: Pivot) -> Table:
    table = Table(title=term_text(p.title), title_justify="left")
    _add_columns(table, [p.corner, *p.columns],
                 [[text + (" ✗" if mark else "") for text, mark in zip(line, marks)] for line, marks in zip(p.rows, p.marks)])
    for line, marks in zip(p.rows, p.marks):
        table.add_row(*(_marked(text, mark) for text, mark in zip(line, marks)))
    return table


WRAPS_PAST = 32
"""Characters past which a value is text that wraps (an error message), not a number that folds."""


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=1)


def headline_metric(specs: list[MetricSpec]) -> str | None:
    """The metric the reader judges a cell by: the first with a pivot (the config's summary table),
    else the first with a column. Its value column is the last the matrix gives up."""
    found = next((s for s in specs if s.display.pivot and s.display.column), None) or \
        next((s for s in specs if s.display.column), None)
    return found.short if found else None


class _Matrix:
    """The matrix table, fitted to the console's width: a table wider than the terminal folds
    every cell into an unreadable stack, so columns are left out, least telling first, until it
    fits, and a line says which (markdown, CSV and HTML always hold them all). Each column kept is
    exactly as wide as its widest value, so rich never folds a number or an id mid-way (a text
    longer than WRAPS_PAST, an error, wraps at its spaces); only headers wrap, at spaces. Never left out: the cell, its status, the headline metric's value
    (`headline_metric`); a column a broken threshold marks goes last."""

    def __init__(self, summary: RunSummary, details: Details) -> None:
        self.summary, self.details = summary, details
        self.cols, self.rows = columns(summary.specs(), summary.cells), table_rows(summary)
        self.headline = headline_metric(summary.specs())

    def _rank(self, index: int, column: Column[CellRow]) -> tuple[int, int] | None:
        """When `column` goes (lower first; None: never): empty columns, then comparisons with the
        twin, values without a comparison column, values with one, comparisons with the baseline,
        then the headline metric's own comparisons; the rightmost (the later evals) first within
        each. A column a broken threshold marks goes only after all of those (the pivots and the
        failed checks still show it)."""
        if column.key in ("cell", "status", self.headline):
            return None
        marked = 10 if any(row.mark(column.key) for row in self.rows) else 0
        if all(row.texts[column.key] in ("-", "") for row in self.rows):
            return (0, -index)
        if self.headline and column.key.startswith(f"{self.headline}_vs_"):
            return (marked + (5 if column.key.endswith("_vs_ab") else 6), -index)
        if column.key.endswith("_vs_ab"):
            return (marked + 1, -index)
        if not column.key.endswith("_vs_baseline"):
            compared = any(c.key == f"{column.key}_vs_baseline" for c in self.cols)
            return (marked + (3 if compared else 2), -index)
        return (marked + 4, -index)

    def _need(self, column: Column[CellRow]) -> int:
        """A column's width with no value folded: its widest value with its mark (up to WRAPS_PAST:
        a longer text, an error, wraps at spaces anyway), at least its header's longest word; the
        cell column also fits the widest id."""
        values = [len(truncate(row.texts[column.key], MAX_CELL_CHARS)) + (2 if row.mark(column.key) else 0)
                  for row in self.rows]
        return max(min(max(values, default=1), WRAPS_PAST), _longest_word(column.header))

    def _width(self, cols: list[Column[CellRow]]) -> int:
        """The table's width: each column's need plus its padding and border."""
        return 1 + sum(self._need(c) + 3 for c in cols)

    def _widths(self, cols: list[Column[CellRow]], room: int) -> list[int]:
        """Each column's need, then what the terminal has to spare given to headers that would
        wrap, left to right, up to their length (a header on one line reads best)."""
        widths = [self._need(c) for c in cols]
        spare = room - self._width(cols)
        for i, column in enumerate(cols):
            grow = min(max(0, len(column.header) - widths[i]), max(0, spare))
            widths[i], spare = widths[i] + grow, spare - grow
        return widths

    def _table(self, cols: list[Column[CellRow]], room: int) -> Table:
        table = Table(title=term_text(title(self.summary)),
                      caption=term_text(" · ".join(facts(self.summary, self.details.run))))
        for i, (column, width) in enumerate(zip(cols, self._widths(cols, room))):
            table.add_column(term_text(column.header), overflow="fold", no_wrap=i == 0, width=width)
        for row in self.rows:
            style = None if row.texts["status"] == "ok" else "yellow"
            table.add_row(*(_cell(row, c) for c in cols), style=style)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        keep = list(self.cols)
        order = sorted((rank, column.key) for i, column in enumerate(self.cols)
                       if (rank := self._rank(i, column)) is not None)
        hidden: list[Column[CellRow]] = []
        for _, key in order:
            if self._width(keep) <= options.max_width:
                break
            hidden.append(next(c for c in keep if c.key == key))
            keep = [c for c in keep if c.key != key]
        yield self._table(keep, options.max_width)
        if hidden:
            names = ", ".join(c.header for c in hidden)
            yield f"[dim]{term_text(f'left out at {options.max_width} columns: {names}; a wider terminal or --format markdown, csv or html shows them')}[/dim]"


def _add_columns(table: Table, headers: list[str], texts: list[list[str]]) -> None:
    """The columns of a table whose first is the cell: each at least as wide as its longest word
    (values and header), so rich wraps a value at its spaces but never folds a number mid-digit,
    and the first (a cell's label, ``dp8-piecewise-fixoff (only in A)``) never wraps at all."""
    for i, header in enumerate(headers):
        widest = max((len(line[i]) if i == 0 else _longest_word(line[i]) for line in texts), default=1)
        table.add_column(term_text(header), overflow="fold", no_wrap=i == 0,
                         min_width=max(widest, _longest_word(header)))


def _not_checked(flag: Flag) -> bool:
    """A flag of a check that was not made (its reason, not a broken value)."""
    return bool(flag.not_checked or flag.differs or flag.setup_differs or flag.refused)


def _cell(row: Row, column: Column[CellRow]) -> str:
    return _marked(truncate(row.texts[column.key], MAX_CELL_CHARS), row.mark(column.key))


def headline_markup(summary: RunSummary | RunComparison, whose: str = "") -> str:
    """The headline (render/headline.py) marked OK or NOT OK: the report's first line and the CLI's last."""
    ok, _ = verdict_line(summary)
    return ("[green]OK[/green] " if ok else "[bold red]NOT OK[/bold red] ") + term_text(whose + headline(summary))


def report(summary: RunSummary, details: Details) -> list[RenderableType]:
    """The headline, the pivots (the summary tables), the matrix with its legend, the checks, the
    broken thresholds and the tallies."""
    out: list[RenderableType] = [headline_markup(summary), *(_pivot(p) for p in pivots(summary))]
    out += [_Matrix(summary, details), f"[dim]{term_text(legend(summary))}[/dim]"]
    if summary.simulated:
        out.append(f"[dim]{term_text(SIM_NOTE)}[/dim]")
    for found in imports(summary):
        said = f"{found.package} imported from {found.origin} ({found.said}): {', '.join(found.cells)}"
        out.append(f"[dim]{term_text(said)}[/dim]")
    if lines := engine_log_lines(summary):
        out.append(term_text(engine_log_title(summary)))
        out += [f"[dim]  {term_text(line)}[/dim]" for line in lines]
    between: list[RenderableType] = [f"[bold]regression[/bold] {term_text(line)}" for line in regression_lines(summary)]
    between += [f"[dim]{term_text(line)}[/dim]" for line in [cost_line(summary)] if line]
    out += _verdict(summary, between)
    return out


def _verdict(summary: RunSummary | RunComparison, between: list[RenderableType], whose: str = "") -> list[RenderableType]:
    """A run's or a comparison's checks (a line per threshold), its broken thresholds, `between`,
    and the tallies (`whose` before their words: "B against A: "): detail under the headline."""
    out: list[RenderableType] = [f"[dim]{term_text(line)}[/dim]" for line in check_lines(summary)]
    for cell in summary.cells:
        for flag in cell.flags:
            marker = ("[yellow]NOT CHECKED[/yellow]" if _not_checked(flag) else
                      "[bold red]FAIL[/bold red]" if flag.action == "fail" else "[yellow]warn[/yellow]")
            out.append(f"{marker} {term_text(flag.message)}")
    _, words = verdict_line(summary)
    return [*out, *between, f"[dim]{term_text(whose + words)}[/dim]"]


class _CompareTable:
    """The compare table, fitted to the console's width as the matrix is (`_Matrix`): each column
    as wide as its widest value, so no delta or id folds; columns left out from the right (the
    flips, then the later evals) until it fits, and a line says which. Never left out: the cell and
    the first metric's A, B and Δ."""

    KEPT = 4

    def __init__(self, result: RunComparison) -> None:
        self.result = result
        self.cols, self.rows = compare_columns(result.specs()), compare_rows(result)

    def _need(self, column: Column[ComparedCell]) -> int:
        values = [len(truncate(texts[column.key], MAX_CELL_CHARS)) for texts in self.rows]
        return max(min(max(values, default=1), WRAPS_PAST), _longest_word(column.header))

    def _width(self, cols: list[Column[ComparedCell]]) -> int:
        return 1 + sum(self._need(c) + 3 for c in cols)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        keep = list(self.cols)
        while len(keep) > self.KEPT and self._width(keep) > options.max_width:
            keep.pop()
        table = Table(title=term_text(compare_title(self.result)))
        for i, column in enumerate(keep):
            table.add_column(term_text(column.header), overflow="fold", no_wrap=i == 0, width=self._need(column))
        for texts in self.rows:
            table.add_row(*(term_text(truncate(texts[c.key], MAX_CELL_CHARS)) for c in keep))
        yield table
        if hidden := self.cols[len(keep):]:
            names = ", ".join(c.header for c in hidden)
            yield f"[dim]{term_text(f'left out at {options.max_width} columns: {names}; a wider terminal or --format markdown, csv or html shows them')}[/dim]"


def comparison(result: RunComparison) -> list[RenderableType]:
    """The compare table, each run in a line, the legend, and B's verdict against A."""
    return [headline_markup(result, "B against A: "), _CompareTable(result), f"A: {term_text(run_facts(result.a))}",
            f"B: {term_text(run_facts(result.b))}", f"[dim]{term_text(compare_legend(result))}[/dim]",
            *_verdict(result, [], "B against A: ")]
