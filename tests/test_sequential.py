"""The bisect step's sequential test (evalkit/stats/sequential.py), as a specification.

The demo bug (configs/demo.yaml on the simulator): the bad end loses 100 and gains 6 of the
1319 GSM8K questions vs the good end and collapses 21 of 64 long generations (good end 0/64).
At alpha = beta = 0.01 and `batch_schedule(1319, 64)` (batches of 32 questions / 8 generations
growing x1.5: looks at 32, 80, 152, 260, ... questions), 10,000 simulated steps each
(`simulate`, seed 0) measured:

    step like the bad end:            bad 100%, 100 questions (7.6% of 1319), 25 generations
    step like the good end, no flips: good 100%, 80 questions (6.1%), 20 generations
    good end, 2% flips each way, 3% collapses: good 99.93%, 368 questions, 57 generations

(on the simulator a healthy commit answers exactly like the good end: the "no flips" row).
False alarms stay far below alpha because Ville's inequality is conservative at batch looks.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import binom

from evalkit.stats.sequential import Count, PairedCounts, StepTest, batch_schedule, simulate

ALPHA = 0.01
DEMO_BAD = PairedCounts(n=1319, lost=100, gained=6)
DEMO_GOOD_COLLAPSES, DEMO_BAD_COLLAPSES = Count(0, 64), Count(21, 64)
LOOKS = batch_schedule(1319, 64)
TRIALS = 10_000


def demo_test(alpha: float = ALPHA, good_collapses: Count = DEMO_GOOD_COLLAPSES) -> StepTest:
    return StepTest.from_ends(paired_bad=DEMO_BAD, collapses_good=good_collapses,
                              collapses_bad=DEMO_BAD_COLLAPSES, alpha=alpha)


def null_false_alarms(alpha: float, flip: float, collapse: float, looks=LOOKS, seed: int = 0) -> float:
    """Share of 10,000 null steps called bad. The good end itself is drawn too (its collapse
    count ~ Bin(64, collapse)), so the test's conservative null rate (an upper bound from that
    count) is exercised, not assumed: steps are grouped by the good end's count."""
    rng = np.random.default_rng(seed)
    counts = rng.binomial(64, collapse, size=TRIALS)
    false_alarms = 0.0
    for k0, trials in zip(*np.unique(counts, return_counts=True)):
        test = demo_test(alpha, Count(int(k0), 64))
        sim = simulate(test, lost=flip, gained=flip, collapse=collapse, looks=looks,
                       trials=int(trials), seed=seed + int(k0))
        false_alarms += sim.bad * trials
    return false_alarms / TRIALS


@pytest.mark.parametrize("alpha", [0.01, 0.05])
@pytest.mark.parametrize("flip,collapse", [(0.0, 0.0), (0.02, 0.0), (0.05, 0.02), (0.02, 0.05), (0.05, 0.10)])
def test_a_step_like_the_good_end_is_called_bad_at_most_alpha_of_the_time(alpha, flip, collapse):
    """Whatever the (unknown) flip rate between two healthy runs and the good end's collapse
    rate, over all looks including the exhausted fallback."""
    assert null_false_alarms(alpha, flip, collapse) <= alpha


@pytest.mark.parametrize("looks", [
    batch_schedule(1319, 64, first_questions=32, first_generations=8, growth=1.0),  # 42 looks
    batch_schedule(1319, 64, first_questions=32, first_generations=8, growth=2.0),  # 6 looks
])
def test_the_false_alarm_bound_holds_at_any_batch_schedule(looks):
    assert null_false_alarms(0.05, 0.03, 0.02, looks=looks) <= 0.05


def test_repeating_a_fixed_sample_mcnemar_after_every_batch_would_not_keep_alpha():
    """Why a sequential test: a one-sided McNemar p < alpha checked after each of 42 batches
    of 32 questions raises far more false alarms than alpha (and this harness sees it)."""
    rng = np.random.default_rng(0)
    alpha, flip, looks = 0.05, 0.03, np.arange(32, 1319, 32)
    draws = rng.multinomial(32, [flip, flip, 1 - 2 * flip], size=(TRIALS, len(looks)))
    lost, gained = draws[..., 0].cumsum(axis=1), draws[..., 1].cumsum(axis=1)
    p = binom.sf(lost - 1, lost + gained, 0.5)  # P(at least `lost` of the discordant pairs)
    assert np.mean((p < alpha).any(axis=1)) > 2 * alpha


