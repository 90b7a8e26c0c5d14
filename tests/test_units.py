"""Each metric's unit and range, declared once (evalkit/evals/units.py), and a threshold that no
value of its metric can meet refused at config load, before any engine starts (issue 47, item 5).

A `min: 90` on GSM8K accuracy passed validation and `plan`, ran 12 cells and FAILed all of them:
these tests pin that the config file says so in one line naming the file, the threshold and the
likely intent, for every kind of threshold, and that every built-in metric says what it is.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.config.loader import load_config, parse_config
from evalkit.errors import ConfigError
from evalkit.evals import recorded, registry
from evalkit.evals.base import Comparison, MetricDisplay, MetricSpec
from evalkit.evals.consistency import SPECS as CONSISTENCY
from evalkit.evals.divergence import GENERATIONS_SPEC
from evalkit.evals.divergence import SPECS as DIVERGENCE
from evalkit.evals.gsm8k_repeats import WORST
from evalkit.evals.units import (
    NATS,
    NUMBER,
    SECONDS,
    SHARE,
    TOKENS,
    TOKENS_PER_S,
    UNITS,
    unit_named,
    unit_of,
)
from tests.helpers.cli import evalkit_cli

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def _demo_with(*thresholds: dict[str, Any]) -> dict[str, Any]:
    from evalkit.config.loader import _UniqueKeyLoader

    data = yaml.load(DEMO.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    data["thresholds"] = [*data["thresholds"], *thresholds]
    return data


def _error(*thresholds: dict[str, Any]) -> str:
    """The one-line error loading the demo config with `thresholds` appended (as configs/x.yaml)."""
    with pytest.raises(ConfigError) as caught:
        parse_config(_demo_with(*thresholds), "configs/x.yaml")
    return str(caught.value)


def test_every_builtin_metric_declares_what_its_numbers_are() -> None:
    """Accuracy, rates and agreements are shares, throughput is tokens/s, TPOT seconds, a divergence
    nats: what the judge, calibrate and plan read to say a noise or refuse a floor."""
    every = {s.name: s for s in [*registry.builtins().metrics(), *DIVERGENCE, GENERATIONS_SPEC, *CONSISTENCY, WORST]}
    expected = {
        "gsm8k.flexible": SHARE, "gsm8k.strict": SHARE, "gsm8k.flexible_worst": SHARE,
        "repetition.collapse_rate": SHARE, "consistency.disagree_rate": SHARE,
        "divergence.top1_agreement": SHARE, "engine.spec_acceptance_rate": SHARE,
        "engine.tokens_per_s": TOKENS_PER_S, "engine.tpot_s": SECONDS,
        "divergence.kl_p99": NATS, "divergence.kl_mean": NATS, "divergence.logprob_abs_mean": NATS,
        "consistency.diverge_at_median": TOKENS, "engine.spec_accepted_len": TOKENS,
    }
    assert {name: every[name].unit for name in expected} == expected
    assert all(spec.unit is not NUMBER for spec in every.values()), [s.name for s in every.values() if s.unit is NUMBER]


def test_a_per_question_or_k_of_n_metric_is_a_share_even_when_its_eval_says_nothing() -> None:
    """A plugin's PAIRED metric left at the default unit is still a share (its marks are 0/1); one
    declared in tokens/s is a contradiction raised where the eval defines it."""
    plain = MetricSpec("toy.acc", Comparison.PAIRED, MetricDisplay("toy"))
    assert plain.unit is SHARE
    assert MetricSpec("toy.speed", Comparison.CONTINUOUS, MetricDisplay("toy")).unit is NUMBER
    with pytest.raises(ValueError, match="toy.rate: a count metric is a share, not tokens/s"):
        MetricSpec("toy.rate", Comparison.COUNT, MetricDisplay("toy"), unit=TOKENS_PER_S)


def test_unit_of_finds_a_metric_by_name_where_no_spec_is_at_hand() -> None:
    """A history series or an imported dashboard has a metric's name only: the built-in eval's
    declaration answers, and a name nobody declares is a plain number (no range to enforce)."""
    assert unit_of("gsm8k.flexible") is SHARE
    assert unit_of("engine.tokens_per_s") is TOKENS_PER_S
    assert unit_of("nobody.declares_this") is NUMBER
    own = MetricSpec("toy.seconds", Comparison.CONTINUOUS, MetricDisplay("toy"), unit=SECONDS)
    assert unit_of("toy.seconds", [own]) is SECONDS


def test_a_summary_records_each_metric_unit_and_reads_it_back() -> None:
    """summary.json holds the unit by name, so a report or the history of a stored run knows it
    without the config; a summary from before units (no key) reads the eval's own declaration."""
    spec = next(s for s in registry.builtins().metrics() if s.name == "engine.tokens_per_s")
    stored = recorded.record(spec)
    assert stored["unit"] == "tokens/s"
    assert recorded.spec(stored, registry.builtins()).unit is TOKENS_PER_S
    older = {k: v for k, v in stored.items() if k != "unit"}
    assert recorded.spec(older, registry.builtins()).unit is TOKENS_PER_S
    assert unit_named("furlongs") is NUMBER and all(unit_named(name) is unit for name, unit in UNITS.items())


