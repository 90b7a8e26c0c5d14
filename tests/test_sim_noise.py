"""The simulator's healthy noise is realistic and never mistaken for the bug, across seeds.

Measured on the model itself (the same code the server answers with), for the 12 cells of the
demo matrix and 20 seeds, with the demo's thresholds and the paired test evalkit uses: no
healthy cell is ever flagged, the buggy one always is, and healthy deltas are a few tenths of
a point both ways.
"""

from __future__ import annotations

import itertools
import statistics

import pytest

from evalkit.sim.config import Behaviour, Cell
from evalkit.sim.gsm8k import TestSet as GSM8KTestSet
from evalkit.sim.model import SimulatedModel
from evalkit.stats.tests import paired_comparison

TESTSET = GSM8KTestSet.load()
SEEDS = range(20)
MODES = {"full": "FULL", "piecewise": "PIECEWISE", "eager": "NONE"}  # eager: --enforce-eager, no graphs


def demo_cells() -> dict[str, Cell]:
    return {f"{par}-{mode}-fix{fix}": Cell(tp=8, dp=1, dp_attention=par == "dp8", expert_parallel=False,
                                           graph_mode=MODES[mode], fix=fix == "on")
            for par, mode, fix in itertools.product(("tp8", "dp8"), MODES, ("on", "off"))}


def answers(seed: int) -> dict[str, list[bool]]:
    behaviour = Behaviour(seed=seed)
    models = {name: SimulatedModel(behaviour, cell, TESTSET) for name, cell in demo_cells().items()}
    return {name: [model.is_correct(p) for p in TESTSET.problems] for name, model in models.items()}


@pytest.fixture(scope="module")
def by_seed() -> dict[int, dict[str, list[bool]]]:
    return {seed: answers(seed) for seed in SEEDS}


def flagged(cell: list[bool], baseline: list[bool], twin: list[bool]) -> bool:
    """configs/demo.yaml's GSM8K thresholds: min 0.90, max drop 2 points vs baseline and vs twin at alpha 0.01."""
    if sum(cell) / len(cell) < 0.90:
        return True
    return any(-p.diff > 0.02 and p.p_value < 0.01 for p in (paired_comparison(cell, baseline),
                                                           paired_comparison(cell, twin)))


def test_no_healthy_cell_is_ever_flagged_and_the_buggy_one_always_is(by_seed: dict[int, dict[str, list[bool]]]) -> None:
    for seed, cells in by_seed.items():
        baseline = cells["tp8-full-fixon"]
        for name, marks in cells.items():
            twin = cells[name.replace("fixoff", "fixon")]
            assert flagged(marks, baseline, twin) == (name == "dp8-piecewise-fixoff"), (seed, name)


def test_healthy_cells_differ_by_a_few_percent_balanced(by_seed: dict[int, dict[str, list[bool]]]) -> None:
    discordant, diffs = [], []
    for cells in by_seed.values():
        baseline = cells["tp8-full-fixon"]
        for name, marks in cells.items():
            if name in ("tp8-full-fixon", "tp8-full-fixoff", "dp8-piecewise-fixoff"):
                continue
            p = paired_comparison(marks, baseline)
            discordant.append((p.a_only + p.b_only) / p.n)
            diffs.append(p.diff)
    assert 0.02 <= statistics.fmean(discordant) <= 0.04
    assert min(discordant) >= 0.015 and max(discordant) <= 0.05
    assert abs(statistics.fmean(diffs)) < 0.001  # balanced: no direction on average
    assert statistics.pstdev(diffs) > 0.002 and max(map(abs, diffs)) < 0.015  # a few tenths, never points
    assert sum(d > 0 for d in diffs) > 0.3 * len(diffs) and sum(d < 0 for d in diffs) > 0.3 * len(diffs)


def test_the_fix_changes_numerics_only_under_piecewise(by_seed: dict[int, dict[str, list[bool]]]) -> None:
    cells = by_seed[0]
    for par, mode in itertools.product(("tp8", "dp8"), ("full", "eager")):
        assert cells[f"{par}-{mode}-fixon"] == cells[f"{par}-{mode}-fixoff"]
    assert cells["tp8-piecewise-fixon"] != cells["tp8-piecewise-fixoff"]


def test_asking_again_flips_a_few_answers_run_to_run() -> None:
    model = SimulatedModel(Behaviour(seed=0), demo_cells()["tp8-full-fixon"], TESTSET)
    first = [model.is_correct(p) for p in TESTSET.problems]
    second = [model.is_correct(p, ask=2) for p in TESTSET.problems]
    third = [model.is_correct(p, ask=3) for p in TESTSET.problems]
    changed = sum(a != b for a, b in zip(first, second)) / len(first)
    assert 0.001 < changed < 0.015 and second != third
    assert [model.is_correct(p) for p in TESTSET.problems] == first  # a restart answers as the first time
