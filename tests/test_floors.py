"""Absolute floors (`min`/`max`) judged like every other check (issue 47 item 6).

A floor on a share FAILs only when the cell's value is shown beyond it at the threshold's alpha,
PASSes only when shown inside it, and is INCONCLUSIVE in between; the p-values are adjusted across
the cells like a delta's. `gate: point` keeps an engine CI's point-estimate rule. Every verdict
here is compared with a reference computed from the counts by scipy's own binomial test, never
with a hand-copied figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy.stats import binomtest

from evalkit.config import MatrixConfig, Threshold, load_config
from evalkit.config.cells import expand
from evalkit.stats.bounds import ceiling_for, clopper_pearson, decision_band, floor_for, gate_chances
from evalkit.stats.multiplicity import holm
from evalkit.store import write_json
from evalkit.verdict.checks import Evidence, assess_rows, flag
from evalkit.verdict.floors import floor_line
from evalkit.verdict.plan import noise_from, plan_lines, planned_n
from tests.conftest import CONFIGS

ALPHA = 0.05


def rule(**fields: Any) -> Threshold:
    """A threshold validated against the built-in evals' metrics, as a config's would be."""
    return Threshold.model_validate(fields)


def gsm8k_row(cell: str, right: int, n: int) -> dict[str, Any]:
    """A summary-shaped row of a cell that got `right` of `n` GSM8K questions right."""
    return {"id": cell, "status": "ok", "metrics": {"gsm8k.flexible": right / n, "gsm8k.n_eff": n, "gsm8k.n": n}}


def collapse_row(cell: str, collapsed: int, n: int) -> dict[str, Any]:
    return {"id": cell, "status": "ok", "metrics": {"repetition.collapse_rate": collapsed / n,
                                                    "repetition.collapsed": collapsed, "repetition.n": n}}


def judged(threshold: Threshold, *rows: dict[str, Any], method: str = "holm") -> list[str]:
    """Each row's outcome of `threshold`, judged together as a matrix judges its cells."""
    return [records[0].outcome for records in assess_rows([threshold], [Evidence.of(r) for r in rows], method)]  # type: ignore[arg-type]


def reference(right: int, n: int, limit: float, floor: bool, alpha: float, family: int = 1) -> str:
    """The outcome from the counts alone: scipy's exact one-sided binomial tests (Bonferroni-free
    for one cell), beyond the limit -> FAIL, inside it -> PASS, neither -> INCONCLUSIVE."""
    below = binomtest(right, n, limit, alternative="less").pvalue
    above = binomtest(right, n, limit, alternative="greater").pvalue
    beyond, inside = (below, above) if floor else (above, below)
    if min(1.0, inside * family) < alpha:
        return "PASS"
    return "FAIL" if min(1.0, beyond * family) < alpha else "INCONCLUSIVE"


def test_the_issues_healthy_cells_near_a_floor_are_undecided_not_failed() -> None:
    """The issue's case: on 1,319 questions a healthy 0.936 against `min: 0.94` was FAIL and 0.945
    INCONCLUSIVE, six questions apart. Both lie within the sampling noise (0.65 points of standard
    error), so both are INCONCLUSIVE; the bug's 0.870 is shown below and FAILs; 0.97 is shown above."""
    n = 1319
    floor = rule(metric="gsm8k.flexible", min=0.94)
    cells = {"healthy-low": round(0.936 * n), "healthy-high": round(0.945 * n), "bug": round(0.870 * n)}
    outcomes = judged(floor, *(gsm8k_row(cell, right, n) for cell, right in cells.items()))
    assert outcomes == ["INCONCLUSIVE", "INCONCLUSIVE", "FAIL"]
    assert judged(floor, gsm8k_row("clearly-above", round(0.97 * n), n)) == ["PASS"]


def test_gate_point_keeps_the_engine_cis_point_estimate_rule() -> None:
    """`gate: point` mirrors an engine CI's accuracy gate (ATOM's catalog: accuracy >= threshold):
    strictly below FAILs, anything else PASSes, whatever the noise; the rule says so."""
    n = 1319
    floor = rule(metric="gsm8k.flexible", min=0.94, gate="point")
    assert judged(floor, gsm8k_row("low", round(0.936 * n), n), gsm8k_row("high", round(0.945 * n), n)) == ["FAIL", "PASS"]
    ((record,),) = assess_rows([floor], [Evidence.of(gsm8k_row("low", round(0.936 * n), n))], "holm")
    assert record.rule == "gsm8k.flexible min 0.94 gate point" and record.p is None


def test_gate_point_on_a_delta_is_bad_input_naming_the_field() -> None:
    """A drop against a reference is always tested; `gate: point` there would silently do nothing."""
    with pytest.raises(ValidationError, match="gate: point applies to min and max only"):
        rule(metric="gsm8k.flexible", max_drop_ab=0.02, alpha=0.01, gate="point")


@given(right=st.integers(0, 400), extra=st.integers(0, 400), limit=st.floats(0.01, 0.99),
       alpha=st.sampled_from([0.01, 0.05, 0.1]), floor=st.booleans())
