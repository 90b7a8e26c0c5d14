"""`--limit N` asks a seeded subset that looks like the whole test set, the same in every cell
and run; the first N stay available by name."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evalkit.evals import gsm8k, lm_eval_adapter
from evalkit.evals.base import EvalContext, Server
from evalkit.evals.gsm8k import GSM8KSettings, data_dir, questions, solution_steps
from evalkit.evals.subsets import RULES, pick
from tests.helpers.sim import SimServer


def shares(indices: list[int], strata: tuple[int, ...]) -> Counter[int]:
    return Counter(strata[i] for i in indices)


def test_a_stratified_subset_keeps_each_strata_share_of_the_whole_set() -> None:
    steps = solution_steps(data_dir())
    whole = Counter(steps)
    for n in (50, 200, 700):
        chosen = shares(pick(steps, n, "stratified", 0), steps)
        assert sum(chosen.values()) == n
        for stratum, count in whole.items():
            assert abs(chosen[stratum] - n * count / len(steps)) < 1, (n, stratum)


@pytest.mark.parametrize("rule", RULES)
def test_a_smaller_subset_is_part_of_every_larger_one_so_two_limits_still_pair(rule: str) -> None:
    steps = solution_steps(data_dir())
    subsets = [set(pick(steps, n, rule, 0)) for n in (1, 30, 40, 200, 1319)]  # type: ignore[arg-type]
    assert all(small <= large for small, large in zip(subsets, subsets[1:]))


def test_the_first_questions_are_not_a_fair_sample_and_the_default_subset_is() -> None:
    steps = solution_steps(data_dir())
    two_steps = Counter(steps)[2] / len(steps)
    prefix = shares(list(range(200)), steps)[2] / 200
    default = shares(questions(GSM8KSettings(), 200) or [], steps)[2] / 200
    assert prefix - two_steps > 0.05  # 32% of the first 200 against 25% of all 1319
    assert abs(default - two_steps) < 0.005


@pytest.mark.parametrize("rule", RULES)
def test_a_subset_is_the_same_whenever_it_is_drawn_and_a_seed_changes_it(rule: str) -> None:
    steps = solution_steps(data_dir())
    chosen = pick(steps, 50, rule, 3)  # type: ignore[arg-type]
    assert chosen == pick(steps, 50, rule, 3) and chosen == sorted(set(chosen)) and len(chosen) == 50  # type: ignore[arg-type]
    if rule == "first":
        assert chosen == list(range(50))
    else:
        assert chosen != list(range(50)) and chosen != pick(steps, 50, rule, 4)  # type: ignore[arg-type]


def test_a_limit_covering_the_set_and_no_limit_ask_every_question_through_lm_eval() -> None:
    assert questions(GSM8KSettings(), None) is None and questions(GSM8KSettings(), 5000) is None
    assert questions(GSM8KSettings(subset="first"), 50) is None  # lm-eval's own --limit
    assert pick(solution_steps(data_dir()), 5000, "random", 0) == list(range(len(solution_steps(data_dir()))))


def test_a_limited_gsm8k_run_asks_the_subset_and_lm_eval_scores_it(tmp_path: Path, shared_sim: SimServer) -> None:
    settings = GSM8KSettings(num_fewshot=3, max_gen_toks=64)
    gsm8k.write_task_yaml(tmp_path / lm_eval_adapter.TASK_DIR, settings)
    result = gsm8k.run_gsm8k(settings, EvalContext(Server(shared_sim.url, "sim-model"), tmp_path, tmp_path, limit=12))
    assert [row["doc_id"] for row in result.samples] == questions(settings, 12)
    marks = [row["flexible-extract.correct"] for row in result.samples]
    assert result.metrics["n"] == 12 and result.metrics["flexible"] == pytest.approx(sum(marks) / 12)
    assert result.metrics["setup"]["fields"]["subset"] == {"rule": "stratified", "seed": 0}
