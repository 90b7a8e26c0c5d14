"""What a reader sees (issue 38 items 3 and 7): the terminal at any width, the PR paste, the plot.

Two runs: the real demo run A of tests/test_report_cli.py (`evalkit matrix` on the simulator:
the baseline pair and the bug's pair, every eval of the demo), and a 12-cell run written the way
the runner writes one (benchmarks/html_report.py: 1,319 questions, 64 long generations per
cell, one buggy fix-off cell), summarized by the real verdict. A 48-cell one, slow, for the size
of the PR comment.
"""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from benchmarks.html_report import make_run
from evalkit.cli import main
from evalkit.config import parse_config
from evalkit.render import render
from evalkit.render.forest import png
from evalkit.render.headline import headline
from evalkit.render.table import columns, table_rows
from evalkit.render.terminal import WRAPS_PAST
from evalkit.render.text import MAX_CELL_CHARS, truncate
from evalkit.store import read_json
from evalkit.verdict.deltas import summarize_run
from evalkit.verdict.summary import RunSummary

WIDTHS = (80, 100, 120, 160, 200)
LOCAL_PATH = re.compile(r"(?<![\w.:/~…-])/(tmp|root|home|work|Users|usr|var|opt|srv)/")
"""An absolute local path as a report could leak it (a `…/` prefix marks one already cut)."""


def hand_made_run(folder: Path, cells: int) -> tuple[Path, RunSummary]:
    run = make_run(folder, cells // 2)
    config = parse_config(json.loads((run / "run.json").read_text())["config"], run / "run.json")
    return run, summarize_run(run, config)


@pytest.fixture(scope="module")
def twelve(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunSummary]:
    return hand_made_run(tmp_path_factory.mktemp("twelve"), 12)


@pytest.fixture(scope="module")
def runs(twelve: tuple[Path, RunSummary], demo_runs: dict[str, Path]) -> list[tuple[Path, RunSummary]]:
    demo = RunSummary.model_validate(read_json(demo_runs["a"] / "summary.json"))
    return [(demo_runs["a"], demo), twelve]


def left_out(lines: list[str]) -> list[str]:
    """The headers the matrix's `left out at N columns: a, b; ...` line names (wrapped or not)."""
    start = next((i for i, line in enumerate(lines) if line.startswith("left out at")), None)
    if start is None:
        return []
    text = " ".join(" ".join(lines[start:start + 10]).split())
    return text.split(" columns: ", 1)[1].split("; a wider terminal", 1)[0].split(", ")


def terminal(summary: RunSummary, run_path: Path, width: int) -> list[str]:
    """The terminal report at `width` columns (with run.json's facts under the matrix)."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    render(summary, "terminal", run_path, console=console)
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_terminal_fits_its_width_summary_tables_first_numbers_and_ids_whole(
        runs: list[tuple[Path, RunSummary]], width: int) -> None:
    for run_path, summary in runs:
        lines = terminal(summary, run_path, width)
        assert max(len(line) for line in lines) <= width
        assert " ".join(" ".join(lines[:6]).split()).startswith(" ".join(f"NOT OK {headline(summary)}".split()))
        pivot = next(i for i, line in enumerate(lines) if line.startswith("GSM8K flexible (95% CI) by configuration"))
        matrix = next(i for i, line in enumerate(lines) if line.strip().startswith("evalkit · "))
        assert pivot < matrix  # the summary tables come first
        kept = [c for c in columns(summary.specs()) if c.header not in left_out(lines)]
        assert "GSM8K flexible (95% CI)" in [c.header for c in kept]  # the headline metric never goes
        for row in table_rows(summary):
            line = next(text for text in lines[matrix:] if text.startswith(f"│ {row.cell_id} "))
            for column in kept:
                value = truncate(row.texts[column.key], MAX_CELL_CHARS)
                if len(value) <= WRAPS_PAST:
                    assert f" {value} " in line, (width, row.cell_id, column.header, line)


def test_the_wide_table_gives_up_columns_least_telling_first_and_a_broken_one_last(
        twelve: tuple[Path, RunSummary]) -> None:
    run_path, summary = twelve
    gone = {width: left_out(terminal(summary, run_path, width)) for width in WIDTHS}
    for wider, narrower in zip(WIDTHS[1:], WIDTHS):
        assert gone[narrower][:len(gone[wider])] == gone[wider]  # one order of importance at every width
    assert gone[80][:3] == ["engine TPOT", "tokens/s", "GSM8K strict"]  # values without a comparison go first
    # the bug's cell breaks its twin threshold: that column outlives the baseline comparison
    assert "Δ flexible vs baseline" in gone[80] and "Δ flexible vs twin" not in gone[80]


def test_a_piped_report_is_as_wide_as_columns_says(demo_runs: dict[str, Path]) -> None:
    def lines(columns: str | None) -> list[str]:
        done = CliRunner().invoke(main, ["report", str(demo_runs["a"])], env={"COLUMNS": columns})  # stdout: a pipe
        assert done.exit_code == read_json(demo_runs["a"] / "summary.json")["exit_code"], done.output
        return done.output.splitlines()
    assert max(map(len, lines("90"))) <= 90
    assert 90 < max(map(len, lines(None))) <= 200  # no COLUMNS: a CI log's 200


def paste(markdown: str) -> list[str]:
    return markdown[:markdown.index("<details>")].splitlines()


def test_the_pr_paste_of_twelve_cells_is_the_headline_pivots_and_failed_checks(
        twelve: tuple[Path, RunSummary]) -> None:
    run_path, summary = twelve
    markdown = render(summary, "markdown", run_path) or ""
    top = paste(markdown)
    assert len(top) <= 60
    assert top[0] == f"❌ **{headline(summary)}**".replace(">", "&gt;")
    assert "#### GSM8K flexible (95% CI) by configuration" in top and "#### Collapse rate (k/n) by configuration" in top
    failed = [f for cell in summary.cells for f in cell.flags if f.action == "fail"]
    assert failed and len([line for line in top if line.startswith("- ❌ **FAIL** ")]) == len(failed)
    rest = markdown[markdown.index("<details>"):]
    assert "#### All cells" in rest and "#### Checks: PASS, FAIL or INCONCLUSIVE" in rest


@pytest.mark.slow
def test_a_48_cell_pr_comment_stays_well_under_githubs_limit(tmp_path: Path) -> None:
    run_path, summary = hand_made_run(tmp_path, 48)
    markdown = render(summary, "markdown", run_path) or ""
    assert len(markdown) <= 52_000  # GitHub's comment limit: 65,536
    assert markdown.count("<details") == markdown.count("</details>")


@pytest.mark.parametrize("fmt", ["markdown", "html", "junit", "csv", "headline"])
def test_no_report_holds_an_absolute_local_path(demo_runs: dict[str, Path], fmt: str) -> None:
    summary = read_json(demo_runs["a"] / "summary.json")
    assert str(demo_runs["a"].parent) in " ".join(summary["command"])  # the run was made with --results-dir /tmp/...
    text = render(summary, fmt, demo_runs["a"]) or ""
    assert not LOCAL_PATH.search(text), LOCAL_PATH.search(text)


def test_the_plot_is_drawn_for_a_pr_column(demo_runs: dict[str, Path], tmp_path: Path) -> None:
    summary = RunSummary.model_validate(read_json(demo_runs["a"] / "summary.json"))
    out = tmp_path / "deltas.png"
    assert png(summary, out)
    width, height = struct.unpack(">II", out.read_bytes()[16:24])  # the PNG's IHDR
    assert 800 <= width <= 900 and height > 200  # GitHub shows it at its own size: nothing shrinks
