"""The one renderer interface the CLI calls: render(summary, fmt, run_path, console) and
render_compare(result, fmt, console), with FORMATS as the `--format` choices."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from evalkit.render import FORMATS, render, render_compare
from evalkit.verdict.compare import compare_runs
from evalkit.verdict.summary import RunComparison
from tests.helpers.runs import CellSpec, loop_text, rerun, summary_of, write_run


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A 2 x 2 run whose DP fix-off cell flips questions and collapses."""
    healthy = CellSpec(long_texts=["fine prose"] * 2)
    cells = {"tp8-fixon": healthy, "tp8-fixoff": healthy, "dp8-fixon": healthy,
             "dp8-fixoff": CellSpec(right=15, long_texts=[loop_text("again "), "fine prose"])}
    run_path, config = write_run(tmp_path / "results", "api-run", cells)
    return run_path, summary_of(run_path, config)


def test_the_formats_are_the_cli_choices_terminal_first() -> None:
    assert list(FORMATS) == ["terminal", "markdown", "csv", "json", "html", "headline", "junit"]


@pytest.mark.parametrize("fmt", ["markdown", "csv", "json", "html", "headline"])
def test_a_text_format_returns_its_document_ending_in_a_newline(run: tuple[Path, dict], fmt: str) -> None:
    run_path, summary = run
    text = render(summary, fmt, run_path)
    assert isinstance(text, str) and text.endswith("\n") and not text.endswith("\n\n")
    compared = render_compare(compare_runs(run_path, rerun(run_path, "again")), fmt)
    assert isinstance(compared, str) and compared.endswith("\n")


def test_json_is_the_summary_itself(run: tuple[Path, dict]) -> None:
    run_path, summary = run
    assert render(summary, "json", run_path) == json.dumps(summary, indent=2) + "\n"
    result = compare_runs(run_path, rerun(run_path, "again"))
    document = json.loads(render_compare(result, "json") or "")
    assert document == result.dump() and RunComparison.model_validate(document).dump() == document  # reads back


def test_terminal_prints_on_the_console_it_is_given_and_returns_nothing(run: tuple[Path, dict]) -> None:
    run_path, summary = run
    out = io.StringIO()
    assert render(summary, "terminal", run_path, console=Console(file=out, width=200)) is None
    assert "dp8-fixoff" in out.getvalue() and "run api-run" in out.getvalue()  # run facts from run.json
    out = io.StringIO()
    assert render_compare(compare_runs(run_path, rerun(run_path, "again")), "terminal", console=Console(file=out, width=200)) is None
    assert "evalkit compare · A api-run" in out.getvalue()


def test_without_the_run_folder_the_markdown_leaves_out_run_facts_and_examples(run: tuple[Path, dict]) -> None:
    run_path, summary = run
    full, bare = render(summary, "markdown", run_path) or "", render(summary, "markdown") or ""
    assert "evalkit 0.1.0" in full and "<pre>" in full
    assert "evalkit 0.1.0" not in bare and "<pre>" not in bare
    assert "right there, wrong here (5): test-15" in bare  # the flipped ids come from the summary


def test_an_unknown_format_is_a_key_error(run: tuple[Path, dict]) -> None:
    with pytest.raises(KeyError):
        render(run[1], "pdf")