def test_one_cells_floor_verdict_is_the_exact_binomial_tests_verdict(right: int, extra: int, limit: float,
                                                                      alpha: float, floor: bool) -> None:
    """For any counts and limit, one cell's `min` or `max` outcome is what scipy's exact one-sided
    binomial tests of its k of n against the limit say at the threshold's alpha."""
    n = right + extra
    if n == 0:
        return
    threshold = rule(metric="gsm8k.flexible", alpha=alpha, **{"min" if floor else "max": round(limit, 4)})
    assert judged(threshold, gsm8k_row("c", right, n)) == [reference(right, n, round(limit, 4), floor, alpha)]


@given(cells=st.lists(st.integers(0, 64), min_size=2, max_size=12), limit=st.floats(0.02, 0.5))
def test_a_collapse_ceiling_is_adjusted_across_the_cells_like_a_delta(cells: list[int], limit: float) -> None:
    """A `max` on the collapse rate, judged on a matrix: each cell's p-values are Holm-adjusted
    across the cells it is checked on, and the outcome is the reference's from the adjusted p-values."""
    n, limit = 64, round(limit, 3)
    threshold = rule(metric="repetition.collapse_rate", max=limit)
    outcomes = judged(threshold, *(collapse_row(f"c{i}", k, n) for i, k in enumerate(cells)))
    above = [binomtest(k, n, limit, alternative="greater").pvalue for k in cells]
    below = [binomtest(k, n, limit, alternative="less").pvalue for k in cells]
    expected = ["PASS" if pin < ALPHA else "FAIL" if pout < ALPHA else "INCONCLUSIVE"
                for pout, pin in zip(holm(above), holm(below))]
    assert outcomes == expected


def test_a_failed_floor_says_its_evidence_and_an_undecided_one_its_interval() -> None:
    """The FAIL's message keeps the words every report used (`0.870 < min 0.94`) and adds the
    evidence; an INCONCLUSIVE record carries the exact interval at the level the adjustment could
    use (alpha / cells each side), which its limit lies within."""
    n = 1319
    floor = rule(metric="gsm8k.flexible", min=0.94)
    rows = [gsm8k_row("bug", round(0.870 * n), n), gsm8k_row("near", round(0.938 * n), n)]
    (failed,), (near,) = assess_rows([floor], [Evidence.of(r) for r in rows], "holm")
    found = flag(floor, failed, "bug", rows[0]["metrics"])
    assert found is not None and found.message.startswith("bug: GSM8K flexible 0.870 < min 0.94 (binomial p = ")
    assert "Holm p = " in found.message and found.message.endswith("< 0.05, n 1319)")
    assert near.outcome == "INCONCLUSIVE" and near.ci is not None
    assert near.ci_level == pytest.approx(1 - 2 * ALPHA / 2)
    assert near.ci[0] <= 0.94 <= near.ci[1]
    assert near.ci == pytest.approx(list(clopper_pearson(round(0.938 * n), n, ALPHA / 2)))


def test_a_value_with_no_n_is_held_to_its_point_estimate() -> None:
    """A throughput has no binomial noise to test against: its floor is the point estimate."""
    floor = rule(metric="engine.tokens_per_s", min=100.0)
    rows = [{"id": "slow", "status": "ok", "metrics": {"engine.tokens_per_s": 99.0}},
            {"id": "fast", "status": "ok", "metrics": {"engine.tokens_per_s": 101.0}}]
    assert judged(floor, *rows) == ["FAIL", "PASS"]


@given(n=st.integers(10, 2000), limit=st.floats(0.05, 0.95), alpha=st.sampled_from([0.01, 0.05]))
def test_a_cell_exactly_at_its_floor_fails_it_at_most_alpha_of_the_time(n: int, limit: float, alpha: float) -> None:
    """The noise rule's promise, exactly over the binomial distribution: a cell whose true share
    is the limit FAILs at most alpha of the time; the point estimate fails it about half the time
    once n is large enough for the share to spread both ways."""
    at_limit = gate_chances(limit, n, limit, alpha)
    assert at_limit.fail <= alpha + 1e-12
    if n >= 200:
        assert gate_chances(limit, n, limit, alpha, point=True).fail > 0.35


@given(right=st.integers(0, 300), extra=st.integers(1, 300), alpha=st.sampled_from([0.001, 0.01, 0.05]))
def test_a_suggested_floor_is_a_share_the_cell_passes(right: int, extra: int, alpha: float) -> None:
    """`floor_for` (what calibrate suggests) lies in [0, 1], on the half-point grid, and the cell
    it came from PASSes it (`ceiling_for` the same for a `max`); 0 means no floor could pass."""
    n = right + extra
    low, high = floor_for(right, n, alpha), ceiling_for(right, n, alpha)
    assert 0 <= low <= right / n <= high <= 1
    assert abs(low * 200 - round(low * 200)) < 1e-6 and abs(high * 200 - round(high * 200)) < 1e-6
    if low > 0:
        assert binomtest(right, n, low, alternative="greater").pvalue < alpha
    if high < 1:
        assert binomtest(right, n, high, alternative="less").pvalue < alpha