def test_a_step_like_the_bad_end_is_called_good_at_most_beta_of_the_time_and_early():
    sim = simulate(demo_test(), lost=100 / 1319, gained=6 / 1319, collapse=21 / 64, looks=LOOKS,
                   trials=TRIALS)
    assert sim.good <= ALPHA  # beta defaults to alpha
    assert sim.bad + sim.good == 1.0
    assert sim.mean_questions < 0.1 * 1319


def test_the_miss_bound_covers_a_step_with_a_smaller_effect_than_the_bad_end_showed():
    """H1 is the bad end's effect shrunk to its one-sided 90% lower bounds (loss rate, collapse
    rate), so a commit whose bug shows a little less than at the bad end is still caught."""
    test = demo_test()
    assert test.paired is not None and test.collapses is not None
    sim = simulate(test, lost=test.paired.lambda1, gained=6 / 1319, collapse=test.collapses.v,
                   looks=LOOKS, trials=TRIALS)
    assert sim.good <= test.beta


def test_a_good_step_on_a_deterministic_engine_is_called_good_without_any_discordant_question():
    """The simulator (and a batch-invariant engine) answers a healthy commit exactly like the
    good end: no discordant pairs, no collapses; the loss-rate side must still decide."""
    sim = simulate(demo_test(), lost=0.0, gained=0.0, collapse=0.0, looks=LOOKS, trials=TRIALS)
    assert sim.good == 1.0 and sim.exhausted == 0.0
    assert sim.mean_questions < 0.1 * 1319


def test_a_single_collapse_after_a_good_end_with_none_multiplies_the_evidence_by_v_over_u():
    """How strong one collapse is when the good end had 0/64: the collapse ratio grows by v/u
    = 2.8, v = 0.25 the bad end's 21/64 at its 90% lower bound, u = 0.089 the good end's 0/64
    at its (1 - alpha/4) upper bound (0/64 cannot exclude a healthy loop rate of a few
    percent). With GSM8K showing nothing either way, the collapses decide bad at 6 of the first
    8 generations or 8 of 20."""
    test = demo_test()
    one = test.judge(None, Count(1, 1), exhausted=False).statistics["collapses"]
    assert math.exp(one["log_lr_bad"]) == pytest.approx(2.8, abs=0.05)
    clean = PairedCounts(80, 0, 0)
    assert [test.judge(clean, Count(k, 8), exhausted=False).verdict for k in (5, 6)] == ["undecided", "bad"]
    assert [test.judge(clean, Count(k, 20), exhausted=False).verdict for k in (7, 8)] == ["undecided", "bad"]


def test_either_eval_alone_can_call_a_step_bad_but_good_needs_both():
    test = demo_test()
    gsm8k_bad = test.judge(PairedCounts(152, 14, 0), Count(0, 38), exhausted=False)
    assert gsm8k_bad.verdict == "bad" and gsm8k_bad.statistics["gsm8k"]["p_bound"] < ALPHA / 2
    assert test.judge(PairedCounts(152, 0, 0), Count(12, 38), exhausted=False).verdict == "bad"
    assert test.judge(PairedCounts(152, 0, 0), Count(0, 8), exhausted=False).verdict == "undecided"
    assert test.judge(PairedCounts(152, 0, 0), None, exhausted=False).verdict == "undecided"
    assert test.judge(PairedCounts(152, 0, 0), Count(0, 38), exhausted=False).verdict == "good"


def test_weak_evidence_in_both_evals_adds_up_to_bad():
    test = demo_test()
    judgement = test.judge(PairedCounts(80, 6, 0), Count(7, 20), exhausted=False)
    stats = judgement.statistics
    assert stats["gsm8k"]["log_lr_bad"] < stats["gsm8k"]["bad_at"]
    assert stats["collapses"]["log_lr_bad"] < stats["collapses"]["bad_at"]
    assert judgement.verdict == "bad" and stats["joint"]["log_lr_bad"] >= stats["joint"]["bad_at"]


def test_exhausted_always_decides_and_says_it_was_not_at_alpha():
    test = demo_test()
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, m = int(rng.integers(1, 200)), int(rng.integers(0, 64))
        lost = int(rng.integers(0, n + 1))
        gained = int(rng.integers(0, n - lost + 1))
        judgement = test.judge(PairedCounts(n, lost, gained), Count(int(rng.integers(0, m + 1)), m),
                               exhausted=True)
        assert judgement.verdict in ("good", "bad")
        json.dumps(judgement.statistics, allow_nan=False)
    numpy_counts = test.judge(PairedCounts(*np.array([64, 3, 0])), Count(*np.array([2, 16])), exhausted=True)
    json.dumps(numpy_counts.statistics, allow_nan=False)
    fallback = test.judge(PairedCounts(64, 3, 0), Count(2, 16), exhausted=True)
    assert fallback.verdict == "bad" and fallback.statistics["decided_by"] == "exhausted"
    assert "not at alpha" in fallback.reason
    with pytest.raises(ValueError, match="judge: exhausted before any"):
        test.judge(None, Count(0, 0), exhausted=True)


