"""Divergence `generations` in this process: a cell's long generations scored under the baseline's
model against the baseline's own (evals/divergence_generations.py), the cells evaluated on
simulators a thread of this process serves (tests/helpers/served.py), no engine started.

The buggy cell writes Latin-only token soup (`--sim-collapse-kind latin-soup`), which the collapse
detector's text rules see only by its syntax and a healthy model finds far less likely than its own
output. tests/test_divergence_generations.py runs the same through `evalkit matrix` on engine
processes (the plan's order, the report), in `e2e`.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalkit.config import MatrixConfig, load_config
from evalkit.config.cells import expand
from evalkit.evals import evalset
from evalkit.evals.cancel import Stop
from evalkit.evals.divergence import EVAL as DIVERGENCE
from evalkit.evals.divergence import GENERATIONS_SPEC
from evalkit.evals.divergence_generations import FILE, rise
from evalkit.run.cell import CellControl, CellJob, run_cell
from evalkit.run.options import Silent
from evalkit.store import RunStore, read_jsonl
from tests.helpers.served import served_sim

pytestmark = pytest.mark.xdist_group("generations-inprocess")  # the module's run is made once, on one worker

GENERATIONS = 4
CONFIG = f"""\
model: sim/m
served_name: sim-model
engine: {{profile: sim}}
axes:
  cell:
    buggy: {{settings: {{tensor_parallel: 8, dp_attention: true, graph_mode: PIECEWISE}}, args: ["--sim-fix", "off"]}}
    base: {{settings: {{tensor_parallel: 8, graph_mode: FULL}}, args: ["--sim-fix", "on"]}}
baseline: {{cell: base}}
evals:
  gsm8k: {{enabled: false}}
  repetition: {{count: 8, max_tokens: 1024}}
  divergence: {{count: 2, max_tokens: 1024, generations: {GENERATIONS}}}
"""
SOUP = ("--sim-collapse-rate", "1.0", "--sim-collapse-kind", "latin-soup", "--sim-seed", "0")


@dataclasses.dataclass
class Run:
    config: MatrixConfig
    store: RunStore

    def cell_dir(self, name: str) -> Path:
        return self.store.cell_dir(name)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The buggy cell first, then the baseline (the plan's order with `generations` on), each
    evaluated on its own served simulator with the flags its axis value gives the engine."""
    root = tmp_path_factory.mktemp("gen-inprocess")
    (root / "gen.yaml").write_text(CONFIG, encoding="utf-8")
    config = load_config(root / "gen.yaml")
    store = RunStore(root / "results", "gen")
    store.create()
    evalset.prepare(config.evals.enabled(), store.path)
    cells = {cell.id: cell for cell in expand(config)}
    buggy = served_sim("-tp", "8", "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off", *SOUP)
    base = served_sim("-tp", "8", "--cudagraph-mode", "FULL", "--sim-fix", "on", *SOUP)
    with buggy as buggy_url, base as base_url:
        for name, url in (("buggy", buggy_url), ("base", base_url)):
            job = CellJob(config, cells[name], store, Silent(), base_url=url)
            assert run_cell(job, CellControl(Stop())).status == "ok"
    yield Run(config, store)


def test_the_cell_that_runs_last_scores_the_earlier_cell_s_generations_and_its_own(run: Run) -> None:
    """Up to `generations` of every earlier cell, the collapsed first, and the baseline's own text
    for each of those prompts; the earlier cell found no one else's to score."""
    rows = list(read_jsonl(run.cell_dir("base") / FILE))
    theirs = [row for row in rows if row["cell"] == "buggy"]
    own = [row for row in rows if row["cell"] == "base"]
    assert len(theirs) == GENERATIONS and all(row["collapsed"] for row in theirs)
    assert sorted(row["id"] for row in own) == sorted(row["id"] for row in theirs)
    assert all(row["n_tokens"] > 0 and row["mean_logprob"] < 0 for row in rows)
    assert list(read_jsonl(run.cell_dir("buggy") / FILE)) == []


def test_single_script_soup_is_far_less_likely_under_the_baseline_than_its_own_text(run: Run) -> None:
    found = rise(run.cell_dir("buggy"), run.cell_dir("base"))
    assert found["texts"] == found["collapsed_texts"] == GENERATIONS
    assert found["diff"] == found["value"] > 2.0  # nats per token
    assert found["ref_mean_logprob"] - found["mean_logprob"] == pytest.approx(found["diff"])
    assert DIVERGENCE.pairwise(GENERATIONS_SPEC, run.cell_dir("buggy"), run.cell_dir("base")) == found


def test_a_reference_that_ran_first_or_scored_nothing_is_not_checked(run: Run, tmp_path: Path) -> None:
    """Never passed: the buggy cell ran before the baseline's generations existed, and a folder
    without the file scored none (an engine that serves no logprobs)."""
    earlier = rise(run.cell_dir("base"), run.cell_dir("buggy"))
    assert earlier["diff"] is None and earlier["refused"] == (
        "not checked: buggy ran before base's generations existed, so its model never scored them")
    (tmp_path / "atom").mkdir()
    silent = rise(run.cell_dir("buggy"), tmp_path / "atom")
    assert silent["diff"] is None and silent["refused"].startswith("not checked: atom scored no generations")


def test_the_baseline_names_each_soup_text_its_model_finds_improbable(run: Run) -> None:
    """Per text, the model signal's statistic under the baseline's model (the worst 64-token
    window's NLL): every buggy text is past the baseline's own median by the signal's margin."""
    rows = list(read_jsonl(run.cell_dir("base") / FILE))
    assert all(row["worst_nll"] > 0 for row in rows)
    found = rise(run.cell_dir("buggy"), run.cell_dir("base"))
    buggy, base = run.cell_dir("buggy").name, run.cell_dir("base").name
    assert sorted(found["improbable"]) == sorted(row["id"] for row in rows if row["cell"] == buggy)
    own = statistics.median(row["worst_nll"] for row in rows if row["cell"] == base)
    assert found["improbable_line"] == pytest.approx(own + 5.5) and own < 4.0  # nats per token
