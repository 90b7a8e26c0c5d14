"""evalkit calibrate: the minimum detectable drop is what the paired test really detects, and the
suggested thresholds are a valid config section."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from evalkit.config import parse_config
from evalkit.evals import registry
from evalkit.evals.evalset import spec_named
from evalkit.stats.power import POWER
from evalkit.stats.power import mcnemar_mde as detectable_drop
from evalkit.stats.tests import paired_comparison
from evalkit.verdict.calibrate import (
    MetricNoise,
    paired_noise,
    suggested,
    suggested_min,
    yaml_snippet,
)
from tests.helpers.cli import evalkit_cli


def rejection_rate(n: int, flip_rate: float, drop: float, alpha: float, trials: int, seed: int) -> float:
    """Simulated runs of the power model: a share flip_rate of questions flips at random, half
    each way, and a further `drop` share goes right -> wrong; how often McNemar p < alpha."""
    rng = np.random.default_rng(seed)
    rejected = 0
    for _ in range(trials):
        u = rng.random(n)
        a = np.ones(n, dtype=bool)  # the reference: what matters is which questions differ
        b = a.copy()
        b[u < flip_rate / 2] = False                       # noise, right -> wrong
        b[(u >= flip_rate / 2) & (u < flip_rate + drop)] = False  # the rest of the noise is below
        ref = a.copy()
        ref[(u >= flip_rate / 2 + drop) & (u < flip_rate + drop)] = False  # noise, wrong -> right in b
        b[(u >= flip_rate / 2 + drop) & (u < flip_rate + drop)] = True
        rejected += paired_comparison(list(b), list(ref)).p_value < alpha
    return rejected / trials


@pytest.mark.parametrize("flip_rate", [0.0, 0.03])
def test_the_detectable_drop_is_detected_with_the_stated_power(flip_rate: float) -> None:
    n, alpha = 600, 0.01
    drop = detectable_drop(n, flip_rate, alpha)
    assert drop is not None and 0 < drop < 0.2
    at_drop = rejection_rate(n, flip_rate, drop, alpha, trials=1500, seed=1)
    at_half = rejection_rate(n, flip_rate, drop / 2, alpha, trials=1500, seed=2)
    assert at_drop >= POWER - 0.05, at_drop
    assert at_half < POWER - 0.2, at_half


def test_more_noise_or_fewer_questions_means_a_larger_detectable_drop() -> None:
    assert detectable_drop(1319, 0.01, 0.01) < detectable_drop(1319, 0.05, 0.01) < detectable_drop(200, 0.05, 0.01)
    assert detectable_drop(1319, 0.03, 0.01) > detectable_drop(1319, 0.03, 0.05)
    assert detectable_drop(5, 0.5, 1e-6) is None


def test_paired_noise_counts_flips_between_runs_on_shared_questions() -> None:
    spec = spec_named("gsm8k.flexible", registry.builtins().metrics())
    runs = [{"q1": True, "q2": True, "q3": False, "q4": True},
            {"q1": True, "q2": False, "q3": True, "q4": True},
            {"q1": True, "q2": True, "q3": False}]  # q4 unanswered in run 3: left out of every pair
    noise = paired_noise(spec, runs, [0.75, 0.75, 0.667], alpha=0.01, full_n=1319)
    assert noise.n == 3
    assert noise.flip_rate == pytest.approx((2 / 3 + 0 + 2 / 3) / 3)
    assert noise.max_pairwise_diff == 0.0  # run 1 and 2 both have 2 of 3 right on the shared three
    assert noise.detectable_drop is None or noise.detectable_drop > 0
    assert noise.full_n == 1319 and noise.detectable_drop_full is not None


def test_the_snippet_is_a_thresholds_section_evalkit_accepts() -> None:
    fixed = registry.builtins().metrics()
    flex, collapse = spec_named("gsm8k.flexible", fixed), spec_named("repetition.collapse_rate", fixed)
    accuracy = MetricNoise("gsm8k.flexible", [0.940, 0.937, 0.942], n=1319, flip_rate=0.03, max_pairwise_diff=0.005,
                           detectable_drop=0.022)
    collapses = MetricNoise("repetition.collapse_rate", [0.0, 1 / 64, 0.0], n=64, counts=[0, 1, 0])
    text = yaml_snippet(["3 runs of tp8-full-fixon"], [(flex, accuracy), (collapse, collapses)], alpha=0.01)
    section = yaml.safe_load(text)
    config = parse_config({"model": "m", "engine": {"profile": "sim"}, **section}, "snippet")
    rules = {(t.metric, t.check): t for t in config.thresholds}
    # mean 0.9397 less z(1 - 0.01/12) = 3.14 x sqrt(2 x 0.0566 / 1319 + 0.0025^2) = 0.0298, rounded down
    assert rules[("gsm8k.flexible", "min")].value == pytest.approx(0.905)
    assert rules[("gsm8k.flexible", "max_drop_ab")].value == pytest.approx(0.025)
    assert rules[("gsm8k.flexible", "max_drop_ab")].alpha == 0.01
    assert rules[("repetition.collapse_rate", "max")].value == pytest.approx(0.035)
    assert "3.0% of 1319 questions flip" in text
    assert suggested(accuracy, flex, 0.01)[0] == {"metric": "gsm8k.flexible", "min": 0.905}
    assert "a healthy run fails it" in text and "a nightly of 12 cells" in text


def test_identical_runs_still_leave_room_for_binomial_noise_and_say_the_false_failure_rate() -> None:
    # the case: three identical runs of 200 questions at 0.945 suggested min 0.945 (the mean)
    same = MetricNoise("gsm8k.flexible", [0.945] * 3, n=200, flip_rate=0.0, max_pairwise_diff=0.0)
    gate = suggested_min(same, alpha=0.01, cells=12)
    assert gate.limit < 0.945 - 0.05  # z(0.01/12) sqrt(2 x 0.052 / 200) = 7.2 points of room
    assert gate.per_nightly <= 0.01 and gate.per_run <= 0.01 / 12
    # simulated: healthy runs of 200 questions at 0.945 fall below it at most at the stated rate
    runs = np.random.default_rng(4).binomial(200, 0.945, 200_000) / 200
    assert float(np.mean(runs < gate.limit)) <= 2 * gate.per_run + 1e-4


CALIBRATE_CONFIG = """\
model: sim/calibrate
engine:
  profile: sim
  args: ["--sim-startup-seconds", "0.1", "--sim-seed", "3"]
