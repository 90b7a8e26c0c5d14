"""Divergence `generations`: a cell's long generations scored under the baseline's model, against the
baseline's own (issue 30: the evidence for token soup written in one script, which the collapse
detector's text rules see only by its syntax). Through `evalkit matrix` on the simulated engine, whose buggy cell
writes Latin-only soup that a healthy model finds far less likely."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.evals.divergence_generations import FILE
from evalkit.store import read_json
from evalkit.store.files import read_jsonl

CONFIG = """\
model: sim/m
engine:
  profile: sim
  args: ["--sim-collapse-rate", "1.0", "--sim-collapse-kind", "latin-soup"]
axes:
  cell:
    base: {settings: {tensor_parallel: 8, graph_mode: FULL}, args: ["--sim-fix", "on"]}
    healthy: {settings: {tensor_parallel: 8, dp_attention: true, graph_mode: FULL}, args: ["--sim-fix", "off"]}
    buggy: {settings: {tensor_parallel: 8, dp_attention: true, graph_mode: PIECEWISE}, args: ["--sim-fix", "off"]}
baseline: {cell: base}
evals:
  gsm8k: {enabled: false}
  repetition: {count: 8, max_tokens: 1024}
  divergence: {count: 2, max_tokens: 1024, generations: 4}
thresholds:
  - {metric: divergence.generation_nll_rise, max_rise_vs_baseline: 2.0}
timeouts: {startup: 60, stop_grace: 5}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One three-cell matrix on the simulator (3 engine starts, long generations). The tests that read
    it are about that real run, so each asks for `engine_processes`: e2e."""
    tmp = tmp_path_factory.mktemp("gen")
    config = tmp / "gen.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    result = CliRunner().invoke(main, ["matrix", "--config", str(config), "--run-id", "gen", "--results-dir",
                                       str(tmp / "results"), "--lock-file", str(tmp / "lock"), "--no-history", "--quiet"])
    return tmp / "results" / "gen", result


def test_the_baseline_runs_last_and_scores_every_cell_s_generations(run: tuple[Path, Any], engine_processes: None) -> None:
    path, result = run
    rows = list(read_jsonl(path / "base" / FILE))
    assert {row["cell"] for row in rows} == {"base", "healthy", "buggy"}, result.output
    # the buggy cell's collapsed generations are scored first; the baseline's own for the same prompts
    buggy = [row for row in rows if row["cell"] == "buggy"]
    assert len(buggy) == 4 and {row["id"] for row in rows if row["cell"] == "base"} >= {row["id"] for row in buggy}
    # the cells that ran before the baseline could score nothing of it: their comparisons say so
    assert [row["cell"] for row in read_jsonl(path / "healthy" / FILE)] == []


def test_single_script_soup_is_far_less_likely_under_the_baseline_and_fails_the_threshold(
        run: tuple[Path, Any], engine_processes: None) -> None:
    path, result = run
    cells = {c["id"]: c for c in read_json(path / "summary.json")["cells"]}
    repetition = read_json(path / "buggy" / "cell.json")["metrics"]["repetition"]
    # Latin-only soup: no alphabet changes and nothing repeats; since issue 36 the detector flags
    # this one by its syntax (1,024 tokens of bare words, no punctuation: unpunctuated_words), but
    # the same soup with punctuation would read as rare words: the divergence is the evidence
    assert repetition["collapsed"] == 8
    buggy = cells["buggy"]["vs_baseline"]["divergence.generation_nll_rise"]
    healthy = cells["healthy"]["vs_baseline"]["divergence.generation_nll_rise"]
    assert buggy["value"] > 3.0 and buggy["mean_logprob"] < buggy["ref_mean_logprob"] - 3.0, buggy
    assert abs(healthy["value"]) < 0.2 and healthy["texts"] == 4, healthy
    assert [f["metric"] for f in cells["buggy"]["flags"]] == ["divergence.generation_nll_rise"]
    assert cells["healthy"]["flags"] == [] and result.exit_code == 1


def test_a_reference_that_ran_first_says_not_checked(tmp_path: Path, run: tuple[Path, Any], engine_processes: None) -> None:
    from evalkit.evals.divergence_generations import rise

    path, _ = run
    refused = rise(path / "base", path / "healthy")
    assert refused["diff"] is None and refused["refused"] == (
        "not checked: healthy ran before base's generations existed, so its model never scored them")
    assert rise(path / "base", tmp_path)["refused"].startswith("not checked: ")  # no logprobs served there
