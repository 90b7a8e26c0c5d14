"""Never compare unlike with unlike: every cell records its eval setup fingerprint, and compare
and the baseline/twin deltas refuse pairs whose setups differ, naming the fields.

Real runs on the simulator differ in what a config controls (endpoint, n-shot); what a config
cannot change (lm-eval's or evalkit's version, the data) is varied by editing a stored run's
fingerprint, as a run made by another installation would have it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit import __version__
from evalkit.cli import main
from evalkit.config import parse_config
from evalkit.errors import EXIT_THRESHOLD
from evalkit.evals.base import fingerprint, setup_differences
from evalkit.evals.gsm8k import GSM8KSettings, write_task_yaml
from evalkit.evals.gsm8k import setup_fields as gsm8k_setup
from evalkit.evals.repetition import RepetitionSettings
from evalkit.evals.repetition import setup_fields as repetition_setup
from evalkit.store import read_json, write_json
from evalkit.verdict.compare import compare_runs
from evalkit.verdict.deltas import summarize
from evalkit.verdict.summary import RunComparison
from tests.helpers.runs import rerun
from tests.helpers.sim import FIX_AB

CONFIG = """\
model: sim/fp
engine:
  profile: sim
  args: ["--sim-startup-seconds", "0.1", "--sim-seed", "0"]
{fix_ab}
evals:
  gsm8k: {{num_fewshot: {shots}, endpoint: {endpoint}, num_concurrent: 8}}
  repetition: {{count: 2, max_tokens: 256}}
thresholds:
  - {{metric: gsm8k.flexible, max_drop_ab: 0.02}}
