"""A GSM8K question the engine never answered (an error or a timeout after every retry) is
counted apart from a wrong answer: no mark, `n_eff` below `n`, and past `max_unscorable` the
cell is an error rather than an accuracy drop. Against the simulator's injected HTTP 500s, served
over a real port (lm-eval's client needs one) by a thread of this process (tests/helpers/served.py),
and the session's default one."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.errors import EvalError
from evalkit.evals import gsm8k, lm_eval_adapter
from evalkit.evals.base import EvalContext, Server
from evalkit.evals.gsm8k import GSM8K, GSM8KSettings
from tests.helpers.served import served_sim
from tests.helpers.sim import SimServer

FAILING = ("--sim-fault", "http-500", "--sim-fault-rate", "0.1")


def run(tmp_path: Path, url: str, limit: int = 40, **settings: object) -> gsm8k.EvalResult:
    chosen = GSM8KSettings(**{"num_fewshot": 3, "max_gen_toks": 64, "max_retries": 1, **settings})  # type: ignore[arg-type]
    gsm8k.write_task_yaml(tmp_path / lm_eval_adapter.TASK_DIR, chosen)
    return gsm8k.run_gsm8k(chosen, EvalContext(Server(url, "sim-model"), tmp_path, tmp_path, limit=limit))


def test_an_unanswered_question_is_unscorable_not_wrong(tmp_path: Path) -> None:
    with served_sim(*FAILING) as url:
        result = run(tmp_path, url, max_unscorable=0.5)
    lost = [row for row in result.samples if row.get("unscorable")]
    scored = [row for row in result.samples if not row.get("unscorable")]
    assert lost and scored
    assert {row["unscorable"] for row in lost} == {"engine error"} and all("HTTP" in row["error"] or "500" in row["error"]
                                                                         for row in lost)
    assert all(row["flexible-extract.correct"] is None and row["strict-match.correct"] is None for row in lost)
    m = result.metrics
    assert (m["n"], m["n_eff"], m["unscorable"], m["unscorable_by"]) == (40, len(scored), len(lost),
                                                                         {"engine error": len(lost)})
    assert m["flexible"] == pytest.approx(sum(row["flexible-extract.correct"] for row in scored) / len(scored))
    flat = GSM8K().flat(m)
    assert flat["gsm8k.n_eff"] == len(scored) and flat["gsm8k.unscorable"] == len(lost)


def test_more_unscorable_questions_than_allowed_make_the_cell_an_error(tmp_path: Path) -> None:
    with served_sim(*FAILING) as url:
        with pytest.raises(EvalError, match=r"gsm8k: lm-eval failed after 1 of 40 requests failed for good "
                                            r"\(at most 1 may\)"):
            run(tmp_path, url, max_unscorable=0.04)
        with pytest.raises(EvalError, match=r"gsm8k: lm-eval failed: "):  # 0: lm-eval's own rule, any failure
            run(tmp_path, url, max_unscorable=0.0)


def test_answers_cut_by_the_token_limit_are_scored_unless_the_config_says_they_cannot_be(
    tmp_path: Path, shared_sim: SimServer
) -> None:
    url = shared_sim.url
    scored = run(tmp_path, url, limit=20, max_gen_toks=24)
    assert scored.metrics["cut_by_max_gen_toks"] > 0 and scored.metrics["unscorable"] == 0
    with pytest.raises(EvalError, match=r"gsm8k: \d+ of 20 questions unscorable \(\d+ cut by max_gen_toks\), "
                                        r"over evals.gsm8k.max_unscorable 0.02: a cell error, not an accuracy drop"):
        run(tmp_path, url, limit=20, max_gen_toks=24, cut_is_unscorable=True)
    assert (tmp_path / "gsm8k.unscorable.samples.jsonl").is_file()
