"""run/progress.py: what a running matrix shows: timestamped lines, nothing (quiet), or a live table.

Every implementation takes `update(cell_id, state, detail)` from any worker thread and shows
states and numbers on one line each, never raw control characters.
"""

from __future__ import annotations

import io
import os
import pty
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console

from evalkit.run import progress
from evalkit.run.progress import LiveProgress, PlainProgress, make_progress

LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] (?P<cell>\S+) +(?P<rest>.*)$")


def lines(err: str) -> list[tuple[str, str]]:
    """(cell, 'state detail') of each printed line; every line must have the timestamped shape."""
    out = []
    for line in err.splitlines():
        match = LINE.match(line)
        assert match, f"not a progress line: {line!r}"
        out.append((match["cell"], match["rest"]))
    return out


# --- plain lines -----------------------------------------------------------------------------


def test_plain_prints_one_timestamped_line_per_state_change_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    p = PlainProgress()
    p.update("tp8-fixon", "waiting")
    p.update("tp8-fixon", "starting", "port 8001 devices 0,1")
    p.update("tp8-fixon", "ready", "in 3.2 s")
    p.update("tp8-fixon", "ok")
    p.close()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert lines(captured.err) == [("tp8-fixon", "waiting"), ("tp8-fixon", "starting port 8001 devices 0,1"),
                                   ("tp8-fixon", "ready in 3.2 s"), ("tp8-fixon", "ok")]
    assert captured.err.splitlines()[0].index("waiting") == len("[00:00:00] ") + 29  # ids padded to 28


def test_plain_repeats_nothing_and_keeps_each_cell_apart(capsys: pytest.CaptureFixture[str]) -> None:
    p = PlainProgress()
    for _ in range(3):
        p.update("a", "gsm8k")
        p.update("b", "gsm8k")
    p.update("a", "repetition")
    p.update("a", "gsm8k")  # a change back is a change
    assert lines(capsys.readouterr().err) == [("a", "gsm8k"), ("b", "gsm8k"), ("a", "repetition"), ("a", "gsm8k")]


def test_plain_prints_a_counter_only_at_its_first_and_last_step(capsys: pytest.CaptureFixture[str]) -> None:
    p = PlainProgress()
    for done in range(1, 65):
        p.update("dp8", "repetition", f"{done}/64")
    p.update("dp8", "gsm8k", "done 3/4 of a word")  # not a counter: printed
    assert lines(capsys.readouterr().err) == [("dp8", "repetition 1/64"), ("dp8", "repetition 64/64"),
                                              ("dp8", "gsm8k done 3/4 of a word")]


def test_plain_folds_line_breaks_and_drops_control_sequences(capsys: pytest.CaptureFixture[str]) -> None:
    PlainProgress().update("tp8", "error", "engine exited 1\nTraceback \x1b[31mred\x1b[0m\x1b]0;title\x07 end")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert lines(err) == [("tp8", "error engine exited 1 Traceback red end")]


def test_quiet_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    p = PlainProgress(quiet=True)
    p.update("tp8", "starting", "port 1")
    p.update("tp8", "error", "engine died")
    p.close()
    assert capsys.readouterr() == ("", "")


