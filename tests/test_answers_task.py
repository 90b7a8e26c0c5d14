"""The answers model's task (scripts/answers_task.py): right working, GSM8K's shape, honest splits.

The real-engine run scores the trained model on this task; these checks hold without torch or
an engine, so a change to the generator that writes a wrong sum or lets a test sum into
training fails here first.
"""

from __future__ import annotations

import json
import re
import sys
from itertools import islice
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import answers_task  # noqa: E402

STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")  # lm-eval's gsm8k strict-match regex (gsm8k.yaml)


def digits_of(working: str) -> int:
    """Read the working back as a reader would: the tens column's result, then the units' last digit."""
    units, tens = (int(step.rsplit("=", 1)[1]) for step in working.split(", "))
    return tens * 10 + units % 10


def test_the_working_adds_and_subtracts_every_pair_of_two_digit_numbers_right() -> None:
    for a in range(10, 100):
        for b in range(10, 100):
            assert digits_of(answers_task.working(a, "+", b)) == a + b, (a, b)
            if a >= b:
                assert digits_of(answers_task.working(a, "-", b)) == a - b, (a, b)


def test_the_working_writes_carries_and_borrows_out() -> None:
    assert answers_task.working(79, "+", 54) == "9+4=13, 7+5+1=13"
    assert answers_task.working(45, "+", 32) == "5+2=7, 4+3=7"
    assert answers_task.working(93, "-", 58) == "13-8=5, 9-5-1=3"


def test_every_answer_is_in_gsm8k_shape_and_right() -> None:
    for p in islice(answers_task.problems(7), 500):
        a, op, b = answers_task.sum_of(p).split()
        result = int(a) + int(b) if op == "+" else int(a) - int(b)
        first, last = p["answer"].split("\n")
        assert first.endswith(f"= <<{a}{op}{b}={result}>>{result}")
        assert STRICT.search(last)[1] == str(result)  # type: ignore[index]
        assert result >= 0
        assert f" {a} " in p["question"] and f" {b}" in p["question"]


def test_splits_keep_test_sums_out_of_training(tmp_path: Path) -> None:
    held_out = answers_task.write_splits(tmp_path, 11, 100, 300)
    test = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    prompts = [json.loads(line) for line in (tmp_path / "long_prompts.jsonl").read_text().splitlines()]
    test_sums = {answers_task.sum_of(p) for p in test}
    assert len(test) == len(test_sums) == 100
    assert not test_sums & {answers_task.sum_of(p) for p in train}
    assert len(prompts) == 64 and all(p["prompt"].startswith("Question: ") for p in prompts)
    assert test_sums <= held_out
    stream = answers_task.problems(15, held_out)
    assert not held_out & {answers_task.sum_of(p) for p in islice(stream, 5000)}
