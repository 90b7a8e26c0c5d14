"""`evalkit report` and `evalkit compare` on real demo runs made by `evalkit matrix` on the simulator.

Two small runs are made once per session (tests/conftest.py's `demo_runs`; 5 engine starts,
10-20 s): A = the baseline pair
tp8-full and the bug's pair dp8-piecewise (fix on/off), 40 questions and 8 long generations;
B = only the bug's cell dp8-piecewise-fixoff, another simulator seed, 30 questions and no
repetition eval, so compare has cells in one run only, pairs on the shared questions and meets
a cell without collapse metrics.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.errors import EXIT_THRESHOLD
from evalkit.evals.recorded import specs_of
from evalkit.render.compare_table import compare_columns
from evalkit.render.table import columns, flag_column
from evalkit.store import read_json, read_jsonl
from evalkit.verdict.summary import Flag, RunSummary
from tests.helpers.runs import gfm, tables


def cli(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def test_markdown_of_a_real_run_one_row_per_cell_documented_columns(demo_runs: dict[str, Path]) -> None:
    result = cli("report", "run-a", "--format", "markdown", "--results-dir", str(demo_runs["results"]))
    assert result.exit_code == EXIT_THRESHOLD == read_json(demo_runs["a"] / "summary.json")["exit_code"]  # as printed
    md = result.stdout
    found = tables(md)
    cols = columns(specs_of(read_json(demo_runs["a"] / "summary.json")), RunSummary.load(demo_runs["a"] / "summary.json").cells)
    matrix = found.headers.index([c.header for c in cols])
    body = found.bodies[matrix]
    assert [row[0].split(" ")[0].strip("*") for row in body] == read_json(demo_runs["a"] / "run.json")["cells"]
    assert all(len(row) == len(cols) for row in body)
    assert md.splitlines()[2].startswith("<sub>evalkit · sim/deepseek-v4 on sim · ")  # under the headline
    assert found.headers[0] == ["parallel · graph", "fixon", "fixoff", "Δ fixoff − fixon"]
    assert [row[0] for row in found.bodies[0]] == ["tp8 · full", "dp8 · piecewise"]
    fences = [t for t in gfm().parse(md) if t.type == "fence"]
    assert fences[-1].content.startswith("evalkit matrix --config ") and "--run-id run-a" in fences[-1].content


def test_markers_sit_exactly_where_summary_json_has_broken_thresholds(demo_runs: dict[str, Path]) -> None:
    md = cli("report", "run-a", "--format", "markdown", "--results-dir", str(demo_runs["results"])).stdout
    summary = read_json(demo_runs["a"] / "summary.json")
    specs = specs_of(summary)
    cols = columns(specs, RunSummary.load(demo_runs["a"] / "summary.json").cells)  # its cells' costs: a GPU-h column
    body = tables(md).bodies[tables(md).headers.index([c.header for c in cols])]
    assert summary["broken_thresholds"] >= 1  # the bug's cell at 40 questions, by design of demo_config
    for cell, row in zip(summary["cells"], body):
        marked = {c.key for c, text in zip(cols, row) if text.endswith("❌")}
        expected = {flag_column(Flag.model_validate(f), specs, cols) for f in cell["flags"] if f["action"] == "fail"}
        assert marked == (expected | {"cell"} if expected else set()), cell["id"]


def test_json_format_is_the_stored_summary(demo_runs: dict[str, Path]) -> None:
    out = cli("report", str(demo_runs["a"]), "--format", "json").stdout
    assert json.loads(out) == read_json(demo_runs["a"] / "summary.json")


def test_csv_format_one_row_per_cell(demo_runs: dict[str, Path]) -> None:
    out = cli("report", "run-a", "--format", "csv", "--results-dir", str(demo_runs["results"])).stdout
    frame = pd.read_csv(io.StringIO(out))
    summary = read_json(demo_runs["a"] / "summary.json")
    assert list(frame["cell"]) == [c["id"] for c in summary["cells"]]
    assert list(frame["gsm8k.flexible"]) == [c["metrics"]["gsm8k.flexible"] for c in summary["cells"]]
    assert list(frame["repetition.n"]) == [8, 8, 8, 8]


def test_terminal_format_and_a_bad_run_ref(demo_runs: dict[str, Path]) -> None:
    out = cli("report", "latest", "--results-dir", str(demo_runs["results"]))
    assert out.exit_code == read_json(demo_runs["b"] / "summary.json")["exit_code"]  # latest = run-b, its code
    assert "dp8-piecewise-fixoff" in out.output
    bad = CliRunner().invoke(main, ["report", "no-such-run", "--results-dir", str(demo_runs["results"])])
    assert bad.exit_code == 2 and "no-such-run: no such run" in bad.output


def _marks(run: Path, cell: str) -> dict[str, bool]:
    return {r["id"]: r["flexible-extract.correct"] for r in read_jsonl(run / cell / "gsm8k.samples.jsonl")}


ANOTHER_SEED = ("--allow", "argv")
"""Run B ran another simulator seed (`--sim-seed 1`): compare judges it only when told to allow it."""


def test_compare_pairs_cells_by_id_and_questions_by_id(demo_runs: dict[str, Path]) -> None:
    out = cli("compare", "run-a", "run-b", *ANOTHER_SEED, "--format", "json", "--results-dir", str(demo_runs["results"])).output
    result = json.loads(out)
    where = {c["id"]: c["in"] for c in result["cells"]}
    assert where == {"tp8-full-fixon": "a", "tp8-full-fixoff": "a", "dp8-piecewise-fixon": "a",
                     "dp8-piecewise-fixoff": "both"}
    for cell in (c for c in result["cells"] if c["in"] == "both"):
        a, b = _marks(demo_runs["a"], cell["id"]), _marks(demo_runs["b"], cell["id"])
        shared = sorted(set(a) & set(b))
        flex = cell["gsm8k.flexible"]
        assert flex["n"] == len(shared) == 30
        assert flex["diff"] == pytest.approx(sum(b[i] for i in shared) / 30 - sum(a[i] for i in shared) / 30)
        assert set(flex["flipped_to_wrong"]) == {i for i in shared if a[i] and not b[i]}
        assert set(flex["flipped_to_right"]) == {i for i in shared if b[i] and not a[i]}
        assert cell["repetition.collapse_rate"] is None  # B ran no repetition eval


def test_compare_markdown_and_csv(demo_runs: dict[str, Path]) -> None:
    results = str(demo_runs["results"])
    md = cli("compare", "run-a", "run-b", *ANOTHER_SEED, "--format", "markdown", "--results-dir", results).output
    found = tables(md)
    specs = specs_of(json.loads(cli("compare", "run-a", "run-b", *ANOTHER_SEED, "--format", "json", "--results-dir", results).output))
    assert found.headers[0] == [c.header for c in compare_columns(specs)]  # then the checks' table
    assert [row[0] for row in found.bodies[0]] == ["tp8-full-fixon (only in A)", "tp8-full-fixoff (only in A)",
                                                   "dp8-piecewise-fixon (only in A)", "dp8-piecewise-fixoff"]
    assert [row[0] for row in found.bodies[1]] == ["dp8-piecewise-fixoff"]  # the one cell both runs ran
    frame = pd.read_csv(io.StringIO(cli("compare", "run-a", "run-b", *ANOTHER_SEED, "--format", "csv", "--results-dir", results).output))
    assert list(frame["in"]) == ["a", "a", "a", "both"] and "p.gsm8k.flexible" in frame.columns
    assert frame["check.1.outcome"].isna().tolist() == [True, True, True, False]
    terminal = cli("compare", "run-a", "run-b", *ANOTHER_SEED, "--results-dir", results)
    # B (another sim seed) is beyond margins it checks without a test: exit 1, as the matrix would
    assert terminal.exit_code == EXIT_THRESHOLD and "only in A" in terminal.output


def test_collapse_evidence_of_a_real_run_is_folded_per_cell(demo_runs: dict[str, Path]) -> None:
    md = cli("report", "run-a", "--format", "markdown", "--results-dir", str(demo_runs["results"])).stdout
    summary = read_json(demo_runs["a"] / "summary.json")
    collapsed = {c["id"]: c["metrics"]["repetition.collapsed"] for c in summary["cells"]}
    assert collapsed["dp8-piecewise-fixoff"] >= 1  # the simulated bug, seed 0
    expected = [f"<details><summary>{cell}: {k} of 8 long generations collapsed</summary>"
                for cell, k in collapsed.items() if k]
    assert [line for line in md.splitlines() if "long generations collapsed" in line] == expected
    html = gfm().render(md)
    assert html.count("<details>") == html.count("</details>") and html.count("<pre>") == html.count("</pre>")
