"""Which metrics a report shows is a fact of its run, not of the process (issue 27 item 1).

An eval's metrics are a pure function of its config section (`Eval.metrics_for`) and of a stored
cell (`Eval.metrics_in`); `summarize` records the run's in summary.json (`metrics`) and every
renderer reads them there. So validating another config, or reading another run's cells, between
writing a summary and rendering it changes nothing, in any format.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console

from evalkit.config import parse_config
from evalkit.evals import registry
from evalkit.evals.recorded import specs_of
from evalkit.render import FORMATS, render
from tests.helpers.runs import CellSpec, config_dict, summary_of, write_run

OTHER_CONFIGS = {
    "no optional eval": config_dict(),
    "divergence": config_dict(evals={"divergence": {"count": 4}}),
    "an lm-eval task": config_dict(evals={"lm_eval": {"tasks": ["gsm8k_cot"]}}),
    "consistency": config_dict(evals={"consistency": {"count": 8}}),
}
"""Configs a process may validate between summarizing a run and rendering it."""


def every_format(summary: dict[str, Any], run_path: Path) -> dict[str, str]:
    out = {}
    for fmt in FORMATS:
        console = Console(file=io.StringIO(), width=240, record=True, color_system=None)
        text = render(summary, fmt, run_path, console)
        out[fmt] = console.export_text() if text is None else text
    return out


def test_one_summary_renders_the_same_after_validating_other_configs(tmp_path: Path) -> None:
    run_path, config = write_run(tmp_path, "div", {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec(right=18)},
                                 config_dict(evals={"divergence": {"count": 4}}))
    summary = summary_of(run_path, config)
    assert "divergence.kl_p99" in [m["name"] for m in summary["metrics"]]  # the run's config names the eval
    first = every_format(summary, run_path)
    assert "Δ flexible vs baseline" in first["markdown"] and "KL p99 vs baseline" in first["markdown"]
    for name, other in OTHER_CONFIGS.items():
        parse_config(other, f"{name}.yaml")
        assert every_format(summary, run_path) == first, f"after validating a config with {name}"


def test_validating_a_config_or_reading_a_cell_changes_no_eval() -> None:
    before = registry.builtins().metrics()
    for name, other in OTHER_CONFIGS.items():
        config = parse_config(other, f"{name}.yaml")
        assert registry.builtins().metrics() == before, name
        assert [s.name for s in config.evals.evalset.metrics(config.evals)] != [s.name for s in before] or name.startswith("no")
    registry.builtins().get("divergence").flat({"n": 4, "tokens": 100})  # a stored cell that ran it, read
    assert registry.builtins().metrics() == before
    assert not [s for s in before if s.name.startswith(("divergence.", "lm_eval.", "consistency."))]  # only the fixed metrics


def test_a_threshold_knows_its_metric_from_its_own_config() -> None:
    config = parse_config(config_dict(evals={"divergence": {"count": 4}}, thresholds=[
        {"metric": "divergence.kl_p99", "max_rise_vs_baseline": 0.01}]), "div.yaml")
    parse_config(config_dict(), "plain.yaml")  # validated later, without the eval
    spec = config.thresholds[0].spec
    assert spec is not None and spec.name == "divergence.kl_p99" and spec.display.delta_label == "KL p99"


def test_the_recorded_specs_read_back_as_the_eval_declares_them(tmp_path: Path) -> None:
    run_path, config = write_run(tmp_path, "plain", {"tp8-fixon": CellSpec()})
    summary = summary_of(run_path, config)
    evals = config.evals.evalset
    assert specs_of(summary, evals) == evals.metrics(config.evals)  # display and noise floor come back too
    assert specs_of({k: v for k, v in summary.items() if k != "metrics"}, evals) == evals.metrics()  # an older summary
