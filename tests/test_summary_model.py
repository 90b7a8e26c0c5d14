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

from evalkit.errors import ConfigError
from evalkit.evals import recorded, registry
from evalkit.render import FORMATS, render
from evalkit.verdict.deltas import summarize, summarize_run
from evalkit.verdict.summary import SUMMARY_SCHEMA_VERSION, CheckRecord, Delta, Flag, RunSummary
from tests.helpers.runs import CellSpec, loop_text, write_run

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
    assert isinstance(model, RunSummary) and model.schema_version == SUMMARY_SCHEMA_VERSION == 2
    dumped = summarize(run_path, config)
    assert json.dumps(RunSummary.model_validate(dumped).dump()) == json.dumps(dumped)  # same keys, order, types
    collapse = dumped["cells"][1]["vs_baseline"]["repetition.collapse_rate"]
    assert list(collapse)[:2] == ["diff", "p_value"] and isinstance(collapse["n"], int)
    assert set(old_summary()) | {"metrics"} == set(dumped)  # the only new top-level field


def test_unknown_fields_of_a_newer_writer_survive_a_read() -> None:
    data = old_summary() | {"from_the_future": {"x": 1}}
    data["cells"][0]["also_new"] = [1, 2]
    assert RunSummary.model_validate(data).dump() == data


def test_a_check_flag_or_delta_dumps_its_keys_in_declaration_order_however_it_was_read() -> None:
    """schema_version 2: keys in the models' order, not in the order a version-1 file was written
    in (which varied with the kind); only the keys that were set (issue 37)."""
    read = Flag.model_validate({"message": "x", "action": "warn", "check": "c", "metric": "m", "own": 1})
    assert list(read.dump()) == ["metric", "check", "action", "message", "own"]  # an unknown key: last
    built = CheckRecord(threshold=0, rule="r", metric="m", check="min", outcome="PASS").updated(value=1, outcome="FAIL")
    assert built.dump() == {"threshold": 0, "rule": "r", "metric": "m", "check": "min", "value": 1, "outcome": "FAIL"}
    assert list(built.dump()) == ["threshold", "rule", "metric", "check", "value", "outcome"]
    count = Delta.model_validate({"p_value": 0.01, "diff": 0.2, "n": 64})
    assert list(count.dump()) == ["diff", "p_value", "n"]
    assert isinstance(count.n, int) and count.flips_listed is False


def test_a_version_1_summary_reads_into_the_same_model_and_a_newer_one_is_refused(tmp_path: Path) -> None:
    old = tmp_path / "old" / "summary.json"
    old.parent.mkdir()
    old.write_text(BEFORE.read_text(encoding="utf-8"))
    summary = RunSummary.load(old)
    assert summary.schema_version == 1 and summary.dump() == old_summary()  # the same content, read as written
    unversioned = {k: v for k, v in old_summary().items() if k != "schema_version"}
    assert RunSummary.model_validate(unversioned).dump()["schema_version"] == 1  # written before versions
    newer = tmp_path / "summary.json"
    newer.write_text(json.dumps(old_summary() | {"schema_version": SUMMARY_SCHEMA_VERSION + 1}))
    with pytest.raises(ConfigError, match="schema_version 3 is newer than this evalkit's 2; upgrade evalkit"):
        RunSummary.load(newer)