def test_small_ends_as_in_a_limited_run_still_tell_the_replayed_ends_apart():
    """--limit 64 questions and 16 generations: the bad end lost 5 of 64, the 16 generations
    do not separate the ends (0/16 vs 5/16 is not beyond the good end's upper bound), so GSM8K
    alone decides; a step replaying either end is judged as that end when exhausted."""
    test = StepTest.from_ends(paired_bad=PairedCounts(64, 5, 0), collapses_good=Count(0, 16),
                              collapses_bad=Count(5, 16), alpha=ALPHA)
    assert test.collapses is None and test.paired is not None and test.paired.alpha == ALPHA
    assert test.judge(PairedCounts(64, 5, 0), Count(5, 16), exhausted=True).verdict == "bad"
    assert test.judge(PairedCounts(64, 0, 0), Count(0, 16), exhausted=True).verdict == "good"


def test_an_eval_that_does_not_separate_the_ends_is_left_out_and_the_other_gets_all_of_alpha():
    collapses_only = StepTest.from_ends(paired_bad=PairedCounts(1319, 6, 7), collapses_good=Count(0, 64),
                                        collapses_bad=Count(21, 64), alpha=ALPHA)
    assert collapses_only.paired is None and collapses_only.collapses is not None
    assert collapses_only.collapses.alpha + collapses_only.collapses.delta == ALPHA
    assert collapses_only.joint_alpha is None
    assert collapses_only.judge(PairedCounts(100, 0, 9), Count(0, 38), exhausted=False).verdict == "good"
    gsm8k_only = StepTest.from_ends(paired_bad=DEMO_BAD, collapses_good=None, collapses_bad=None, alpha=ALPHA)
    assert gsm8k_only.collapses is None and gsm8k_only.paired is not None and gsm8k_only.paired.alpha == ALPHA
    saturated = StepTest.from_ends(paired_bad=DEMO_BAD, collapses_good=Count(64, 64),
                                   collapses_bad=Count(64, 64), alpha=ALPHA)
    assert saturated.collapses is None


@pytest.mark.parametrize("build,field", [
    (lambda: PairedCounts(10, 8, 5), "paired"),
    (lambda: PairedCounts(10, -1, 0), "paired"),
    (lambda: PairedCounts(10.5, 1, 0), "paired"),
    (lambda: Count(5, 3), "collapses"),
    (lambda: Count(True, 3), "collapses"),
    (lambda: demo_test(alpha=0.0), "alpha"),
    (lambda: StepTest.from_ends(paired_bad=DEMO_BAD, collapses_good=None, collapses_bad=None,
                                alpha=ALPHA, beta=1.5), "beta"),
    (lambda: StepTest.from_ends(paired_bad=PairedCounts(1319, 6, 7), collapses_good=Count(3, 64),
                                collapses_bad=Count(4, 64), alpha=ALPHA), "ends"),
    (lambda: simulate(demo_test(), lost=0.7, gained=0.4, collapse=0.0, looks=LOOKS), "lost \\+ gained"),
    (lambda: simulate(demo_test(), lost=0.0, gained=0.0, collapse=0.0, looks=()), "looks"),
    (lambda: batch_schedule(-1, 64), "questions"),
    (lambda: batch_schedule(100, 64, first_generations=0), "first_generations"),
    (lambda: batch_schedule(100, 64, growth=0.5), "growth"),
])
def test_bad_input_is_a_one_line_value_error_naming_the_field(build, field):
    with pytest.raises(ValueError, match=rf"^{field}\b") as info:
        build()
    assert "\n" not in str(info.value)


def test_the_schedule_grows_and_ends_with_the_whole_pool():
    assert LOOKS == ((32, 8), (80, 20), (152, 38), (260, 64), (422, 64), (665, 64), (1030, 64), (1319, 64))
    assert batch_schedule(64, 16) == ((32, 8), (64, 16))
    assert batch_schedule(0, 64)[-1] == (0, 64)
