"""The simulated bug's signature, measured like evalkit measures it: GSM8K per cell and collapse rates.

Every cell of a small matrix is a simulator built from that cell's flags, in this process; the
whole test set goes through its HTTP app (batched prompts, to keep the module fast).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.helpers.sim import (
    complete_batch,
    extracted_answer,
    gsm8k_test,
    periodic_tail,
    reference_answer,
    sim_client,
)

pytestmark = pytest.mark.xdist_group("sim-behaviour")  # one worker measures `cells` (25 s), not each its own
ROWS = gsm8k_test()
FEW_SHOT = "Question: Tom has 3 apples and buys 2 more. How many apples does he have?\nAnswer: 3 + 2 = 5\n#### 5\n\n"
PROMPTS = [f"{FEW_SHOT}Question: {row['question']}\nAnswer:" for row in ROWS]
LONG_PROMPTS = [f"Write a long, detailed story about subject number {i}." for i in range(200)]
BUG = ("-tp", "8", "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE")
CELLS = {
    "tp_full": ("-tp", "8"),
    "tp_piecewise": ("-tp", "8", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off"),
    "dpa_full_off": ("-tp", "8", "--enable-dp-attention", "--sim-fix", "off"),
    "dpa_piecewise_off": (*BUG, "--sim-fix", "off"),
    "dpa_piecewise_on": (*BUG, "--sim-fix", "on"),
    "dpa_ep_piecewise_off": (*BUG, "--enable-expert-parallel", "--sim-fix", "off"),
    "dpa_eager_off": (*BUG, "--enforce-eager", "--sim-fix", "off"),
}
HEALTHY = [name for name in CELLS if name != "dpa_piecewise_off"]


@dataclass(frozen=True)
class Measured:
    """One cell's answers to the whole test set and to the long prompts."""

    right: list[bool]
    texts: list[str]
    loops: list[bool]
    long: list[dict[str, Any]]


def measure(args: tuple[str, ...]) -> Measured:
    with sim_client(*args) as client:
        answers = complete_batch(client, PROMPTS, max_tokens=256, stop=["Question:"])
        # vLLM's return_token_ids: the ids alone (logprobs would score every position, 20x the cost)
        long = complete_batch(client, LONG_PROMPTS, max_tokens=1024, return_token_ids=True)
    return Measured(
        right=[extracted_answer(c["text"]) == reference_answer(r) for c, r in zip(answers, ROWS, strict=True)],
        texts=[c["text"] for c in answers],
        loops=[periodic_tail(c["token_ids"]) is not None for c in long],
        long=long,
    )


@pytest.fixture(scope="module")
def cells() -> Iterator[dict[str, Measured]]:
    yield {name: measure(args) for name, args in CELLS.items()}


def share(flags: list[bool]) -> float:
    return sum(flags) / len(flags)


def test_every_answer_is_a_plausible_gsm8k_solution(cells: dict[str, Measured]) -> None:
    for result in cells.values():
        for text in result.texts:
            assert extracted_answer(text) is not None
            assert text.rstrip().splitlines()[-1].startswith("#### ")


def test_gsm8k_accuracy_per_cell(cells: dict[str, Measured]) -> None:
    for name in HEALTHY:
        assert share(cells[name].right) == pytest.approx(0.94, abs=0.01), name
    assert share(cells["dpa_piecewise_off"].right) == pytest.approx(0.87, abs=0.01)


def test_healthy_cells_differ_by_a_few_balanced_flips(cells: dict[str, Measured]) -> None:
    """Not batch-invariant, like real engines: another layout or graph mode flips 2-4.5% of the
    answers, both ways, and no paired test tells two healthy cells apart."""
    from evalkit.stats.tests import paired_comparison

    base = cells["tp_full"].right
    for name in HEALTHY[1:]:
        other = cells[name].right
        only_base = sum(a and not b for a, b in zip(base, other, strict=True))
        only_other = sum(b and not a for a, b in zip(base, other, strict=True))
        assert 0.02 * len(base) <= only_base + only_other <= 0.045 * len(base), name
        assert only_base > 0 and only_other > 0, name
        assert paired_comparison(other, base).p_value > 0.05, name
    buggy = cells["dpa_piecewise_off"].right
    fixed = cells["dpa_piecewise_on"].right
    lost = sum(f and not b for f, b in zip(fixed, buggy, strict=True))
    gained = sum(b and not f for f, b in zip(fixed, buggy, strict=True))
    assert lost > 80 and gained < 25


def test_wrong_answers_change_only_the_final_number(cells: dict[str, Measured]) -> None:
    fixed, buggy = cells["dpa_piecewise_on"], cells["dpa_piecewise_off"]
    changed = 0
    for good, bad, ok, broken in zip(fixed.texts, buggy.texts, fixed.right, buggy.right, strict=True):
        if ok and not broken:
            changed += 1
            good_lines, bad_lines = good.splitlines(), bad.splitlines()
            assert len(good_lines) == len(bad_lines)
            assert sum(a != b for a, b in zip(good_lines, bad_lines, strict=True)) in (1, 2)
    assert changed > 80


def test_collapse_rates_per_cell(cells: dict[str, Measured]) -> None:
    buggy = cells["dpa_piecewise_off"].loops
    assert 0.22 <= share(buggy) <= 0.40  # 0.30 collapse + 0.01 natural loops, n=200
    for name in HEALTHY:
        assert share(cells[name].loops) <= 0.05, name
    for choice in cells["dpa_piecewise_off"].long:
        looping = periodic_tail(choice["token_ids"]) is not None
        assert (choice["finish_reason"] == "length") is looping


def test_healthy_long_text_is_the_same_in_every_cell_and_not_repetitive(
    cells: dict[str, Measured],
) -> None:
    base = cells["tp_full"].long
    for name in HEALTHY[1:]:
        assert [c["text"] for c in cells[name].long] == [c["text"] for c in base]
    for choice in base:
        if choice["finish_reason"] == "stop":
            words = choice["text"].split()
            grams = [tuple(words[i : i + 4]) for i in range(len(words) - 3)]
            assert 1 - len(set(grams)) / len(grams) < 0.05


def test_collapse_starts_after_a_healthy_prefix(cells: dict[str, Measured]) -> None:
    healthy = cells["dpa_piecewise_on"].long
    buggy = cells["dpa_piecewise_off"].long
    for good, bad, looped in zip(healthy, buggy, cells["dpa_piecewise_off"].loops, strict=True):
        good_tokens, bad_tokens = good["token_ids"], bad["token_ids"]
        if looped and not periodic_tail(good_tokens):
            shared = next(i for i, (a, b) in enumerate(zip(good_tokens, bad_tokens, strict=False)) if a != b)
            assert 100 <= shared <= 600


def test_answers_are_deterministic_across_restarts(cells: dict[str, Measured]) -> None:
    again = measure(CELLS["dpa_piecewise_off"])
    assert again.texts == cells["dpa_piecewise_off"].texts
    assert again.loops == cells["dpa_piecewise_off"].loops
    other_seed = measure((*CELLS["dpa_piecewise_off"], "--sim-seed", "1"))
    assert other_seed.right != cells["dpa_piecewise_off"].right
