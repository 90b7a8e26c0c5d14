"""A run with no twin and no baseline (`matrix --base-url` against one server) is judged by its
absolute gates alone (issue 47 item 2): its headline says which headline metrics no check
reached, and every shipped config carries an absolute gate for each headline metric, so a 28%
collapse rate on one server no longer passes unflagged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalkit.config.loader import load_config
from evalkit.errors import EXIT_INCONCLUSIVE, EXIT_THRESHOLD
from evalkit.render.header import verdict_line
from evalkit.render.headline import headline
from evalkit.verdict.deltas import strict_exit_code, summarize_run
from tests.helpers.runs import CellSpec, config_dict, loop_text, write_run

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
EXEMPT = {
    ("vllm-tiny", "gsm8k.flexible"): "a randomly initialised model: its GSM8K score is noise, only batch invariance must hold",
    ("vllm-tiny", "repetition.collapse_rate"): "a randomly initialised model loops by itself; judged between cells only",
    ("vllm-answers", "repetition.collapse_rate"): "a 0.9 M-parameter arithmetic model: its essays' loops are the "
                                                  "model's, not the engine's; judged between cells only",
    ("vllm-answers-pd", "gsm8k.flexible"): "the answers model cannot answer GSM8K's own questions (about 1 in 50): "
                                           "the pair is judged against its aggregated twin only",
}
"""Shipped configs' headline metrics left without an absolute gate, each with why."""

ONE_SERVER = {"axes": {"parallel": {"tp8": {"settings": {"tensor_parallel": 8}}}, "fix": {"fixon": {"args": ["--sim-fix", "on"]}}},
              "baseline": None, "ab": None}
"""One cell, no twin and no baseline: what `--base-url` against one server runs."""
COLLAPSING = CellSpec(right=19, long_texts=[loop_text("again and again ")] * 18 + ["fine prose"] * 46)
"""18 of 64 long generations collapsed: 28%."""


def demo_thresholds(*, absolute: bool) -> list[dict[str, Any]]:
    """configs/demo.yaml's thresholds on GSM8K and the collapse rate (the evals a hand-made run
    holds), with or without its absolute ones."""
    kept = [t.model_dump(exclude_defaults=True, by_alias=True) for t in load_config(CONFIGS / "demo.yaml").thresholds
            if t.metric.startswith(("gsm8k.", "repetition."))]
    return [t for t in kept if absolute or not ({"min", "max"} & set(t))]


def test_one_server_judged_only_relative_to_other_cells_says_its_headline_metrics_went_unjudged(tmp_path: Path) -> None:
    run, config = write_run(tmp_path, "one", {"tp8-fixon": COLLAPSING},
                            config_dict(**ONE_SERVER, thresholds=demo_thresholds(absolute=False)))
    summary = summarize_run(run, config)
    assert summary.unjudged == ["tp8-fixon"]
    assert headline(summary) == ("1 of 1 cells not judged: tp8-fixon (no failing threshold applies to it); "
                                 "GSM8K flexible and collapse rate judged on no cell (no threshold reached them)")
    assert verdict_line(summary)[0] is False and strict_exit_code(summary) == EXIT_INCONCLUSIVE


def test_the_shipped_demo_gates_fail_a_28_percent_collapse_rate_on_one_server(tmp_path: Path) -> None:
    run, config = write_run(tmp_path, "one", {"tp8-fixon": COLLAPSING},
                            config_dict(**ONE_SERVER, thresholds=demo_thresholds(absolute=True)))
    summary = summarize_run(run, config)
    assert summary.exit_code == EXIT_THRESHOLD and summary.unjudged == []
    assert headline(summary).startswith("1 of 1 cells broke: tp8-fixon: collapse rate 0.281 > max 0.15")


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_gates_each_headline_metric_absolutely(path: Path) -> None:
    """A headline metric is one with a table by configuration (its pivot); each one a config
    measures has a `min` or `max`, or is exempt with its reason."""
    config = load_config(path)
    measured = [spec.name for ev, settings in config.evals.enabled() for spec in ev.metrics_for(settings)
                if spec.display.pivot]
    gated = {t.metric for t in config.thresholds if t.kind.own_value}
    missing = [m for m in measured if m not in gated and (path.stem, m) not in EXEMPT]
    assert missing == [], f"{path.name}: no absolute gate on {', '.join(missing)}"
