"""The statistics behind PASS / FAIL / INCONCLUSIVE, each checked against a seeded simulation or a
published figure: MDEs (stats/power.py), the family adjustment (stats/multiplicity.py), equivalence (TOST)."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
from scipy.stats import binom, false_discovery_control, fisher_exact, hypergeom

from evalkit.stats import power as power_module
from evalkit.stats.multiplicity import adjust, benjamini_hochberg, holm
from evalkit.stats.power import (
    equivalence_margin,
    equivalence_n,
    fisher_mde,
    fisher_n,
    fisher_power,
    gate_mde,
    gate_room,
    mcnemar_mde,
    mcnemar_n,
)
from evalkit.stats.tests import paired_comparison, paired_equivalence
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import verdict_power


def test_tensorrt_llm_gate_figures_for_gsm8k() -> None:
    # TensorRT-LLM's published figures at n 1319, alpha 0.05, beta 0.2, sigma 50 points
    assert gate_mde(1319) == pytest.approx(0.0484, abs=5e-5)
    assert gate_room(1319) == pytest.approx(0.0320, abs=5e-5)


def test_holm_adjusted_p_values_match_the_textbook_example() -> None:
    # sorted 0.01, 0.02, 0.03, 0.04 of m = 4: 0.04, 0.06, 0.06 (monotone), 0.06
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.9]) == [1.0, 1.0]


def test_benjamini_hochberg_equals_scipy() -> None:
    ps = np.random.default_rng(1).uniform(0, 0.2, 30).tolist()
    assert benjamini_hochberg(ps) == pytest.approx(false_discovery_control(ps).tolist())
    assert adjust(ps, "none") == ps


def test_the_mcnemar_mde_is_detected_with_the_stated_power_by_simulation() -> None:
    rng = np.random.default_rng(7)
    n, flips, alpha = 400, 0.04, 0.05
    mde = mcnemar_mde(n, flips, alpha)
    assert mde is not None

    def detected(drop: float, trials: int = 1500) -> float:
        hits = 0
        for _ in range(trials):
            u = rng.random(n)  # [0, f/2): right only in b; [f/2, f): right only in a; [f, f + drop): lost in a
            a = ((u >= flips / 2) & (u < flips)) | (u >= flips + drop)
            b = (u < flips / 2) | (u >= flips)
            hits += paired_comparison(a.tolist(), b.tolist()).p_value < alpha
        return hits / trials

    assert detected(mde) >= 0.8 - 0.035  # 3 standard errors of 1500 trials
    assert detected(max(0.0, mde - 0.02)) < 0.8


def test_the_fisher_power_is_the_simulated_rejection_rate() -> None:
    rng = np.random.default_rng(3)
    n, base, rise, alpha, trials = 64, 0.02, 0.12, 0.01, 1500
    hits = sum(fisher_exact([[k, n - k], [r, n - r]], alternative="greater")[1] < alpha
               for k, r in zip(rng.binomial(n, base + rise, trials), rng.binomial(n, base, trials)))
    assert hits / trials == pytest.approx(fisher_power(n, n, base, rise, alpha), abs=0.04)


def _fisher_power_as_scipy_sums_it(n: int, n_ref: int, base_rate: float, rise: float, alpha: float) -> float:
    """stats/power.py's fisher_power before issue 38: scipy's `hypergeom.sf` per table (the reference)."""
    rate = min(1.0, base_rate + rise)
    k = power_module._likely(n, rate)[:, None]
    k_ref = power_module._likely(n_ref, base_rate)[None, :]
    p = hypergeom.sf(k - 1, n + n_ref, k + k_ref, n)
    weight = binom.pmf(k, n, rate) * binom.pmf(k_ref, n_ref, base_rate)
    return float(np.sum(weight * (p < alpha)))


@pytest.mark.parametrize("n, n_ref", [(8, 16), (64, 64), (180, 64), (256, 32)])
def test_the_fast_fisher_power_equals_scipys_table_by_table_sum(n: int, n_ref: int) -> None:
    for base, rise, alpha in itertools.product([0.0, 1 / 64, 0.1, 0.5], [0.01, 0.05, 0.2], [0.01, 0.05]):
        assert fisher_power(n, n_ref, base, rise, alpha) == _fisher_power_as_scipy_sums_it(n, n_ref, base, rise, alpha)


def test_the_demo_collapse_figures_are_those_of_the_table_by_table_sum() -> None:
    # computed with the reference above before the fast sum: 64 generations see 13.9 points,
    # a 5-point rise needs 180 per cell (327 at a 1-in-64 base rate)
    assert fisher_mde(64, 64, 0.0, 0.01) == 0.1385
    assert fisher_n(0.05, 0.0, 0.01) == 180
    assert fisher_n(0.05, 1 / 64, 0.01) == 327
    assert _fisher_power_as_scipy_sums_it(180, 180, 0.0, 0.05, 0.01) >= 0.8 > _fisher_power_as_scipy_sums_it(
        179, 179, 0.0, 0.05, 0.01)


def test_more_samples_make_smaller_mdes_and_the_n_needed_reaches_the_margin() -> None:
    assert mcnemar_mde(1319, 0.03, 0.01) < mcnemar_mde(200, 0.03, 0.01)  # type: ignore[operator]
    assert fisher_mde(256, 256, 0.0, 0.01) < fisher_mde(64, 64, 0.0, 0.01)  # type: ignore[operator]
    n = mcnemar_n(0.02, 0.03, 0.01)
    assert n is not None and mcnemar_mde(n, 0.03, 0.01) <= 0.0205  # type: ignore[operator]
    k = fisher_n(0.05, 0.0, 0.01)
    assert k is not None and fisher_mde(k, k, 0.0, 0.01) <= 0.0505  # type: ignore[operator]
    assert mcnemar_mde(20, 0.5, 1e-6) is None


def test_tost_keeps_its_false_equivalence_rate_at_alpha_on_the_margin() -> None:
    # true difference exactly -margin: equivalence must be claimed at most alpha of the time
    rng = np.random.default_rng(11)
    n, margin, alpha, trials, flips = 800, 0.03, 0.05, 500, 0.06
    claimed = 0
    for _ in range(trials):
        u = rng.random(n)  # a_only share flips/2 - margin/2, b_only flips/2 + margin/2: diff = -margin
        f = int(np.sum(u < flips / 2 - margin / 2))
        g = int(np.sum((u >= flips / 2 - margin / 2) & (u < flips)))
        both = int(np.sum(u >= flips)) - 40
        claimed += paired_equivalence(both, f, g, n - both - f - g, margin, alpha).p_equivalent < alpha
    assert claimed / trials <= alpha + 3 * (alpha * (1 - alpha) / trials) ** 0.5


def test_tost_shows_equivalence_at_the_n_it_says_it_needs() -> None:
    rng = np.random.default_rng(5)
    margin, flips, alpha = 0.02, 0.04, 0.05
    n = equivalence_n(margin, flips, alpha)
    assert n is not None and equivalence_margin(n, flips, alpha) == pytest.approx(margin, rel=0.01)
    shown = 0
    for _ in range(600):
        f, g = rng.multinomial(n, [flips / 2, flips / 2, 1 - flips])[:2]
        shown += paired_equivalence(n - f - g - 30, int(f), int(g), 30, margin, alpha).p_equivalent < alpha
    assert shown / 600 >= 0.8 - 0.05


def test_holm_holds_false_alarms_of_a_healthy_matrix_at_alpha_and_no_correction_does_not() -> None:
    fig = verdict_power.simulate(trials=300, n=400, alpha=0.05, seed=2, drops=())
    se = 3 * (0.05 * 0.95 / 300) ** 0.5
    for family in ("gsm8k vs_baseline", "gsm8k ab", "collapse vs_baseline"):
        assert fig.false_alarms[(family, "no margin", "holm")] <= 0.05 + se
    # uncorrected, one matrix in six has a false alarm somewhere (a test at alpha per cell and threshold)
    assert fig.false_alarms[("whole matrix", "no margin", "none")] > 0.05 + se