@pytest.mark.parametrize(("threshold", "said"), [
    ({"metric": "gsm8k.flexible", "min": 90},
     "gsm8k.flexible is a share in [0, 1]; 90 reads as a percentage: 0.90?"),
    ({"metric": "gsm8k.flexible", "max": -0.2}, "gsm8k.flexible is a share in [0, 1]; -0.2 is outside it"),
    ({"metric": "gsm8k.flexible", "max_drop_ab": 2},
     "gsm8k.flexible is a share in [0, 1]: it changes by at most 1; 2 reads as points: 0.02?"),
    ({"metric": "repetition.collapse_rate", "max_rise_vs_baseline": 5, "alpha": 0.01},
     "repetition.collapse_rate is a share in [0, 1]: it changes by at most 1; 5 reads as points: 0.05?"),
    ({"metric": "gsm8k.flexible", "equivalent_ab": 300, "alpha": 0.05},
     "gsm8k.flexible is a share in [0, 1]: it changes by at most 1; 300 is more than that"),
    ({"metric": "repetition.collapse_rate", "max_rise_ab": 0.05, "alpha": 0.01, "detects": 20},
     "detects: repetition.collapse_rate is a share in [0, 1]: it changes by at most 1; "
     "20 reads as points: 0.2?"),
    ({"metric": "engine.tokens_per_s", "min": -497567},
     "engine.tokens_per_s is a throughput in tokens/s, at least 0; -497567 is outside it"),
    ({"metric": "divergence.top1_agreement", "max_drop_ab": 3},
     "divergence.top1_agreement is a share in [0, 1]: it changes by at most 1; 3 reads as points: 0.03?"),
    ({"metric": "gsm8k.flexible", "min": math.nan}, "gsm8k.flexible is not a number"),
])
def test_a_threshold_no_value_of_its_metric_can_meet_is_one_line_at_load(threshold: dict[str, Any], said: str) -> None:
    """Every kind of threshold against its metric's range: a limit outside it (min/max), a margin or
    a `detects` larger than any change the metric can make; the likely intent is offered."""
    message = _error(threshold)
    appended = len(_demo_with(threshold)["thresholds"]) - 1
    assert message == f"configs/x.yaml: thresholds[{appended}]: {said}"


@pytest.mark.parametrize("threshold", [
    {"metric": "gsm8k.flexible", "min": 0.0}, {"metric": "gsm8k.flexible", "min": 1.0},
    {"metric": "gsm8k.flexible", "max_drop_ab": 1.0}, {"metric": "engine.tokens_per_s", "min": 50000},
    {"metric": "engine.tpot_s", "max": 0.5}, {"metric": "divergence.kl_p99", "max_rise_ab": 7},
])
def test_limits_and_margins_inside_the_range_load(threshold: dict[str, Any]) -> None:
    """The edges of a share's range and any value of an unbounded unit are valid: the check refuses
    only what no measurement could ever meet."""
    config = parse_config(_demo_with(threshold), "configs/x.yaml")
    assert config.thresholds[-1].metric == threshold["metric"]


def test_every_shipped_config_is_inside_its_metrics_ranges() -> None:
    """The configs evalkit ships load under the unit checks (one that did not would be unusable):
    load_config raises the one-line error for a threshold outside its metric's range."""
    loaded = [load_config(path) for path in sorted(DEMO.parent.glob("*.yaml"))]
    assert sum(len(config.thresholds) for config in loaded) > len(loaded)


def test_plan_of_a_percentage_floor_is_exit_2_before_any_engine(tmp_path: Path) -> None:
    """The issue's case end to end: `plan` (and so `matrix`) of a config with `min: 90` on a share is
    bad input, one line on stderr naming the file, the threshold and 0.90, and nothing is run."""
    config = tmp_path / "x.yaml"
    config.write_text(yaml.safe_dump(_demo_with({"metric": "gsm8k.flexible", "min": 90})))
    result = evalkit_cli("plan", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 2
    appended = len(yaml.safe_load(config.read_text())["thresholds"]) - 1
    assert result.stderr.strip().splitlines() == [
        f"error: {config}: thresholds[{appended}]: gsm8k.flexible is a share in [0, 1]; 90 reads as a percentage: 0.90?"]
    assert not (tmp_path / "results").exists()


def test_a_unit_says_values_and_changes_in_the_metric_own_words() -> None:
    """Noise and deltas reach readers in points for shares and tokens/s for throughput (the history
    judge printed throughput noise in "points"); a rounded -0 is said 0."""
    assert SHARE.describe(0.9421) == "0.942"
    assert SHARE.describe_change(-0.071) == "-7.1 points"
    assert SHARE.describe_change(0.012, signed=False) == "1.2 points"
    assert TOKENS_PER_S.describe(1234.56) == "1234.6 tokens/s"
    assert TOKENS_PER_S.describe_change(-120) == "-120.0 tokens/s"
    assert TOKENS_PER_S.describe_change(-0.01) == "+0.0 tokens/s"
    assert SECONDS.describe(0.0123) == "12.3 ms"
    assert SHARE.clamp(-0.693) == 0.0 and SHARE.clamp(1.2) == 1.0 and TOKENS_PER_S.clamp(-497567) == 0.0
    assert SHARE.describe(None) == "-" and SHARE.describe_change(None) == "-"


def test_plan_says_each_threshold_in_its_metric_unit(tmp_path: Path) -> None:
    """`plan` of a floor on a position in tokens says tokens and a divergence margin nats, not a bare
    number a reader might take for points."""
    config = tmp_path / "x.yaml"
    config.write_text(yaml.safe_dump(_demo_with({"metric": "consistency.diverge_at_median", "min": 8})))
    result = evalkit_cli("plan", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    floor = next(line for line in lines if line.startswith("#   consistency.diverge_at_median min 8: "))
    assert "8.0 tokens" in floor
    assert ("#   divergence.kl_p99 max_rise_ab 0.05: no test (a change beyond 0.0500 nats and the noise floor fails)"
            in lines)
