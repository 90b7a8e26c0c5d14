"""Arithmetic word problems in GSM8K's format, generated from a seed: the task the answers model learns.

Each problem is one addition or subtraction of two two-digit numbers (a subtraction takes the
smaller from the larger), answered the way GSM8K writes its answers: working, then the
calculator mark and the last line, e.g.

    79 + 54: 9+4=13, 7+5+1=13, so 79 + 54 = <<79+54=133>>133
    #### 133

so lm-eval's own gsm8k task, its prompt (``Question: ...\\nAnswer:``) and both of its filters
(strict ``#### N``, flexible last number) score it unchanged. The working adds (or subtracts)
column by column, lowest digit first, carry (or borrow) written out: a 0.9 M-parameter model
learns each column's one-digit sum in a few hundred steps, and the answer is then the tens
column's result followed by the units' last digit, a copy. Without the working the carries
were learnt in a late jump or not at all, by the seed's luck, within a ten-minute CPU budget;
with it every seed tried learnt them (docs/real-answers.md has the sweep).

The test split is drawn first from its own seed, and no training problem repeats a test
problem's sum (``79 + 54``, whatever the names and items around it), so the score is on sums
never trained on: the model must add, not recall. Pure Python (no torch):
scripts/build_answers_model.py imports it under the vLLM venv's python, and anything else can
import it under evalkit's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

NAMES = ("Ava", "Ben", "Cara", "Dan", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jade", "Kai", "Lena", "Milo", "Nora",
         "Omar", "Pia", "Quin", "Rosa", "Sam", "Tess")
ITEMS = ("apples", "books", "coins", "stamps", "shells", "cards", "marbles", "pencils", "stickers", "cookies",
         "eggs", "buttons")


def working(a: int, op: str, b: int) -> str:
    """The column-by-column working of `a op b` (two-digit operands, a >= b for '-'), units first:
    ``9+4=13, 7+5+1=13`` for 79 + 54, ``13-8=5, 9-5-1=3`` for 93 - 58."""
    a1, a0, b1, b0 = divmod(a, 10) + divmod(b, 10)
    if op == "+":
        units = a0 + b0
        carry = units // 10
        return f"{a0}+{b0}={units}, {a1}+{b1}{'+1' if carry else ''}={a1 + b1 + carry}"
    borrow = int(a0 < b0)
    return f"{a0 + 10 * borrow}-{b0}={a0 + 10 * borrow - b0}, {a1}-{b1}{'-1' if borrow else ''}={a1 - b1 - borrow}"


def problem(rng: random.Random) -> dict[str, str]:
    """One problem. Questions are short and answers terse because training cost on two CPU cores
    is tokens times steps: the numbers are the task."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    if rng.randrange(2):
        q, op, r = f"{name} has {a} {item} and buys {b} more. How many {item} now?", "+", a + b
    else:
        a, b = max(a, b), min(a, b)
        q, op, r = f"{name} has {a} {item} and gives away {b}. How many are left?", "-", a - b
    return {"question": q, "answer": f"{a} {op} {b}: {working(a, op, b)}, so {a} {op} {b} = <<{a}{op}{b}={r}>>{r}\n"
                                     f"#### {r}"}


def sum_of(p: dict[str, str]) -> str:
    """The problem's arithmetic, ``79 + 54``: what splits keep apart."""
    return p["answer"].split(":", 1)[0]


def problems(seed: int, exclude: set[str] | None = None) -> Iterator[dict[str, str]]:
    """An endless seeded stream of problems, skipping any whose sum is in `exclude`."""
    rng = random.Random(seed)
    while True:
        p = problem(rng)
        if not exclude or sum_of(p) not in exclude:
            yield p


def take_unique(stream: Iterator[dict[str, str]], n: int) -> list[dict[str, str]]:
    """The first n problems of the stream with n different sums."""
    seen: set[str] = set()
    out = []
    for p in stream:
        if sum_of(p) not in seen:
            seen.add(sum_of(p))
            out.append(p)
            if len(out) == n:
                return out
    raise AssertionError("unreachable: the stream is endless")


def write_splits(directory: Path, seed: int, test_size: int, train_size: int) -> set[str]:
    """`test.jsonl` (sums the model never sees), `train.jsonl` (few-shot pool, disjoint from test)
    and `long_prompts.jsonl` (a prompt set for the collapse and consistency evals: unseen sums in
    lm-eval's prompt format). Returns the test and prompt-set sums, for the training stream to skip."""
    directory.mkdir(parents=True, exist_ok=True)
    test = take_unique(problems(seed + 1), test_size)
    held_out = {sum_of(p) for p in test}
    train = take_unique(problems(seed + 2, held_out), train_size)
    prompts = take_unique(problems(seed + 3, held_out | {sum_of(p) for p in train}), 64)
    for name, rows in (("test", test), ("train", train)):
        (directory / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (directory / "long_prompts.jsonl").write_text("".join(
        json.dumps({"id": f"arith-{i:03d}", "kind": "arithmetic", "prompt": f"Question: {p['question']}\nAnswer:"}) + "\n"
        for i, p in enumerate(prompts)), encoding="utf-8")
    return held_out | {sum_of(p) for p in prompts}