timeouts: {{startup: 60, stop_grace: 5}}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three real runs of two cells, 12 questions: the base, n-shot 2, and the chat endpoint (6 engine
    starts). The tests that read them check what those real runs recorded, so each asks for
    `engine_processes`: e2e."""
    tmp = tmp_path_factory.mktemp("fingerprint")
    results = tmp / "results"
    made = {}
    for name, shots, endpoint in (("base", 3, "completions"), ("shots", 2, "completions"), ("chat", 3, "chat")):
        config = tmp / f"{name}.yaml"
        config.write_text(CONFIG.format(shots=shots, endpoint=endpoint, fix_ab=FIX_AB), encoding="utf-8")
        result = CliRunner().invoke(main, ["matrix", "--config", str(config), "--run-id", name, "--limit", "12",
                                           "--results-dir", str(results), "--no-history", "--quiet"])
        assert result.exit_code == 0, result.output
        made[name] = results / name
    return made


def differing(result: RunComparison, cell: str = "fixon") -> dict[str, list[str]]:
    return next(r for r in result.cells if r.id == cell).setup_differs


def test_every_cell_records_its_setup_and_equal_setups_compare_as_before(runs: dict[str, Path],
                                                                          engine_processes: None) -> None:
    summary = read_json(runs["base"] / "summary.json")
    for cell in summary["cells"]:
        assert set(cell["setup"]) == {"gsm8k", "repetition"}
    assert {s["eval"] for s in summary["setups"].values()} == {"gsm8k", "repetition"}
    fields = read_json(runs["base"] / "fixon" / "cell.json")["metrics"]["gsm8k"]["setup"]["fields"]
    assert fields["num_fewshot"] == 3 and fields["endpoint"] == "completions" and fields["lm_eval_version"]
    for eval_name in ("gsm8k", "repetition"):  # every setup depends on evalkit's own version
        stored = read_json(runs["base"] / "fixon" / "cell.json")["metrics"][eval_name]["setup"]
        assert stored["fields"]["evalkit_version"] == __version__
    same = compare_runs(runs["base"], rerun(runs["base"], "base-again"))
    flexible = same.cells[0].delta("gsm8k.flexible")
    assert differing(same) == {} and flexible is not None and flexible.p_value == 1.0


@pytest.mark.parametrize(("run", "fields"), [("shots", ["num_fewshot"]),
                                             ("chat", ["chat_template", "endpoint"])])
def test_compare_refuses_runs_whose_config_changed_the_setup(runs: dict[str, Path], run: str, fields: list[str],
                                                             engine_processes: None) -> None:
    result = compare_runs(runs["base"], runs[run])
    assert differing(result) == {"gsm8k": fields}
    for cell in result.dump()["cells"]:
        assert cell["gsm8k.flexible"] == {"diff": None, "p_value": None, "setup_differs": fields}
        assert cell["repetition.collapse_rate"]["p_value"] is not None  # the collapse check's setup is the same
    out = CliRunner().invoke(main, ["compare", "base", run, "--results-dir", str(runs["base"].parent),
                                    "--format", "json"])
    # a failing threshold that could not be checked is broken, as in the matrix: exit 1
    assert out.exit_code == EXIT_THRESHOLD and fields[0] in out.output
    assert {c["outcome"] for c in json.loads(out.output)["cells"][0]["checks"] if c["metric"] == "gsm8k.flexible"} == {
        "NOT_CHECKED"}


STORED_FIELDS = [("gsm8k", "lm_eval_version", "0.4.99"), ("gsm8k", "evalkit_version", "9.9.9"),
                 ("gsm8k", "data", "0" * 16), ("gsm8k", "task_version", 99.0),
                 ("gsm8k", "generation_kwargs", {"until": ["x"], "max_gen_toks": 1}),
                 ("gsm8k", "task_yaml", "f" * 16), ("gsm8k", "tokenizer", "some/tokenizer"),
                 ("repetition", "prompt_set_version", "abc"), ("repetition", "detector", {"max_period": 1}),
                 ("repetition", "token_source", "text_split"), ("repetition", "evalkit_version", "9.9.9")]


def _edit_setup(cell_json: Path, eval_name: str, field: str, value: Any) -> None:
    record = read_json(cell_json)
    fields = dict(record["metrics"][eval_name]["setup"]["fields"], **{field: value})
    record["metrics"][eval_name]["setup"] = fingerprint(fields)
    write_json(cell_json, record)


@pytest.mark.parametrize(("eval_name", "field", "value"), STORED_FIELDS)
def test_compare_names_each_differing_field(runs: dict[str, Path], tmp_path: Path, eval_name: str, field: str,
                                            value: Any, engine_processes: None) -> None:
    other = tmp_path / "other"
    shutil.copytree(runs["base"], other)
    for cell in ("fixon", "fixoff"):
        _edit_setup(other / cell / "cell.json", eval_name, field, value)
    result = compare_runs(runs["base"], other)
    assert differing(result) == {eval_name: [field]}
    metric = "gsm8k.flexible" if eval_name == "gsm8k" else "repetition.collapse_rate"
    delta = result.cells[0].delta(metric)
    assert delta is not None and delta.setup_differs == [field]


def test_a_twin_from_another_setup_is_not_compared_and_its_gate_says_so(runs: dict[str, Path], tmp_path: Path,
                                                                         engine_processes: None) -> None:
    """A run resumed after an lm-eval upgrade: the fix-off cell ran with another version."""
    run = tmp_path / "mixed"
    shutil.copytree(runs["base"], run)
    _edit_setup(run / "fixoff" / "cell.json", "gsm8k", "lm_eval_version", "0.4.99")
    config = parse_config(read_json(run / "run.json")["config"], run / "run.json")
    off = next(c for c in summarize(run, config)["cells"] if c["id"] == "fixoff")
    assert off["vs_ab"]["gsm8k.flexible"]["setup_differs"] == ["lm_eval_version"]
    assert off["vs_ab"]["repetition.collapse_rate"]["p_value"] is not None
    (flag,) = off["flags"]
    assert flag["action"] == "fail" and flag["setup_differs"] == ["lm_eval_version"]
    assert "not compared with fixon: eval setup differs (lm_eval_version)" in flag["message"]


def test_each_setting_that_changes_a_score_changes_the_fingerprint(tmp_path: Path) -> None:
    def gsm8k_hash(**changes: Any) -> str:
        settings = GSM8KSettings(**changes)
        write_task_yaml(tmp_path, settings)
        metrics = {"task_version": 3.0, "num_fewshot": settings.num_fewshot, "lm_eval_version": "0.4.13",
                   "chat_template": None}
        return fingerprint(gsm8k_setup(settings, tmp_path, metrics))["hash"]

    base = gsm8k_hash()
    for change in ({"endpoint": "chat"}, {"max_gen_toks": 512}, {"until": ["\n\n"]}, {"seed": 7},
                   {"subset": "first"}, {"subset_seed": 1}):
        assert gsm8k_hash(**change) != base, change
    for change in ({"num_concurrent": 64}, {"max_retries": 0}, {"timeout": 5.0}, {"limit": 10}):
        assert gsm8k_hash(**change) == base, change  # speed and N do not change what a question's answer is

    def repetition_hash(token_ids: bool = True, **changes: Any) -> str:
        return fingerprint(repetition_setup(RepetitionSettings(**changes), "v1", token_ids))["hash"]

    base = repetition_hash()
    for change in ({"max_tokens": 8192}, {"endpoint": "chat"}, {"detector": {"max_period": 64}}, {"prompt_set": "x"}):
        assert repetition_hash(**change) != base, change
    assert repetition_hash(token_ids=False) != base
    assert repetition_hash(count=3, concurrency=2, early_abort=False) == base


def test_setups_unknown_on_either_side_compare_as_before() -> None:
    a = fingerprint({"x": 1})
    assert setup_differences(a, None) == [] and setup_differences(None, a) == []
    assert setup_differences(a, fingerprint({"x": 1})) == []
    assert setup_differences(a, fingerprint({"x": 2, "y": 0})) == ["x", "y"]