def demo_config() -> MatrixConfig:
    return load_config(CONFIGS / "demo.yaml")


def test_plan_says_the_rule_and_the_band_each_floor_is_judged_by() -> None:
    """`evalkit plan` names the rule of each floor and the shares where a cell of the planned n
    PASSes and FAILs: the demo's `min 0.9` over 12 cells at 1,319 questions."""
    config = demo_config()
    lines = plan_lines(config, None, noise_from(None))
    (line,) = [x for x in lines if "gsm8k.flexible min 0.9:" in x]
    pass_at, fail_at = decision_band(0.9, 1319, ALPHA / 12)
    assert pass_at is not None and fail_at is not None
    assert (f"exact binomial, one-sided 0.05, Holm over 12 cells: at n 1319 PASS at {pass_at:.3f} or above, "
            f"FAIL at {fail_at:.3f} or below, INCONCLUSIVE between") in line
    assert "expected value unknown" in line


@pytest.mark.parametrize("cells", [2, 12])
def test_a_cell_at_the_plans_pass_share_passes_whatever_the_other_cells_do(cells: int) -> None:
    """The band plan states is what the checks do: `cells` cells all at `pass_at` (the Holm family's
    worst case: equal p-values, each adjusted by the whole family) PASS; one question fewer
    each and they do not; all at `fail_at` FAIL."""
    n, limit = 1319, 0.9
    pass_at, fail_at = decision_band(limit, n, ALPHA / cells)
    assert pass_at is not None and fail_at is not None
    floor = rule(metric="gsm8k.flexible", min=limit)
    at = round(pass_at * n)
    assert set(judged(floor, *(gsm8k_row(f"c{i}", at, n) for i in range(cells)))) == {"PASS"}
    assert "PASS" not in judged(floor, *(gsm8k_row(f"c{i}", at - 1, n) for i in range(cells)))
    assert set(judged(floor, *(gsm8k_row(f"c{i}", round(fail_at * n), n) for i in range(cells)))) == {"FAIL"}


def test_plan_weighs_a_floor_at_the_measured_level_and_a_point_gate_at_the_limit(tmp_path: Path) -> None:
    """With a calibrate.json the expected value is the calibrated cell's mean, and the line says
    how often a cell there fails (exactly, over the binomial distribution); a point gate says
    how often a cell exactly at its limit fails it (about half: the coin toss it is)."""
    calibration = tmp_path / "calibrate.json"
    write_json(calibration, {"metrics": [{"metric": "gsm8k.flexible", "values": [0.94, 0.94], "flip_rate": 0.03}]})
    noise = noise_from(calibration)
    n, limit = 1319, 0.94
    noisy = floor_line(rule(metric="gsm8k.flexible", min=limit), n, 12, "holm", noise.level["gsm8k.flexible"],
                       noise.source)
    worst = gate_chances(limit, n, 0.94, ALPHA)
    assert f"a cell at 0.940 (measured by calibrate ({calibration})) fails it at most" in noisy
    assert worst.fail < 0.05 and "undecided at most 99%" in noisy
    point = floor_line(rule(metric="gsm8k.flexible", min=limit, gate="point"), n, 12, "holm", None, "")
    half = gate_chances(limit, n, limit, ALPHA, point=True).fail
    assert point.startswith("gsm8k.flexible min 0.94 gate point: the point estimate (gate: point, an engine CI's rule)")
    assert f"a cell at the limit fails it {half:.0%} of runs" in point and 0.4 < half < 0.6


def test_every_shipped_floor_passes_a_healthy_cell_and_fails_the_bug_in_plan() -> None:
    """The shipped DeepSeek-V4 configs' GSM8K floors (the real model's and the demo's), at their
    planned n and cells: a healthy DeepSeek-V4 (0.94, ATOM's own gate) PASSes every noise-judged
    one surely, and the bug's 0.87 FAILs it (the deepseek-v4 floor sat at 0.94, undecided every
    healthy night by the noise rule and failed half of them on the point estimate). A floor that
    mirrors an engine CI (DSpark's catalog entry) says so with `gate: point`."""
    judged, mirrored = [], []
    for path in sorted(CONFIGS.glob("*.yaml")):
        config = load_config(path)
        if "deepseek-v4" not in config.model.lower():
            continue
        cells = len(expand(config))
        for t in config.thresholds:
            if t.metric != "gsm8k.flexible" or not t.kind.own_value:
                continue
            if t.gate == "point":
                mirrored.append(path.name)
                continue
            n = planned_n(config, t.metric, None)
            assert n is not None
            pass_at, fail_at = decision_band(t.value, n, ALPHA / cells)
            assert pass_at is not None and pass_at <= 0.935, (path.name, pass_at)
            if n >= 1000:  # the full GSM8K (demo-atom scores 400 questions: its drop gates catch the bug)
                assert fail_at is not None and fail_at >= 0.870, (path.name, fail_at)
            judged.append(path.name)
    assert mirrored == ["deepseek-v4-dspark.yaml"]
    assert {"demo.yaml", "deepseek-v4.yaml", "sglang-deepseek.yaml", "vllm-deepseek.yaml"} <= set(judged)
