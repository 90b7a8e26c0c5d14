"""The headline: one line about cells that opens every format (issue 38 item 1).

Hand-made runs (tests/helpers/runs.py: 20 questions, a 2 x 2 matrix whose fix-off cells
have a twin) summarized by the real verdict, so each headline comes from real checks; then the
real demo run A of tests/test_report_cli.py, made by `evalkit matrix -q`, for the CLI's lines.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from evalkit.render import render
from evalkit.render.headline import headline
from evalkit.store import read_json
from evalkit.verdict.deltas import summarize_run
from evalkit.verdict.summary import RunSummary
from tests.helpers.runs import CellSpec, write_run

HEALTHY = {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec(), "dp8-fixon": CellSpec(), "dp8-fixoff": CellSpec()}


def judged(tmp_path: Path, **cells: CellSpec) -> tuple[Path, RunSummary]:
    run_path, config = write_run(tmp_path, "r", HEALTHY | cells)
    return run_path, summarize_run(run_path, config)


def test_a_broken_cell_is_named_with_the_figure_that_shows_it(tmp_path: Path) -> None:
    _, summary = judged(tmp_path, **{"dp8-fixoff": CellSpec(right=12)})
    # both of its GSM8K thresholds FAIL (min 0.8 and a 10-point drop against its twin): the
    # change against the twin is the figure, once per metric
    assert headline(summary) == "1 of 4 cells broke: dp8-fixoff: GSM8K flexible -40.0 points vs twin"


def test_all_cells_holding_says_so_with_the_checks_behind_it(tmp_path: Path) -> None:
    _, summary = judged(tmp_path)
    assert headline(summary) == "all 4 cells held (6 checks PASS)"


def test_a_cell_that_did_not_run_is_named_with_its_error(tmp_path: Path) -> None:
    _, summary = judged(tmp_path, **{"dp8-fixon": CellSpec(status="error", error="engine exited with code 1")})
    assert headline(summary) == "1 of 4 cells did not run: dp8-fixon (error: engine exited with code 1)"


def test_undecided_cells_are_named_with_what_the_run_could_see(tmp_path: Path) -> None:
    _, summary = judged(tmp_path, **{"tp8-fixon": CellSpec(right=17), "tp8-fixoff": CellSpec(right=17)})
    line = headline(summary)
    # 17 of 20 right is 0.85: above the min of 0.8, but its exact interval at the level the Holm
    # adjustment over 4 cells may use (0.05 / 4 each side: 97.5%) reaches below it
    assert line.startswith("2 of 4 cells held; 2 of 4 cells could not be decided: GSM8K flexible min 0.8 on "
                           "tp8-fixon, tp8-fixoff (98% interval 0.")
    assert "reaches past 0.8" in line and "INCONCLUSIVE" not in line


def test_every_format_opens_with_the_headline(tmp_path: Path) -> None:
    run_path, summary = judged(tmp_path, **{"dp8-fixoff": CellSpec(right=12)})
    line = headline(summary)
    console = Console(file=io.StringIO(), width=200, record=True, color_system=None)
    render(summary, "terminal", run_path, console=console)
    assert console.export_text().splitlines()[0] == f"NOT OK {line}"
    assert (render(summary, "markdown", run_path) or "").splitlines()[0] == f"❌ **{line}**"
    html = render(summary, "html", run_path) or ""
    body = html[html.index("<body>") + len("<body>"):].lstrip()
    assert body.startswith(f'<p class="verdict bad">✗ {line}</p>')
    assert render(summary, "headline", run_path) == line + "\n"
    junit = render(summary, "junit", run_path) or ""
    assert f"❌ **{line}**" in junit  # the suite's system-out is the markdown report


def test_matrix_q_still_prints_the_report_the_results_folder_and_ends_with_the_headline(
        demo_runs: dict[str, Path]) -> None:
    """Run A was made with `-q` (as a GitHub Actions step): no progress, but the rest of the output."""
    printed = [line for line in demo_runs["a_stdout"].read_text().splitlines() if not line.startswith("::")]
    line = headline(RunSummary.model_validate(read_json(demo_runs["a"] / "summary.json")))
    opening = " ".join(" ".join(printed[:4]).split())  # the terminal report's first line, wrapped at 200 columns
    assert opening.startswith(" ".join(f"NOT OK {line}".split()))
    assert printed[-2:] == [f"results: {demo_runs['a']}", f"NOT OK {line}"]
    assert any(text.startswith("#1 gsm8k.flexible min 0.9") for text in printed)  # the checks, detail


@pytest.mark.parametrize("fmt", ["terminal", "markdown"])
def test_report_of_the_real_run_names_the_bug_cell_first(demo_runs: dict[str, Path], fmt: str) -> None:
    summary = read_json(demo_runs["a"] / "summary.json")
    console = Console(file=io.StringIO(), width=120, record=True, color_system=None)
    text = render(summary, fmt, demo_runs["a"], console=console) or console.export_text()
    assert "cells broke: dp8-piecewise-fixoff: " in text.splitlines()[0]
