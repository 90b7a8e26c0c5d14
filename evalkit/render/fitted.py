"""A terminal table fitted to the console's width: columns left out and said, never split.

A table wider than the terminal makes rich fold every cell into a stack of two-character columns
(`evalkit history` printed 427 such lines at 80 columns). Instead each column is given the width
its values need (a number or an id whole; a text marked `wraps` up to `COMFORTABLE` characters a
line, at least its longest word, so it wraps at its spaces), and while the table is wider than the
console, columns are left out by their `rank` (lower first; None: never), a line under the table
naming them. The spare width then goes to the columns, left to right, up to their widest value
and their header's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table

from evalkit.render.text import term_text

COMFORTABLE = 24
"""Characters a line a wrapping column is fitted at (when its texts are that long)."""


@dataclass(frozen=True)
class FitColumn:
    """One column: its header, one text per row, when it goes and whether its texts wrap."""

    header: str
    texts: Sequence[str]
    rank: tuple[int, int] | None
    """When it is left out (lower first); None: never."""
    wraps: bool = False
    """A text that may wrap at its spaces (a check list, a label); else it is never split."""

    def need(self) -> int:
        """Its narrowest width that splits no value (and no word of a wrapping one) or header word."""
        widest = max((_longest_word(t) if self.wraps else len(t) for t in self.texts), default=1)
        return max(widest, _longest_word(self.header), 1)

    def comfortable(self) -> int:
        """The width the fitting counts it at: a wrapping text gets up to COMFORTABLE characters a line
        (a list of checks three words a line reads worse than a column left out), any other its need."""
        return min(self.full(), max(self.need(), COMFORTABLE)) if self.wraps else self.need()

    def full(self) -> int:
        """Its width with nothing wrapped, its header included."""
        return max(max((len(t) for t in self.texts), default=1), len(self.header), self.need())


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


class FittedTable:
    """The table, fitted when rich renders it (`sections`: the rows before which a rule is drawn)."""

    def __init__(self, title: str, caption: str | None, columns: Sequence[FitColumn], sections: Sequence[int] = (),
                 wider: str = "a wider terminal") -> None:
        self.title, self.caption, self.columns, self.sections = title, caption, list(columns), set(sections)
        self.wider = wider

    @staticmethod
    def _width(cols: Sequence[FitColumn]) -> int:
        """The table's width: each column's comfortable width plus its padding and border."""
        return 1 + sum(c.comfortable() + 3 for c in cols)

    def fit(self, room: int) -> tuple[list[FitColumn], list[FitColumn]]:
        """(the columns kept, in order; those left out, in the order they went) at `room` columns."""
        keep = list(self.columns)
        hidden = []
        for column in sorted((c for c in self.columns if c.rank is not None), key=lambda c: c.rank or (0, 0)):
            if self._width(keep) <= room:
                break
            hidden.append(column)
            keep.remove(column)
        return keep, hidden

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        keep, hidden = self.fit(options.max_width)
        widths = [c.comfortable() for c in keep]
        spare = options.max_width - self._width(keep)
        for i, column in enumerate(keep):
            grow = min(column.full() - widths[i], max(0, spare))
            widths[i], spare = widths[i] + grow, spare - grow
        table = Table(title=term_text(self.title), caption=term_text(self.caption) if self.caption else None)
        for column, width in zip(keep, widths):
            table.add_column(term_text(column.header), overflow="fold", width=width, no_wrap=not column.wraps)
        rows = max((len(c.texts) for c in self.columns), default=0)
        for r in range(rows):
            if r in self.sections and r:
                table.add_section()
            table.add_row(*(term_text(c.texts[r]) for c in keep))
        yield table
        if hidden:
            names = ", ".join(c.header for c in hidden)
            yield f"[dim]{term_text(f'left out at {options.max_width} columns: {names}; {self.wider} shows them')}[/dim]"
