"""What a matrix shows while it runs: a live table at a terminal, timestamped lines elsewhere.

Both implement the `Progress` protocol of run/options.py (`update(cell_id, state, detail)`), are
safe to call from the cell worker threads, and never print model text (only states and numbers).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from evalkit.clean import clean

DONE_STATES = ("ok", "error", "skipped", "interrupted")


class PlainProgress:
    """Timestamped lines on stderr, one per state change: readable in CI logs and cron mail.

    Counters (`repetition 7/64`) are printed only at their first and last step.
    """

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._last: dict[str, str] = {}
        self._lock = threading.Lock()
        self._closed = False

    def update(self, cell_id: str, state: str, detail: str = "") -> None:
        done, sep, total = detail.partition("/")
        if sep and done.isdigit() and done not in ("1", total):
            return
        line = f"{state} {clean(detail)}".strip()
        with self._lock:
            if self.quiet or self._closed or self._last.get(cell_id) == line:
                return
            self._last[cell_id] = line
            click.echo(f"[{time.strftime('%H:%M:%S')}] {cell_id:<28} {line}", err=True)

    def close(self) -> None:
        """No line after this one: the report follows, and a cell worker that an interrupted run
        stopped waiting for must not print under it."""
        with self._lock:
            self._closed = True


@dataclass
class _CellView:
    state: str = "waiting"
    detail: str = ""
    started: float | None = None
    finished: float | None = None
    ready_after: str = ""
    devices: str = ""
    warning: str = ""
    """A `warning` state (an engine not running its source) stays on the cell's line to the end."""


@dataclass
class LiveProgress:
    """A rich live table, one line per cell, with elapsed and estimated time left."""

    console: Console
    title: str = "evalkit matrix"
    """The command the view belongs to (the table's title)."""
    cells: dict[str, _CellView] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _live: Live | None = None
    _closed: bool = False

    def update(self, cell_id: str, state: str, detail: str = "") -> None:
        if self._live is None and not self._closed:
            # Started by the first cell, not when made: a run refused as bad input prints only its
            # error line. Live renders `self` (via __rich__) at its own 4 Hz, so updates only change
            # state and a burst of 1,319 answers costs nothing.
            self._live = Live(self, console=self.console, refresh_per_second=4, transient=False)
            self._live.start()
        with self._lock:
            view = self.cells.setdefault(cell_id, _CellView())
            if state == "warning":
                view.warning = clean(detail)
                return
            if state == "starting" and view.started is None:
                view.started = time.monotonic()
            if state == "starting" and "devices" in detail:
                view.devices = detail.split("devices", 1)[1].strip()
            if state == "ready":
                view.ready_after = detail.removeprefix("in ").strip()
            if state in DONE_STATES:
                view.finished = time.monotonic()
            view.state, view.detail = state, clean(detail)[:80]

    def __rich__(self) -> Table:
        with self._lock:
            return self._render()

    def _eta(self) -> str:
        took = [v.finished - v.started for v in self.cells.values() if v.finished and v.started]
        left = sum(1 for v in self.cells.values() if v.state not in DONE_STATES)
        if not took or not left:
            return "-"
        per_cell = sum(took) / len(took)
        running = max(1, sum(1 for v in self.cells.values() if v.started and not v.finished))
        return f"{per_cell * left / running:.0f} s"

    def _render(self) -> Table:
        elapsed = time.monotonic() - self.started
        table = Table(title=f"{self.title}: {elapsed:.0f} s elapsed, about {self._eta()} left", expand=False)
        for header in ("cell", "state", "detail", "devices", "engine ready", "cell time"):
            table.add_column(header)
        for cell_id, v in self.cells.items():
            took = "" if v.started is None else f"{(v.finished or time.monotonic()) - v.started:.0f} s"
            style = {"ok": "green", "error": "red", "interrupted": "yellow", "skipped": "yellow"}.get(v.state)
            detail = escape(v.detail) + (f"\n[bold red]{escape(v.warning)}[/bold red]" if v.warning else "")
            table.add_row(escape(cell_id), v.state, detail, v.devices, v.ready_after, took, style=style)
        return table

    def close(self) -> None:
        self._closed = True
        if self._live is not None:
            self._live.stop()
            self._live = None


def make_progress(quiet: bool, title: str = "evalkit matrix") -> PlainProgress | LiveProgress:
    """Progress on stderr (stdout stays for reports and --json): a live view only at an interactive
    terminal; plain lines under CI, NO_COLOR or a pipe."""
    console = Console(stderr=True)
    plain = quiet or not console.is_terminal or os.environ.get("CI") or os.environ.get("NO_COLOR") or not sys.stderr.isatty()
    return PlainProgress(quiet) if plain else LiveProgress(console, title)
