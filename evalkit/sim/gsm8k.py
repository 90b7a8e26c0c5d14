"""The GSM8K test set as the simulated model knows it: find a question in a prompt, answer it.

The 1319 test questions ship with evalkit (``evalkit/data/gsm8k/test.jsonl``). A prompt is
matched to the LAST test question it contains, because every GSM8K prompt format ends with
the question being asked: lm-eval's few-shot ``Question: ...\\nAnswer:`` blocks, the CoT
``Q: ...\\nA:`` variant, a bare question in a chat turn, or any template that embeds the
question text. Few-shot examples come from the train split, which shares no question with
the test split, so they never match.

Answers are the reference solutions with the ``<<a*b=c>>`` calculator annotations removed
(they restate every intermediate result, which would make a changed final number look
inconsistent rather than plausibly wrong), ending in GSM8K's own ``#### N`` line, or in ``The
answer is N.`` where the prompt's worked examples end so (lm-eval's chain-of-thought tasks).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

from evalkit.sim.hashing import between

_ANNOTATION = re.compile(r"<<[^>]*>>")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_MARKERS = (("Question:", " Answer:"), ("Q:", " A:"))
"""Question / answer markers of lm-eval's gsm8k prompts, as they read after _normalise."""


@dataclass(frozen=True)
class Problem:
    """One test question and its clean reference solution."""

    index: int
    """Position in test.jsonl: the question's identity for every per-question decision."""
    question: str
    solution: str
    """Reasoning lines without calculator annotations, ending ``#### N``."""


def _normalise(text: str) -> str:
    """Collapse whitespace so prompt templates that re-space a question still match it."""
    return " ".join(text.split())


class TestSet:
    """The GSM8K test questions, indexed for fast lookup in prompts."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self._by_text = {_normalise(p.question): p for p in problems}

    @classmethod
    def load(cls) -> TestSet:
        """Read the test split shipped inside the evalkit package."""
        path = resources.files("evalkit") / "data" / "gsm8k" / "test.jsonl"
        problems = []
        with path.open("r", encoding="utf-8") as lines:
            for index, line in enumerate(lines):
                row = json.loads(line)
                solution = _ANNOTATION.sub("", row["answer"]).strip()
                problems.append(Problem(index, row["question"], solution))
        return cls(problems)

    def find(self, prompt: str) -> Problem | None:
        """The last test question asked in ``prompt``, or None for a non-GSM8K prompt."""
        text = _normalise(prompt)
        for marker, end in _MARKERS:
            start = text.rfind(marker)
            if start < 0:
                continue
            block = text[start + len(marker) :].rsplit(end, 1)[0]
            if found := self._by_text.get(block.strip()):
                return found
        if found := self._by_text.get(text):
            return found
        return self._scan(text)

    def _scan(self, text: str) -> Problem | None:
        """Slow path for unknown templates: the test question whose text ends last in ``text``."""
        best: Problem | None = None
        best_end = -1
        for question, problem in self._by_text.items():
            at = text.rfind(question)
            if at >= 0 and at + len(question) > best_end:
                best, best_end = problem, at + len(question)
        return best


def in_style(solution: str, prompt: str) -> str:
    """The solution ending the way the prompt's worked examples end, as a few-shot model imitates
    them: GSM8K's ``#### N``, or ``The answer is N.`` when the examples end so and never with
    ``####`` (lm-eval's chain-of-thought prompts, gsm8k_cot and its kin)."""
    if "The answer is" not in prompt or "####" in prompt:
        return solution
    body, answer = solution.rsplit("####", 1)
    return f"{body.rstrip()} The answer is {answer.strip()}."


def question_marker(prompt: str) -> str:
    """How the prompt introduces a question (``Question:`` or ``Q:``): a base model goes on to
    write the next question the same way, where lm-eval's stop strings cut it."""
    text = _normalise(prompt)
    return max(_MARKERS, key=lambda m: text.rfind(m[0] + " "))[0]


def final_answer(solution: str) -> str:
    """The number after ``####``, as written (it may contain thousands separators)."""
    return solution.rsplit("####", 1)[1].strip()


def wrong_solution(solution: str, *key: object) -> str:
    """The same solution with its final number changed, a plausible arithmetic slip.

    The result changes in the last reasoning line (its last occurrence of the answer) and
    after ``####``; the rest of the reasoning is untouched, as in a real near-miss.
    """
    answer = final_answer(solution)
    value = int(answer.replace(",", ""))
    wrong = _wrong_value(value, *key)
    body, _ = solution.rsplit("####", 1)
    lines = body.rstrip("\n").split("\n")
    if lines and lines[-1]:
        lines[-1] = _replace_last(lines[-1], value, wrong)
    return "\n".join(lines) + "\n#### " + _format_like(answer, wrong)


def _wrong_value(value: int, *key: object) -> int:
    step = (1, 2, 3, 5, 10, 20)[between(0, 5, "step", *key)]
    wrong = value - step if between(0, 1, "sign", *key) else value + step
    return wrong if wrong >= 0 or value < 0 else value + step


def _format_like(original: str, value: int) -> str:
    return f"{value:,}" if "," in original else str(value)


def _replace_last(line: str, value: int, wrong: int) -> str:
    for match in reversed(list(_NUMBER.finditer(line))):
        text = match.group()
        if text.replace(",", "").rstrip(".") == str(value):
            return line[: match.start()] + _format_like(text, wrong) + line[match.end() :]
    return line
