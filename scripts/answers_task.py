"""Arithmetic word problems in GSM8K's format, generated from a seed: the task the answers model learns.

Each problem is one addition or subtraction of numbers of two or three digits (`two_step=True`:
two of them in a row), written the way GSM8K writes its answers (``a + b = <<a+b=c>>c``, last
line ``#### N``), so lm-eval's own
gsm8k task, its prompt (``Question: ...\\nAnswer:``) and both of its filters (strict ``#### N``,
flexible last number) score it unchanged. The test split is drawn first from its own seed and
no training problem repeats a test question, so the score is on questions never trained on.

Pure Python (no torch): scripts/build_answers_model.py imports it under the vLLM venv's python,
and anything else can import it under evalkit's.
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
PLACES = ("the shop", "the club", "the school", "the library", "the park")


def _pair(rng: random.Random) -> tuple[str, str]:
    name = rng.choice(NAMES)
    return name, rng.choice([n for n in NAMES if n != name])


def problem(rng: random.Random, two_step: bool = True) -> dict[str, str]:
    """One two-step problem: a start amount, then a gain and a loss in some order (results >= 0).

    Answers are terse (one equation a line, GSM8K's ``<<a+b=c>>c`` calculator marks, ``#### N``)
    because training cost on two shared CPU cores is tokens: the numbers are the task."""
    name, friend = _pair(rng)
    item = rng.choice(ITEMS)
    a = rng.randint(10, 99)
    if not two_step:
        return one_step(rng, name, friend, item)
    kind = rng.randrange(3)
    if kind == 0:  # gain, then loss
        b = rng.randint(10, 99)
        c = rng.randint(1, a + b)
        ops = (("+", b), ("-", c))
        q = f"{name} has {a} {item}, buys {b} more and gives {c} to {friend}. How many {item} does {name} have now?"
    elif kind == 1:  # loss, then gain
        b = rng.randint(1, a)
        c = rng.randint(10, 99)
        ops = (("-", b), ("+", c))
        q = f"{name} had {a} {item}, lost {b} and got {c} from {friend}. How many {item} does {name} have now?"
    else:  # three amounts together
        b = rng.randint(10, 99)
        c = rng.randint(10, 99)
        ops = (("+", b), ("+", c))
        q = f"{name} has {a} {item}, {friend} has {b} and {rng.choice(PLACES)} has {c}. How many {item} in all?"
    lines, x = [], a
    for op, y in ops:
        z = x + y if op == "+" else x - y
        lines.append(f"{x} {op} {y} = <<{x}{op}{y}={z}>>{z}")
        x = z
    return {"question": q, "answer": "\n".join(lines) + f"\n#### {x}"}


def one_step(rng: random.Random, name: str, friend: str, item: str) -> dict[str, str]:
    """One addition of two two-digit numbers, or one subtraction from a number up to 199."""
    if rng.randrange(2):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        q, op, r = f"{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?", "+", a + b
    else:
        a = rng.randint(20, 199)
        b = rng.randint(10, min(a, 99))
        q, op, r = f"{name} has {a} {item} and gives {b} to {friend}. How many {item} are left?", "-", a - b
    return {"question": q, "answer": f"{a} {op} {b} = <<{a}{op}{b}={r}>>{r}\n#### {r}"}


def problems(seed: int, exclude: set[str] | None = None, two_step: bool = True) -> Iterator[dict[str, str]]:
    """An endless seeded stream of problems, skipping any question in `exclude`."""
    rng = random.Random(seed)
    while True:
        p = problem(rng, two_step)
        if not exclude or p["question"] not in exclude:
            yield p


def take_unique(stream: Iterator[dict[str, str]], n: int) -> list[dict[str, str]]:
    seen: set[str] = set()
    out = []
    for p in stream:
        if p["question"] not in seen:
            seen.add(p["question"])
            out.append(p)
            if len(out) == n:
                return out
    raise AssertionError("unreachable: the stream is endless")


def write_splits(directory: Path, seed: int, test_size: int, train_size: int, two_step: bool = True) -> set[str]:
    """`test.jsonl` (questions the model never sees), `train.jsonl` (few-shot pool, disjoint from
    test) and `long_prompts.jsonl` (a prompt set for the collapse and consistency evals: unseen
    questions in lm-eval's prompt format). Returns the test questions."""
    directory.mkdir(parents=True, exist_ok=True)
    test = take_unique(problems(seed + 1, None, two_step), test_size)
    held_out = {p["question"] for p in test}
    train = take_unique(problems(seed + 2, held_out, two_step), train_size)
    prompts = take_unique(problems(seed + 3, held_out | {p["question"] for p in train}, two_step), 64)
    for name, rows in (("test", test), ("train", train)):
        (directory / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (directory / "long_prompts.jsonl").write_text("".join(
        json.dumps({"id": f"arith-{i:03d}", "kind": "arithmetic", "prompt": f"Question: {p['question']}\nAnswer:"}) + "\n"
        for i, p in enumerate(prompts)), encoding="utf-8")
    return held_out | {p["question"] for p in prompts}
