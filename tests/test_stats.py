"""Specifications for evalkit.stats.tests. Every expected number names its source."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from evalkit.stats.tests import (
    FisherResult,
    NoiseFloor,
    Paired,
    fisher_collapse,
    is_regression,
    noise_floor,
    paired_comparison,
    proportion,
    wilson_interval,
)


def table(both: int, a_only: int, b_only: int, neither: int) -> tuple[list[bool], list[bool]]:
    """Per-question marks (a, b) realising a paired 2x2 table."""
    a = [True] * both + [True] * a_only + [False] * b_only + [False] * neither
    b = [True] * both + [False] * a_only + [True] * b_only + [False] * neither
    return a, b


# --- Wilson ------------------------------------------------------------------------

# Newcombe RG (1998), "Two-sided confidence intervals for the single proportion:
# comparison of seven methods", Stat Med 17:857-872, Table I, method 3 (Wilson score,
# no continuity correction). 15/148, 0/20 and 1/29 are also asserted as "Newcombe
# examples" in the ratesci R package tests (petelaud/ratesci tests/testthat/test3.R);
# all four equal statsmodels proportion_confint(method="wilson") to 1e-15.
@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_newcombe_table_i(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert (round(lo, 4), round(hi, 4)) == (low, high)


def test_wilson_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)  # documented: no data, all p plausible
    assert wilson_interval(0, 20)[0] == 0.0 and wilson_interval(20, 20)[1] == 1.0
    lo90, hi90 = wilson_interval(15, 148, 0.90)
    lo95, hi95 = wilson_interval(15, 148)
    assert lo95 < lo90 < hi90 < hi95
    for bad in [(-1, 5), (6, 5)]:
        with pytest.raises(ValueError):
            wilson_interval(*bad)
    with pytest.raises(ValueError):
        wilson_interval(1, 5, confidence=1.0)


# --- Proportion / lm-eval stderr ----------------------------------------------------

def test_stderr_equals_lm_eval():
    metrics = pytest.importorskip("lm_eval.api.metrics")
    rng = np.random.default_rng(20240607)
    for n in [2, 3, 10, 250, 1319]:
        for p_true in [0.0, 0.05, 0.5, 0.93, 1.0]:
            marks = (rng.random(n) < p_true).astype(int).tolist()
            got = proportion(sum(marks), n)
            # lm-eval: mean_stderr = sample_stddev(arr) / sqrt(len(arr)), ddof = 1.
            assert got.stderr == pytest.approx(metrics.mean_stderr(marks), rel=1e-12, abs=1e-15)
            by_hand = metrics.sample_stddev(marks) / math.sqrt(n)
            assert got.stderr == pytest.approx(by_hand, rel=1e-12, abs=1e-15)
            assert got.p == pytest.approx(metrics.mean(marks), rel=1e-15)


def test_proportion_fields_and_edges():
    pr = proportion(15, 148)
    assert (pr.k, pr.n) == (15, 148) and pr.p == 15 / 148
    assert (pr.low, pr.high) == wilson_interval(15, 148)
    assert pr.stderr == pytest.approx(math.sqrt(pr.p * (1 - pr.p) / 147))  # ddof=1 closed form
    empty = proportion(0, 0)
    assert math.isnan(empty.p) and math.isnan(empty.stderr) and (empty.low, empty.high) == (0.0, 1.0)
    assert math.isnan(proportion(1, 1).stderr)  # lm-eval would divide by zero at n = 1
    assert proportion(7, 7).stderr == 0.0
    json.dumps(empty.to_dict(), allow_nan=False)  # nan -> None


# --- McNemar exact --------------------------------------------------------------------

def test_mcnemar_exact_by_binomial_formula():
    # Bentur et al. (2009) data as used by Fagerland, Lydersen & Laake (2014),
    # "Recommended tests and confidence intervals for paired binomial proportions",
    # Stat Med 33:2850-2875: n11=1, n12=1, n21=7, n22=12; exact conditional McNemar
    # p = 0.070. By hand: 2 * (C(8,0) + C(8,1)) / 2**8 = 18/256.
    a, b = table(1, 1, 7, 12)
    r = paired_comparison(a, b)
    assert (r.a_only, r.b_only, r.both, r.neither) == (1, 7, 1, 12)
    assert r.p_value == pytest.approx(18 / 256, rel=1e-12)
    # Newcombe's (1998) paired example (below): 12 vs 2 discordant.
    # By hand: 2 * (C(14,0) + C(14,1) + C(14,2)) / 2**14 = 212/16384.
    assert paired_comparison(*table(20, 12, 2, 16)).p_value == pytest.approx(212 / 16384, rel=1e-12)


def test_mcnemar_agresti_presidential_approval():
    # Agresti, Categorical Data Analysis (2nd ed., sec. 10.1.1), 1600 people rating the
    # President twice: 794 / 150 / 86 / 570. Published asymptotic McNemar z = 4.17
    # (z^2 = 17.36), P < 0.0001. The exact two-sided p is checked against the binomial
    # sum in exact integer arithmetic: 2 * sum_{i<=86} C(236, i) / 2**236.
    r = paired_comparison(*table(794, 150, 86, 570))
    assert round((r.a_only - r.b_only) / math.sqrt(r.a_only + r.b_only), 2) == 4.17
    exact = 2 * sum(math.comb(236, i) for i in range(87)) / 2**236
    assert r.p_value == pytest.approx(exact, rel=1e-9)
    assert r.p_value < 1e-4
    assert r.diff == pytest.approx((944 - 880) / 1600)  # Agresti: 0.59 vs 0.55 approval


def test_mcnemar_no_discordant_pairs_and_all_same():
    r = paired_comparison(*table(30, 0, 0, 10))
    assert r.p_value == 1.0 and r.diff == 0.0
    assert r.low < 0.0 < r.high
    assert paired_comparison([True] * 5, [True] * 5).p_value == 1.0
    assert paired_comparison(*table(3, 4, 4, 3)).p_value == 1.0  # balanced discordance


# --- Newcombe paired interval -----------------------------------------------------------

# Newcombe RG (1998), "Improved confidence intervals for the difference between binomial
# proportions based on paired data", Stat Med 17(22):2635-2650, method 10. Published
# limits as reproduced by the ratesci R package tests (petelaud/ratesci
# tests/testthat/test3.R, method_RD="MOVER_newc", moverbase="wilson"):
#   Newcombe's example 20/12/2/16 (n=50):      0.0562, 0.3292 (method 8 gives 0.0618, 0.3242)
#   Fagerland et al. 2014, Bentur 1/1/7/12:   -0.507, -0.026
#   Tang, Li & Tang 2010 (SMMR), 8/3/1/2:     -0.1574, 0.4136
#   Chang et al. 2024 (J Appl Stat), 7/25/2/68: 0.133, 0.318
@pytest.mark.parametrize(
    ("cells", "digits", "low", "high"),
    [
        ((20, 12, 2, 16), 4, 0.0562, 0.3292),
        ((1, 1, 7, 12), 3, -0.507, -0.026),
        ((8, 3, 1, 2), 4, -0.1574, 0.4136),
        ((7, 25, 2, 68), 3, 0.133, 0.318),
    ],
)
def test_newcombe_method_10_published(cells, digits, low, high):
    r = paired_comparison(*table(*cells))
    assert (round(r.low, digits), round(r.high, digits)) == (low, high)
    assert r.low <= r.diff <= r.high
    assert r.diff == pytest.approx((cells[1] - cells[2]) / sum(cells))


def test_paired_orientation_ids_and_errors():
    a = [True, True, False, False, True]
    b = [True, False, True, False, False]
    r = paired_comparison(a, b, ids=["q0", "q1", "q2", "q3", "q4"])
    assert (r.n, r.acc_a, r.acc_b) == (5, 0.6, 0.4) and r.diff == pytest.approx(0.2)
    assert r.a_only_ids == ("q1", "q4") and r.b_only_ids == ("q2",)
    assert paired_comparison(a, b).a_only_ids == ()
    with pytest.raises(ValueError):
        paired_comparison(a, b[:-1])
    with pytest.raises(ValueError):
        paired_comparison(a, b, ids=["q0"])
    empty = paired_comparison([], [])
    assert empty.n == 0 and empty.p_value == 1.0 and (empty.low, empty.high) == (-1.0, 1.0)
    assert json.loads(json.dumps(r.to_dict(), allow_nan=False))["a_only_ids"] == ["q1", "q4"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.diff = 0.0  # type: ignore[misc]


# --- Fisher ---------------------------------------------------------------------------

def test_fisher_lady_tasting_tea():
    # Fisher (1935), The Design of Experiments; Agresti CDA sec. 3.5.1: table [[3,1],[1,3]],
    # one-sided P = 0.243 (= (16 + 1)/70 by the hypergeometric), two-sided 0.486 (= 34/70).
    r = fisher_collapse(3, 4, 1, 4)
    assert isinstance(r, FisherResult)
    assert r.p_greater == pytest.approx(17 / 70) and round(r.p_greater, 4) == 0.2429
    assert r.p_two_sided == pytest.approx(34 / 70) and round(r.p_two_sided, 4) == 0.4857
    assert (r.rate1, r.rate2, r.diff, r.odds_ratio) == (0.75, 0.25, 0.5, 9.0)
    # direction: the baseline collapsing more is not evidence that the cell does
    assert fisher_collapse(1, 4, 3, 4).p_greater == pytest.approx(69 / 70)


def test_fisher_zero_collapses_is_json_safe():
    r = fisher_collapse(0, 50, 0, 50)
    assert r.p_two_sided == 1.0 and r.p_greater == 1.0
    json.dumps(r.to_dict(), allow_nan=False)
    with pytest.raises(ValueError):
        fisher_collapse(5, 4, 0, 4)


# --- Noise floor and the regression rule ------------------------------------------------

def test_noise_floor_constructed():
    # Hand-built: question 1 flips (T,F,T), question 3 flips (F,F,T); accuracies .6 .4 .8.
    reps = [
        [True, True, False, False, True],
        [True, False, False, False, True],
        [True, True, False, True, True],
    ]
    f = noise_floor(reps)
    assert isinstance(f, NoiseFloor)
    assert (f.n_questions, f.n_repeats, f.n_flipping, f.flipping) == (5, 3, 2, (1, 3))
    assert f.flip_rate == pytest.approx(0.4)
    assert f.max_pairwise_diff == pytest.approx(0.4)  # repeat 2 vs repeat 3
    assert noise_floor(reps, ids=list("abcde")).flipping == ("b", "d")


def test_noise_floor_stable_and_errors():
    f = noise_floor([[True, False]] * 4)
    assert (f.n_flipping, f.flip_rate, f.max_pairwise_diff) == (0, 0.0, 0.0)
    with pytest.raises(ValueError):
        noise_floor([[True, False]])  # one repeat measures no noise
    with pytest.raises(ValueError):
        noise_floor([[True, False], [True]])


def test_is_regression_needs_significance_and_magnitude():
    n = 1319
    worse: Paired = paired_comparison(*table(1000, 5, 30, n - 1035))  # diff = -25/1319
    assert worse.p_value < 0.001
    quiet = NoiseFloor(n, 3, 10, tuple(range(10)), 10 / n, 0.01)
    noisy = NoiseFloor(n, 3, 60, tuple(range(60)), 60 / n, 0.03)
    assert is_regression(worse, quiet)
    assert not is_regression(worse, noisy)  # inside run-to-run swing
    assert not is_regression(paired_comparison(*table(1000, 30, 5, n - 1035)), quiet)  # improvement
    assert not is_regression(paired_comparison(*table(1000, 3, 6, n - 1009)))  # not significant


def test_newcombe_unpaired_reproduces_the_papers_example() -> None:
    """Newcombe (1998), Stat. Med. 17:873, table II, example (a): 56/70 - 48/80, method 10."""
    from evalkit.stats.tests import newcombe_unpaired

    low, high = newcombe_unpaired(56, 70, 48, 80)
    assert (round(low, 4), round(high, 4)) == (0.0524, 0.3339)
    assert newcombe_unpaired(0, 0, 3, 10) == (-1.0, 1.0)
