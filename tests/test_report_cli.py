"""`evalkit report` and `evalkit compare` on real demo runs made by `evalkit matrix` on the simulator.

Two small runs are made once per session (5 engine starts, 10-20 s): A = the baseline pair
tp8-full and the bug's pair dp8-piecewise (fix on/off), 40 questions and 8 long generations;
B = only the bug's cell dp8-piecewise-fixoff, another simulator seed, 30 questions and no
repetition eval, so compare has cells in one run only, pairs on the shared questions and meets
a cell without collapse metrics.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.config.loader import _UniqueKeyLoader
from evalkit.errors import EXIT_THRESHOLD
from evalkit.evals.recorded import specs_of
from evalkit.render.compare_table import compare_columns
from evalkit.render.table import columns, flag_column
from evalkit.store import read_json, read_jsonl
from evalkit.verdict.summary import Flag
from tests.conftest import CONFIGS
from tests.helpers.runs import gfm, tables

_CLI = "import sys; from evalkit.cli import main; sys.exit(main())"
_RUNS: dict[str, Path] = {}


def evalkit_subprocess(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process, as a user runs it (argv recorded as `evalkit ...`), never as a
    GitHub Actions step unless `env` says so (a test run inside Actions must not write its summary)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    return subprocess.run([sys.executable, "-c", _CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=240,
                          check=False, env={**clean, **(env or {})})


def demo_config(tmp: Path, name: str, seed: int, repetition: bool) -> Path:
    """configs/demo.yaml, faster, with 8 shorter long generations (or none), and a threshold that
    breaks at 40 questions (no alpha: any drop above 2 points of a fix-off cell against its twin)."""
    raw = yaml.load((CONFIGS / "demo.yaml").read_text(), Loader=_UniqueKeyLoader)  # YAML 1.2: `on:` is a key
    raw["engine"]["args"] = ["--sim-startup-seconds", "0.1", "--sim-seed", str(seed)]
    raw["evals"]["repetition"] = {"count": 8, "max_tokens": 1024, "concurrency": 8} if repetition else {"enabled": False}
    raw["thresholds"].append({"metric": "gsm8k.flexible", "max_drop_ab": 0.02})
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def make_demo_runs(tmp: Path) -> dict[str, Path]:
    """Runs A and B under tmp/results (cached for the session: other test modules reuse them).
    Run A runs as a GitHub Actions step would: `step_summary` is its $GITHUB_STEP_SUMMARY, which
    held one line before, and `a_stdout` its standard output (the annotations, and the report: -q
    silences only the progress on stderr)."""
    if not _RUNS:
        results = tmp / "results"
        step_summary = tmp / "step-summary.md"
        step_summary.write_text("# an earlier step's summary\n")
        a = evalkit_subprocess("matrix", "--config", str(demo_config(tmp, "demo-a", 0, repetition=True)), "--limit", "40",
                               "--only", "parallel=tp8,graph=full", "--only", "parallel=dp8,graph=piecewise",
                               "--run-id", "run-a", "--results-dir", str(results), "-q", "--junit", str(tmp / "run-a.junit.xml"), cwd=tmp,
                               env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(step_summary)})
        b = evalkit_subprocess("matrix", "--config", str(demo_config(tmp, "demo-b", 1, repetition=False)), "--limit", "30",
                               "--only", "parallel=dp8,graph=piecewise,fix=fixoff", "--run-id", "run-b",
                               "--results-dir", str(results), "-q", cwd=tmp)
        for done, run_id in ((a, "run-a"), (b, "run-b")):  # exit 1 is a broken check, not a crash
            assert done.returncode in (0, 1) and (results / run_id / "summary.json").exists(), done.stderr[-3000:]
        _RUNS.update(results=results, a=results / "run-a", b=results / "run-b", step_summary=step_summary)
        (tmp / "run-a.stdout").write_text(a.stdout)
        _RUNS["a_stdout"] = tmp / "run-a.stdout"
        _RUNS["a_junit"] = tmp / "run-a.junit.xml"
    return _RUNS


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_demo_runs(tmp_path_factory.mktemp("demo-runs"))


def cli(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def test_markdown_of_a_real_run_one_row_per_cell_documented_columns(demo_runs: dict[str, Path]) -> None:
    result = cli("report", "run-a", "--format", "markdown", "--results-dir", str(demo_runs["results"]))
    assert result.exit_code == 0
    md = result.output
    found = tables(md)
    cols = columns(specs_of(read_json(demo_runs["a"] / "summary.json")))
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
    md = cli("report", "run-a", "--format", "markdown", "--results-dir", str(demo_runs["results"])).output
    summary = read_json(demo_runs["a"] / "summary.json")
    specs = specs_of(summary)
    cols = columns(specs)
    body = tables(md).bodies[tables(md).headers.index([c.header for c in cols])]
    assert summary["broken_thresholds"] >= 1  # the bug's cell at 40 questions, by design of demo_config
    for cell, row in zip(summary["cells"], body):
        marked = {c.key for c, text in zip(cols, row) if text.endswith("❌")}
        expected = {flag_column(Flag.model_validate(f), specs, cols) for f in cell["flags"] if f["action"] == "fail"}
        assert marked == (expected | {"cell"} if expected else set()), cell["id"]


def test_json_format_is_the_stored_summary(demo_runs: dict[str, Path]) -> None:
    out = cli("report", str(demo_runs["a"]), "--format", "json").output
    assert json.loads(out) == read_json(demo_runs["a"] / "summary.json")


def test_csv_format_one_row_per_cell(demo_runs: dict[str, Path]) -> None:
    out = cli("report", "run-a", "--format", "csv", "--results-dir", str(demo_runs["results"])).output
    frame = pd.read_csv(io.StringIO(out))
    summary = read_json(demo_runs["a"] / "summary.json")
    assert list(frame["cell"]) == [c["id"] for c in summary["cells"]]
    assert list(frame["gsm8k.flexible"]) == [c["metrics"]["gsm8k.flexible"] for c in summary["cells"]]
    assert list(frame["repetition.n"]) == [8, 8, 8, 8]


def test_terminal_format_and_a_bad_run_ref(demo_runs: dict[str, Path]) -> None:
    out = cli("report", "latest", "--results-dir", str(demo_runs["results"]))
    assert out.exit_code == 0 and "dp8-piecewise-fixoff" in out.output  # latest = run-b
    bad = CliRunner().invoke(main, ["report", "no-such-run", "--results-dir", str(demo_runs["results"])])
    assert bad.exit_code == 2 and "not a run" in bad.output


def _marks(run: Path, cell: str) -> dict[str, bool]:
    return {r["id"]: r["flexible-extract.correct"] for r in read_jsonl(run / cell / "gsm8k.samples.jsonl")}


def test_compare_pairs_cells_by_id_and_questions_by_id(demo_runs: dict[str, Path]) -> None:
    out = cli("compare", "run-a", "run-b", "--format", "json", "--results-dir", str(demo_runs["results"])).output
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
    md = cli("compare", "run-a", "run-b", "--format", "markdown", "--results-dir", results).output
    found = tables(md)
    specs = specs_of(json.loads(cli("compare", "run-a", "run-b", "--format", "json", "--results-dir", results).output))
    assert found.headers[0] == [c.header for c in compare_columns(specs)]  # then the checks' table
    assert [row[0] for row in found.bodies[0]] == ["tp8-full-fixon (only in A)", "tp8-full-fixoff (only in A)",
                                                   "dp8-piecewise-fixon (only in A)", "dp8-piecewise-fixoff"]
    assert [row[0] for row in found.bodies[1]] == ["dp8-piecewise-fixoff"]  # the one cell both runs ran
    frame = pd.read_csv(io.StringIO(cli("compare", "run-a", "run-b", "--format", "csv", "--results-dir", results).output))
    assert list(frame["in"]) == ["a", "a", "a", "both"] and "p.gsm8k.flexible" in frame.columns
    assert frame["check.1.outcome"].isna().tolist() == [True, True, True, False]
    terminal = cli("compare", "run-a", "run-b", "--results-dir", results)
    # B (another sim seed) is beyond margins it checks without a test: exit 1, as the matrix would
    assert terminal.exit_code == EXIT_THRESHOLD and "only in A" in terminal.output


def test_collapse_evidence_of_a_real_run_is_folded_per_cell(demo_runs: dict[str, Path]) -> None:
    md = cli("report", "run-a", "--format", "markdown", "--results-dir", str(demo_runs["results"])).output
    summary = read_json(demo_runs["a"] / "summary.json")
    collapsed = {c["id"]: c["metrics"]["repetition.collapsed"] for c in summary["cells"]}
    assert collapsed["dp8-piecewise-fixoff"] >= 1  # the simulated bug, seed 0
    expected = [f"<details><summary>{cell}: {k} of 8 long generations collapsed</summary>"
                for cell, k in collapsed.items() if k]
    assert [line for line in md.splitlines() if "long generations collapsed" in line] == expected
    html = gfm().render(md)
    assert html.count("<details>") == html.count("</details>") and html.count("<pre>") == html.count("</pre>")