def test_plain_lines_from_many_threads_are_whole(capsys: pytest.CaptureFixture[str]) -> None:
    p = PlainProgress()

    def cell(n: int) -> None:
        for i in range(50):
            p.update(f"cell-{n}", "gsm8k", f"step {i}")

    threads = [threading.Thread(target=cell, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    printed = lines(capsys.readouterr().err)
    assert len(printed) == 400
    for n in range(8):
        assert [rest for cell_id, rest in printed if cell_id == f"cell-{n}"] == [f"gsm8k step {i}" for i in range(50)]


# --- the live table --------------------------------------------------------------------------


class Clock:
    """progress.py's clock, moved by hand (a real monotonic clock is never 0)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    @staticmethod
    def strftime(fmt: str) -> str:
        return "02:00:00"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress, "time", fake)
    return fake


def text_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=140, force_terminal=False, color_system=None), out


def table_rows(text: str) -> list[list[str]]:
    """The body rows of a rendered table, as cell texts."""
    return [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]


def test_live_table_shows_each_cells_state_devices_ready_time_and_cell_time(clock: Clock) -> None:
    console, out = text_console()
    live = LiveProgress(console, started=clock.now)
    live.update("tp8-fixon", "waiting")
    live.update("dp8-fixon", "waiting")
    live.update("tp8-fixon", "starting", "port 8001 devices 0,1,2,3")
    clock.now += 42
    live.update("tp8-fixon", "ready", "in 41.5 s")
    live.update("tp8-fixon", "gsm8k", "120/1319")
    clock.now += 8
    live.close()
    rows = table_rows(out.getvalue())
    assert "┃ cell      ┃ state   ┃ detail   ┃ devices ┃ engine ready ┃ cell time ┃" in out.getvalue()
    assert rows == [["tp8-fixon", "gsm8k", "120/1319", "0,1,2,3", "41.5 s", "50 s"],
                    ["dp8-fixon", "waiting", "", "", "", ""]]
    assert "evalkit matrix: 50 s elapsed, about - left" in out.getvalue()


def test_live_estimates_time_left_from_finished_cells_and_cells_running_side_by_side(clock: Clock) -> None:
    live = LiveProgress(text_console()[0], started=clock.now)
    for cell_id in ("a", "b", "c", "d"):
        live.update(cell_id, "waiting")
    live.update("a", "starting", "port 1")
    clock.now += 10
    assert live.__rich__().title == "evalkit matrix: 10 s elapsed, about - left"  # nothing finished yet
    live.update("a", "ok")  # one cell took 10 s
    live.update("b", "starting", "port 2")
    live.update("c", "starting", "port 3")
    clock.now += 2
    title = live.__rich__().title
    live.close()
    assert title == "evalkit matrix: 12 s elapsed, about 15 s left"  # 3 cells left, 2 at a time: 10 * 3 / 2


def test_live_cell_time_stops_at_a_finished_state(clock: Clock) -> None:
    console, out = text_console()
    live = LiveProgress(console, started=clock.now)
    for state in ("error", "skipped", "interrupted", "ok"):
        live.update(state, "starting", "port 1")
    clock.now += 5
    for state in ("error", "skipped", "interrupted", "ok"):
        live.update(state, state, "engine exited 1" if state == "error" else "")
    clock.now += 500
    live.close()
    assert [row[5] for row in table_rows(out.getvalue())] == ["5 s"] * 4


def test_live_detail_is_one_clean_line_of_at_most_80_characters(clock: Clock) -> None:
    console, out = text_console()
    live = LiveProgress(console, started=clock.now)
    live.update("tp8[b]", "error", "line one\nline two \x1b[31m[red]\x1b[0m " + "x" * 200)
    live.close()
    assert live.cells["tp8[b]"].detail == ("line one line two [red] " + "x" * 200)[:80]
    assert "\x1b" not in out.getvalue()
    # rich markup in an id or a detail is shown as written, not interpreted
    assert table_rows(out.getvalue())[0][:3] == ["tp8[b]", "error", "line one line two [red] " + "x" * 56]


def test_closing_live_prints_the_final_table_once_and_twice_is_harmless(clock: Clock) -> None:
    console, out = text_console()
    live = LiveProgress(console, started=clock.now)
    live.update("tp8", "ok")
    live.close()
    live.close()
    assert out.getvalue().count("evalkit matrix:") == 1


def test_live_shows_nothing_until_a_cell_reports_nor_after_it_is_closed(clock: Clock) -> None:
    """A run refused as bad input (no cell ever reports) leaves only its error line on the terminal."""
    console, out = text_console()
    live = LiveProgress(console, started=clock.now)
    live.close()
    live.update("tp8", "ok")  # a late report after the run ended starts no second table
    assert out.getvalue() == ""


def test_live_updates_from_many_threads_keep_every_cell(clock: Clock) -> None:
    live = LiveProgress(text_console()[0], started=clock.now)

    def cell(n: int) -> None:
        for i in range(1, 101):
            live.update(f"cell-{n}", "gsm8k", f"{i}/100")

    threads = [threading.Thread(target=cell, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    live.close()
    assert {cell_id: (v.state, v.detail) for cell_id, v in live.cells.items()} == {
        f"cell-{n}": ("gsm8k", "100/100") for n in range(8)}


# --- which one ------------------------------------------------------------------------------


@contextmanager
def stderr_at_a_terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """stderr is an interactive terminal (a pty), CI and colour settings cleared. Entered in the
    test body: pytest puts its own capture back on sys.stderr after fixtures run."""
    for name in ("CI", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        saved = sys.stderr
        sys.stderr = tty
        try:
            yield
        finally:
            sys.stderr = saved
            os.close(master)


def test_at_an_interactive_terminal_progress_is_the_live_table(monkeypatch: pytest.MonkeyPatch) -> None:
    with stderr_at_a_terminal(monkeypatch):
        shown = make_progress(quiet=False)
        shown.close()
    assert isinstance(shown, LiveProgress)


@pytest.mark.parametrize("env", [{"CI": "true"}, {"NO_COLOR": "1"}])
def test_under_ci_or_no_color_progress_is_plain_lines_even_at_a_terminal(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    with stderr_at_a_terminal(monkeypatch):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        shown = make_progress(quiet=False)
        shown.close()
    assert isinstance(shown, PlainProgress) and not shown.quiet


def test_quiet_is_plain_and_silent_even_at_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    with stderr_at_a_terminal(monkeypatch):
        shown = make_progress(quiet=True)
    assert isinstance(shown, PlainProgress) and shown.quiet


def test_when_stderr_is_a_pipe_or_file_progress_is_plain_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CI", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    with (tmp_path / "stderr.log").open("w") as log:
        saved, sys.stderr = sys.stderr, log
        try:
            shown = make_progress(quiet=False)
        finally:
            sys.stderr = saved
    assert isinstance(shown, PlainProgress) and not shown.quiet


def test_live_title_names_the_command_the_view_belongs_to(clock: Clock) -> None:
    live = LiveProgress(text_console()[0], "evalkit bisect", started=clock.now)
    live.update("good-1a2b3c4", "starting", "port 1")
    clock.now += 3
    title = live.__rich__().title
    live.close()
    assert title == "evalkit bisect: 3 s elapsed, about - left"
