"""GSM8K run again on the same server (`evals.gsm8k.repeats`, evals/gsm8k_repeats.py), in this process:
one external cell on the buggy layout a thread of this process serves (tests/helpers/served.py).

Every run's accuracy is reported, the worst (which a `min` gates: an intermittent failure lowers
the worst run, not the first) and the spread, with each repeat's samples and the questions that
flip between runs (the noise floor). tests/test_matrix_e2e.py checks the same against the bug's
drop between two engine processes, in `e2e`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalkit.api.matrix import MatrixOutcome, MatrixRequest, run_matrix
from evalkit.store import read_json, read_jsonl
from tests.helpers.cli import evalkit_cli
from tests.helpers.served import served_sim

pytestmark = pytest.mark.xdist_group("repeats-inprocess")  # the module's run is made once, on one worker

QUESTIONS, REPEATS = 60, 3
CONFIG = f"""\
model: sim/rep
served_name: sim-model
engine: {{profile: sim}}
evals:
  gsm8k: {{num_fewshot: 3, num_concurrent: 32, repeats: {REPEATS}}}
  repetition: {{enabled: false}}
thresholds:
  - {{metric: gsm8k.flexible_worst, min: 0.9}}
"""


@pytest.fixture(scope="module")
def repeated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MatrixOutcome, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("repeats")
    (tmp / "rep.yaml").write_text(CONFIG, encoding="utf-8")
    with served_sim("--enable-dp-attention", "-tp", "8", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off",
                    "--sim-race-rate", "0", "--sim-run-noise", "0.02") as url:
        outcome = run_matrix(MatrixRequest(config_path=tmp / "rep.yaml", base_url=url, limit=QUESTIONS, run_id="rep",
                                           results_dir=tmp / "results", history=False))
    [cell] = outcome.summary.cells
    yield outcome, cell.model_dump()


def test_every_run_is_reported_with_the_worst_and_the_spread(repeated: tuple[MatrixOutcome, dict[str, Any]]) -> None:
    _, cell = repeated
    m = cell["metrics"]
    assert cell["status"] == "ok" and m["gsm8k.repeats"] == REPEATS
    every = m["gsm8k.flexible_repeats"]
    assert len(every) == REPEATS and every[0] == m["gsm8k.flexible"]  # the first run is the cell's score
    assert m["gsm8k.flexible_worst"] == min(every) and m["gsm8k.strict_worst"] == min(m["gsm8k.strict_repeats"])
    assert m["gsm8k.flexible_spread"] == max(every) - min(every)


def test_a_min_on_the_worst_run_gates_the_buggy_layout(repeated: tuple[MatrixOutcome, dict[str, Any]]) -> None:
    _, cell = repeated
    worst = next(c for c in cell["checks"] if c["rule"] == "gsm8k.flexible_worst min 0.9")
    assert worst["outcome"] == "FAIL" and cell["metrics"]["gsm8k.flexible_worst"] < 0.9


def test_each_repeat_keeps_its_samples_and_the_flips_between_runs_are_the_noise_floor(
        repeated: tuple[MatrixOutcome, dict[str, Any]]) -> None:
    outcome, _ = repeated
    folder = outcome.run_path / "external"
    record = read_json(folder / "cell.json")["metrics"]["gsm8k"]["repeats"]
    assert record["n"] == REPEATS and len(record["accuracy"]) == REPEATS
    runs = [list(read_jsonl(folder / "gsm8k.samples.jsonl")),
            *(list(read_jsonl(folder / f"gsm8k.repeat{i}.samples.jsonl")) for i in range(2, REPEATS + 1))]
    assert [len(r) for r in runs] == [QUESTIONS] * REPEATS
    marks = [{row["id"]: row["flexible-extract.correct"] for row in r} for r in runs]
    flipped = sorted(i for i in marks[0] if len({m[i] for m in marks}) > 1)
    assert flipped  # --sim-run-noise: a few answers change when asked again
    floor = record["noise_floor"]["flexible"]
    assert (floor["n_questions"], floor["n_repeats"]) == (QUESTIONS, REPEATS)
    assert sorted(floor["flipping"]) == flipped and floor["flip_rate"] == len(flipped) / QUESTIONS


def test_the_report_shows_the_worst_repeat_and_every_run(repeated: tuple[MatrixOutcome, dict[str, Any]], tmp_path: Path) -> None:
    outcome, cell = repeated
    table = evalkit_cli("report", "rep", "--format", "markdown", "--results-dir", str(outcome.run_path.parent)).stdout
    every = cell["metrics"]["gsm8k.flexible_repeats"]
    assert "| GSM8K worst repeat (spread: every run) |" in table
    assert (f"{min(every):.3f} of {REPEATS} (spread {(max(every) - min(every)) * 100:.1f} pts: "
            + " ".join(f"{v:.3f}" for v in every) + ")") in table
