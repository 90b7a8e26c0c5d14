"""`evals.lm_eval` tasks scored by lm-eval per question, against a simulator a thread of this process
serves over a real port (tests/helpers/served.py): one external cell, no engine started.

The same three tasks as tests/test_lm_eval_tasks.py (gsm8k_cot 8-shot over evalkit's GSM8K copy,
aime24 over a local file, mmlu_pro_law whose process_docs filters its data); what a pair of cells
compares (paired deltas, thresholds vs the baseline) needs two engines and stays there, in `e2e`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from evalkit.api.matrix import MatrixOutcome, MatrixRequest, run_matrix
from evalkit.store import read_json, read_jsonl
from tests.helpers.cli import evalkit_cli
from tests.helpers.served import served_sim
from tests.helpers.sim import gsm8k_test, reference_answer
from tests.test_lm_eval_tasks import AIME, FLEXIBLE, LIMIT, STRICT, mmlu_pro_row, write_config

pytestmark = pytest.mark.xdist_group("lm-eval-inprocess")  # the module's run is made once, on one worker


@pytest.fixture(scope="module")
def external(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MatrixOutcome, str]]:
    """The tasks' config run once against a healthy simulator: `--base-url`, `--limit 12`."""
    tmp_path = tmp_path_factory.mktemp("lm_eval_external")
    with served_sim("--sim-seed", "0", model="sim/toy") as url:
        outcome = run_matrix(MatrixRequest(config_path=write_config(tmp_path), base_url=url, limit=LIMIT,
                                           run_id="tasks", results_dir=tmp_path / "results", history=False))
    yield outcome, url


def rows(outcome: MatrixOutcome, task: str) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(outcome.run_path / "external" / "lm_eval.samples.jsonl") if r["task"] == task]


def test_each_task_is_scored_by_lm_eval_per_question_on_the_server_given(external: tuple[MatrixOutcome, str]) -> None:
    """Every question's response and marks as lm-eval's filters read them; the metrics are their means."""
    outcome, url = external
    [cell] = outcome.summary.cells
    assert (cell.id, cell.status) == ("external", "ok")
    assert read_json(outcome.run_path / "external" / "cell.json")["launch"]["base_url"] == url
    cot = rows(outcome, "gsm8k_cot")
    assert [r["id"] for r in cot] == [f"gsm8k_cot-{i}" for i in range(LIMIT)]
    field = STRICT.removeprefix("lm_eval.")
    for r in cot:  # lm-eval's strict filter: the number after "The answer is" equals the target
        said = re.search(r"The answer is (-?[0-9.,]+)\.", r["response"])
        assert r[field] == bool(said and said.group(1) == r["target"])
        assert "Q:" not in r["response"]  # the task's stop string cut the next question
    metrics = cell.metrics
    assert metrics["lm_eval.gsm8k_cot.n"] == LIMIT and metrics[FLEXIBLE] > 0.8  # a healthy server
    assert metrics[STRICT] == pytest.approx(sum(r[field] for r in cot) / LIMIT)
    assert [r["target"] for r in rows(outcome, "aime24")] == [reference_answer(row) for row in gsm8k_test()[:3]]
    assert metrics["lm_eval.aime24.n"] == 3 and AIME in metrics
    assert [r["target"] for r in rows(outcome, "mmlu_pro_law")] == [mmlu_pro_row(i)["answer"] for i in range(6) if i % 2]


def test_each_task_records_its_setup_and_the_run_one_fingerprint_of_them(external: tuple[MatrixOutcome, str]) -> None:
    outcome, _ = external
    raw = read_json(outcome.run_path / "external" / "cell.json")["metrics"]["lm_eval"]
    fields = raw["tasks"]["gsm8k_cot"]["setup"]["fields"]
    assert fields["task"] == "gsm8k_cot" and fields["num_fewshot"] == 8
    assert fields["generation_kwargs"]["until"] == ["Q:", "</s>", "<|im_end|>"]
    assert raw["setup"]["fields"]["aime24.data"] != fields["data"]  # the local file, hashed
    assert set(raw["setup"]["fields"]) >= {"gsm8k_cot.task", "aime24.task", "mmlu_pro_law.task"}


def test_the_report_of_the_stored_run_shows_the_task_metrics(external: tuple[MatrixOutcome, str]) -> None:
    outcome, _ = external
    results = str(outcome.run_path.parent)
    markdown = evalkit_cli("report", "tasks", "--format", "markdown", "--results-dir", results)
    assert markdown.returncode == 0 and "| gsm8k\\_cot exact\\_match.strict-match |" in markdown.stdout
    csv = evalkit_cli("report", "tasks", "--format", "csv", "--results-dir", results).stdout.splitlines()[0].split(",")
    assert {STRICT, f"{STRICT}_stderr", "lm_eval.aime24.n", "lm_eval.mmlu_pro_law.n"} <= set(csv)
    assert json.loads(evalkit_cli("report", "tasks", "--format", "json", "--results-dir", results).stdout)["cells"][0]["id"] == "external"
