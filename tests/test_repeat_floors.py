"""A re-run cell's noise floor, as each eval stores it, is what its metrics' specs read
(`MetricSpec.noise_floor`: a change within it breaks no threshold); a cell without repeats has none.
"""

from __future__ import annotations

from evalkit.evals import divergence
from evalkit.evals.gsm8k import GSM8K
from evalkit.stats.tests import noise_floor


def test_gsm8k_reads_the_largest_accuracy_change_between_its_repeats() -> None:
    strict = noise_floor([[True, True, False, True], [True, False, False, True]], ids=["q1", "q2", "q3", "q4"])
    flexible = noise_floor([[True, True, True, True], [True, True, True, True]])
    raw = {"repeats": {"n": 2, "noise_floor": {"strict": strict.to_dict(), "flexible": flexible.to_dict()}}}
    by_name = {spec.name: spec for spec in GSM8K.metrics}
    assert by_name["gsm8k.strict"].noise_floor is not None and by_name["gsm8k.flexible"].noise_floor is not None
    assert by_name["gsm8k.strict"].noise_floor(raw) == 0.25
    assert by_name["gsm8k.flexible"].noise_floor(raw) == 0.0
    assert by_name["gsm8k.strict"].noise_floor({"repeats": None}) is None
    assert by_name["gsm8k.strict"].noise_floor({}) is None


def test_divergence_reads_each_metrics_own_floor() -> None:
    floors = {"kl_p99": 0.5, "kl_mean": 0.125, "top1_agreement": 0.0625, "logprob_abs_mean": 0.25}
    raw = {"repeats": {"n": 2, "noise_floor": floors}}
    for spec in divergence.SPECS:
        assert spec.noise_floor is not None
        assert spec.noise_floor(raw) == floors[spec.name.removeprefix("divergence.")]
        assert spec.noise_floor({"repeats": None}) is None