axes:
  graph:
    full: {settings: {graph_mode: FULL}}
    piecewise: {settings: {graph_mode: PIECEWISE}}
evals:
  gsm8k: {num_fewshot: 1, num_concurrent: 16}
  repetition: {count: 4, max_tokens: 600}
thresholds:
  - {metric: gsm8k.flexible, max_drop_ab: 0.02, alpha: 0.05}
timeouts: {startup: 60, stop_grace: 5}
"""


def test_calibrate_runs_the_cell_n_times_and_prints_a_snippet_measured_from_them(tmp_path: Path,
                                                                                 engine_processes: None) -> None:
    """End to end: each repeat starts the cell's engine, a real simulator process."""
    from evalkit.store import read_json, read_jsonl

    config = tmp_path / "cal.yaml"
    config.write_text(CALIBRATE_CONFIG, encoding="utf-8")
    args = ["calibrate", "--config", str(config), "--cell", "full", "--repeats", "2", "--limit", "40",
            "--run-id", "cal", "--results-dir", str(tmp_path / "results"), "--quiet"]
    result = evalkit_cli(*args)
    assert result.returncode == 0, result.output
    folder = tmp_path / "results" / "cal"
    marks = [{r["id"]: r["flexible-extract.correct"] for r in read_jsonl(folder / f"repeat-{i}" / "full" / "gsm8k.samples.jsonl")}
             for i in (1, 2)]
    flips = sum(marks[0][q] != marks[1][q] for q in marks[0]) / len(marks[0])
    saved = read_json(folder / "calibrate.json")
    flexible = next(m for m in saved["metrics"] if m["metric"] == "gsm8k.flexible")
    assert flexible["n"] == 40 and flexible["flip_rate"] == pytest.approx(flips)
    assert flexible["alpha"] == 0.05  # the config's alpha for that metric
    assert flexible["detectable_drop"] == detectable_drop(40, flips, 0.05)
    assert flexible["detectable_drop_full"] == detectable_drop(1319, flips, 0.05)
    snippet = yaml.safe_load(result.stdout if hasattr(result, "stdout") else result.output)
    rules = parse_config({"model": "m", "engine": {"profile": "sim"}, **snippet}, "snippet").thresholds
    assert {t.metric for t in rules} == {"gsm8k.strict", "gsm8k.flexible", "repetition.collapse_rate"}
    first = (folder / "repeat-1" / "summary.json").stat().st_mtime_ns
    again = evalkit_cli(*args)  # the same folder: finished repeats are kept, not run again
    assert again.returncode == 0 and (folder / "repeat-1" / "summary.json").stat().st_mtime_ns == first


def test_calibrate_refuses_a_cell_the_config_does_not_have(tmp_path: Path) -> None:
    config = tmp_path / "cal.yaml"
    config.write_text(CALIBRATE_CONFIG, encoding="utf-8")
    result = evalkit_cli("calibrate", "--config", str(config), "--cell", "eager", "--repeats", "2",
                         "--results-dir", str(tmp_path / "results"))
    assert result.returncode == 2
    assert "--cell eager: not a cell of" in result.output and "(cells: full, piecewise)" in result.output
    assert not (tmp_path / "results").exists()
