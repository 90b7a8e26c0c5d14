"""A server that answers GSM8K's requests badly is the cell's error in one line, in this process: the
cell evaluates a simulator a thread of this process serves with a fault injected (`--sim-fault`,
tests/helpers/served.py), so lm-eval's own client meets the HTTP 500s and the broken JSON over a
real port. Faults that kill, hang or stop an engine process are tests/test_faults.py's (`e2e`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.api.matrix import MatrixRequest, run_matrix
from evalkit.store import read_json
from tests.helpers.served import served_sim

CONFIG = """\
model: sim/faults
served_name: sim-model
engine: {profile: sim}
evals:
  gsm8k: {num_fewshot: 1, num_concurrent: 4}
  repetition: {enabled: false}
"""


@pytest.mark.parametrize(("fault", "rate", "words"), [
    ("http-500", "0.7", "gsm8k: lm-eval failed: ClientResponseError: 500, message='Internal Server Error'"),
    ("malformed-json", "0.5", "gsm8k: lm-eval failed: JSONDecodeError: "),
])
def test_gsm8k_on_a_server_that_keeps_failing_is_the_cell_s_error_after_lm_eval_s_retries(
        tmp_path: Path, fault: str, rate: str, words: str) -> None:
    config = tmp_path / "faults.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    with served_sim("--sim-fault", fault, "--sim-fault-rate", rate) as url:
        outcome = run_matrix(MatrixRequest(config_path=config, base_url=url, limit=20, run_id="f",
                                           results_dir=tmp_path / "results", history=False))
    assert [(c.id, c.status) for c in outcome.summary.cells] == [("external", "error")]
    error = read_json(outcome.run_path / "external" / "cell.json")["error"]
    assert error["message"].startswith(words) and "\n" not in error["message"], error
    assert error["type"] == "EvalError" and outcome.exit_code == 3
