"""summary.json is the dump of typed models (evalkit/verdict/summary.py), and older files still read
(issue 27 item 2).

tests/data/summary/before-metrics.json was written by evalkit at 8f46e4c, before summaries
recorded their metrics: a 2 x 2 run with a paired drop, collapses and a failed cell.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from evalkit.evals import recorded, registry
from evalkit.render import FORMATS, render
from evalkit.verdict.deltas import summarize, summarize_run
from evalkit.verdict.summary import Delta, Flag, RunSummary
from tests.test_report_helpers import CellSpec, loop_text, write_run

BEFORE = Path(__file__).parent / "data" / "summary" / "before-metrics.json"


def old_summary() -> dict:
    return json.loads(BEFORE.read_text(encoding="utf-8"))


def test_a_summary_from_before_the_models_reads_and_dumps_back_unchanged() -> None:
    data = old_summary()
    summary = RunSummary.model_validate(data)
    assert summary.dump() == data and "metrics" not in summary.dump()  # no field invented on the way
    fixoff = summary.cells[1]
    assert fixoff.vs_baseline is not None and fixoff.vs_baseline.reference == "tp8-fixon"
    drop = fixoff.vs_baseline.__pydantic_extra__["gsm8k.flexible"]
    assert drop.diff == pytest.approx(-0.1) and drop.p_value is not None
    assert [f.action for f in fixoff.flags] and summary.cells[2].error == "engine died"


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "terminal"])
def test_a_summary_from_before_renders_as_if_it_recorded_the_built_in_metrics(fmt: str) -> None:
    data = old_summary()
    with_metrics = copy.deepcopy(data) | {"metrics": recorded.records(registry.builtins().metrics())}
    shown = render(data, fmt)
    assert shown and ("tp8-fixoff" in shown or fmt == "headline")  # a headline names the cells that broke
    if fmt != "json":
        assert shown == render(with_metrics, fmt)


def test_summarize_builds_the_model_and_summary_json_is_its_dump(tmp_path: Path) -> None:
    loops = [loop_text("again and again. ")] * 3 + ["A healthy essay about rivers."]
    run_path, config = write_run(tmp_path, "now", {"tp8-fixon": CellSpec(long_texts=["A healthy essay."] * 4),
                                                  "tp8-fixoff": CellSpec(right=18, long_texts=loops)})
    model = summarize_run(run_path, config)
    assert isinstance(model, RunSummary) and model.schema_version == 1
    dumped = summarize(run_path, config)
    assert json.dumps(RunSummary.model_validate(dumped).dump()) == json.dumps(dumped)  # same keys, order, types
    collapse = dumped["cells"][1]["vs_baseline"]["repetition.collapse_rate"]
    assert list(collapse)[:2] == ["p_value", "diff"] and isinstance(collapse["n"], int)  # as verdicts wrote it
    assert set(old_summary()) | {"metrics"} == set(dumped)  # the only new top-level field


def test_unknown_fields_of_a_newer_writer_survive_a_read() -> None:
    data = old_summary() | {"from_the_future": {"x": 1}}
    data["cells"][0]["also_new"] = [1, 2]
    assert RunSummary.model_validate(data).dump() == data


def test_a_check_flag_or_delta_dumps_its_keys_in_the_order_it_was_built_or_read() -> None:
    """Their keys' order depends on their kind, so the models keep it rather than their declared
    order: summary.json reads the same as the dicts it was made of (issue 37)."""
    read = Flag.model_validate({"message": "x", "action": "warn", "check": "c", "metric": "m"})
    assert list(read.dump()) == ["message", "action", "check", "metric"]
    built = Flag(metric="m", check="c", action="warn", message="x").updated(limit=1, action="fail")
    assert built.dump() == {"metric": "m", "check": "c", "action": "fail", "message": "x", "limit": 1}
    assert list(built.dump()) == ["metric", "check", "action", "message", "limit"]  # set later: last
    count = Delta.model_validate({"p_value": 0.01, "diff": 0.2, "n": 64})
    assert list(count.dump()) == ["p_value", "diff", "n"]  # a count's one-sided p first, as deltas.py writes it
    assert isinstance(count.n, int) and count.flips_listed is False
