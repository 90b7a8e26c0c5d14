"""The simulated model: what it answers, in which cell, and how the bug shows.

Every decision is a hash of (seed, what is decided, prompt identity, and the cell where the
cell matters), so answers never depend on request order or restarts, nor on concurrency except
for short prose, whose text may depend on the batch it ran in (``evalkit.sim.batching``).

GSM8K. Questions are ranked by a difficulty u(seed, question) shared by all cells, so healthy
cells agree on which questions are hard, like one model served several ways: the easiest
round(accuracy * 1319) are answered right. Real engines are not batch-invariant: another
parallel layout or graph mode (the cell's numerics path) flips a few greedy answers both ways.
So per (question, path) a right answer turns wrong with chance `noise`, and a wrong one right
with chance noise * accuracy / (1 - accuracy): balanced in expectation, so healthy cells score
around `accuracy` and two of them differ on ~3.8 x noise of the questions (about 3% by
default), with healthy deltas of a few tenths of a point both ways and p-values far from any
alpha. Asking the same question again on one server (GSM8K `repeats`) flips it the same way
with chance `run_noise` per repeat: run-to-run noise, so repeats give a non-zero noise floor. A
restarted server answers as the first time. The buggy cell further turns the lowest-hashed
round((accuracy - bug_accuracy) * 1319) of its right answers wrong. Wrong answers are the
reference solution with its final number changed; they are never collapsed.

Other prompts get healthy prose (``evalkit.sim.prose``) that ends with EOS after 60-100% of
``max_tokens``. Long generations (max_tokens >= 512) may loop: in every cell a share
``natural_loop_rate`` (decided per prompt, as greedy decoding of one model loops on the same
prompts) with a late onset and a period of 4-24 tokens; in the buggy cell additionally a
share ``collapse_rate`` (decided per prompt and cell) collapses after 150-600 healthy tokens
into one repeated token or a 2-8 token phrase, or, with ``collapse_kind`` (``--sim-collapse-kind``),
into stutter or token soup instead (``evalkit.sim.garble``). A loop or a garbled tail runs to
``max_tokens`` (finish_reason ``length``), the collapse signature. Short prose (below
LONG_GENERATION) may take another continuation part-way, depending on its batch: rarely in every
cell, often in the buggy cell's race (``evalkit.sim.batching``).

A decode worker of a PD pair generates from the KV state its prefill worker handed it
(``evalkit.sim.disagg``). Read right, that state is the prompt's own and every answer is a single
instance's. Read wrong (another TP's layout), a share of the prompt's tokens carry wrong state
(``KvDamage.share``): a right answer then goes wrong with chance share x (accuracy - bug_accuracy)
/ accuracy, and a long generation collapses with chance share x collapse_rate, each decided per
prompt and per state read, so a fully misread state breaks about as much as the buggy cell.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from evalkit.sim import garble, prose
from evalkit.sim.batching import Slot, variant
from evalkit.sim.config import Behaviour, Cell, CollapseKind
from evalkit.sim.disagg import KvDamage
from evalkit.sim.gsm8k import Problem, TestSet, in_style, question_marker, wrong_solution
from evalkit.sim.hashing import between, unit
from evalkit.sim.tokens import tokenize

FinishReason = Literal["stop", "length"]

LONG_GENERATION = 512
"""max_tokens from which a generation is long enough to loop."""

_NEXT_QUESTION = (
    "A baker", "Tom has", "Maria wants to", "A school bus", "There are", "John buys",
    "Sarah reads", "A farmer", "Lucy saves", "The library", "Kevin runs", "A store sells",
)
"""Openings of the next question a base model writes after answering (lm-eval stops there)."""


@dataclass(frozen=True)
class Prompt:
    """One prompt as the model sees it."""

    text: str
    """Where to look for a GSM8K question: the completion prompt, or the last user turn."""
    context: str
    """The whole input (the conversation for chat): the prompt's identity for prose."""
    chat: bool


@dataclass(frozen=True)
class Generation:
    """A finished generation, after ``max_tokens`` and stop strings were applied."""

    tokens: list[str]
    finish_reason: FinishReason
    stop_string: bool = False
    """Ended by one of the request's stop strings rather than by the model (ATOM tells them apart)."""


@dataclass(frozen=True)
class _Loop:
    onset: int
    period: int
    kind: CollapseKind = "loop"


class SimulatedModel:
    """Answers prompts the way the configured cell of the simulated engine would."""

    def __init__(self, behaviour: Behaviour, cell: Cell, testset: TestSet) -> None:
        self.behaviour = behaviour
        self.cell = cell
        self.testset = testset
        self._correct = _correctness(behaviour, cell, len(testset.problems))
        self._asked: dict[int, int] = {}
        """Times each question was asked on this server: the k-th ask may flip (run noise)."""
        self._lock = threading.Lock()

    def generate(self, prompt: Prompt, max_tokens: int, stop: tuple[str, ...], slot: Slot | None = None,
                 damage: KvDamage | None = None) -> Generation:
        """Generate up to ``max_tokens`` tokens, cut before the first stop string; `slot`: where
        in its step's batch it ran (None: alone); `damage`: how far the KV state a decode worker
        received is off the prompt's own (None: it prefilled itself)."""
        problem = self.testset.find(prompt.text)
        if problem is None and prompt.chat:
            problem = self.testset.find(prompt.context)
        if problem is not None:
            tokens = tokenize(self._answer(problem, prompt, damage))
            finish: FinishReason = "stop"
        else:
            tokens, finish = self._prose(prompt, max_tokens, slot, damage)
        if len(tokens) > max_tokens:
            tokens, finish = tokens[:max_tokens], "length"
        return _apply_stop(tokens, finish, stop)

    def is_correct(self, problem: Problem, ask: int = 1) -> bool:
        """Whether this cell answers ``problem`` right the ``ask``-th time (module docstring)."""
        correct = self._correct[problem.index]
        if ask > 1 and _flips(self.behaviour, self.behaviour.run_noise, correct, "run-noise", problem.index,
                              self.cell.key, ask):
            return not correct
        return correct

    def _answer(self, problem: Problem, prompt: Prompt, damage: KvDamage | None) -> str:
        seed = self.behaviour.seed
        with self._lock:
            ask = self._asked[problem.index] = self._asked.get(problem.index, 0) + 1
        if self.is_correct(problem, ask) and not _misread(self.behaviour, damage, problem.index):
            solution = problem.solution
        else:
            solution = wrong_solution(problem.solution, seed, problem.index, self.cell.key)
        solution = in_style(solution, prompt.context)
        if prompt.chat:
            return solution
        opening = _NEXT_QUESTION[between(0, len(_NEXT_QUESTION) - 1, seed, "next", problem.index)]
        return f" {solution}\n\n{question_marker(prompt.text)} {opening}"

    def _prose(self, prompt: Prompt, max_tokens: int, slot: Slot | None,
               damage: KvDamage | None = None) -> tuple[list[str], FinishReason]:
        seed, identity = self.behaviour.seed, prompt.context
        length = max(1, int(max_tokens * (0.6 + 0.4 * unit(seed, "length", identity))))
        loop = self._loop(identity, max_tokens, damage)
        needed = loop.onset if loop else length
        tokens, rest = _prose_tokens(seed, identity, needed)
        parted = variant(self.behaviour, self.cell, identity, slot) if max_tokens < LONG_GENERATION else None
        if parted is not None and parted[0] < needed:
            onset, key = parted
            tokens = tokens[:onset] + _prose_tokens(seed, f"{identity}\x1f{key}", needed - onset)[0]
        if prompt.chat and tokens:
            tokens[0] = tokens[0].lstrip()
        if loop is None:
            return tokens, "stop" if length < max_tokens else "length"
        if loop.kind == "stutter":  # the text goes on, every word twice
            for token in garble.stutter(t for piece in rest for t in tokenize(piece)):
                tokens.append(token)
                if len(tokens) >= max_tokens:
                    break
            return tokens, "length"
        if loop.kind != "loop":
            more = garble.soup(max_tokens - len(tokens), loop.kind == "latin-soup", seed, "soup", identity, self.cell.key)
            return tokens + more, "length"
        phrase = _loop_phrase(tokens, loop.period)
        while len(tokens) < max_tokens:
            tokens.extend(phrase)
        return tokens, "length"

    def _loop(self, identity: str, max_tokens: int, damage: KvDamage | None = None) -> _Loop | None:
        """Where (if at all) this generation falls into a loop; the earliest loop wins. A damaged
        KV state collapses a share ``collapse_rate`` x its damage, as the buggy cell does."""
        if max_tokens < LONG_GENERATION:
            return None
        seed, behaviour = self.behaviour.seed, self.behaviour
        loops = []
        if unit(seed, "natural-loop", identity) < behaviour.natural_loop_rate:
            onset = between(max_tokens // 4, max_tokens * 11 // 20, seed, "natural-onset", identity)
            loops.append(_Loop(onset, between(4, 24, seed, "natural-period", identity)))
        cell = self.cell.key
        if self.cell.buggy and unit(seed, "collapse", identity, cell) < behaviour.collapse_rate:
            onset = between(150, min(600, max_tokens // 2), seed, "collapse-onset", identity, cell)
            single = unit(seed, "collapse-single", identity, cell) < 0.4
            period = 1 if single else between(2, 8, seed, "collapse-period", identity, cell)
            loops.append(_Loop(onset, period, behaviour.collapse_kind))
        if damage and unit(seed, "kv-collapse", identity, damage.key) < damage.share * behaviour.collapse_rate:
            onset = between(150, min(600, max_tokens // 2), seed, "kv-collapse-onset", identity, damage.key)
            period = between(1, 8, seed, "kv-collapse-period", identity, damage.key)
            loops.append(_Loop(onset, period, behaviour.collapse_kind))
        return min(loops, key=lambda loop: loop.onset) if loops else None


def _prose_tokens(seed: int, identity: str, count: int) -> tuple[list[str], Iterator[str]]:
    """The first `count` tokens of the prose for `identity` (whole pieces, each starting with
    whitespace, so a continuation appended at any token boundary tokenizes the same), and the
    pieces after those it drew from (a stutter goes on with the text where its healthy start stopped)."""
    tokens: list[str] = []
    pieces = prose.pieces(seed, identity)
    for piece in pieces:
        tokens.extend(tokenize(piece))
        if len(tokens) >= count:
            break
    return tokens[:count], pieces


def _flips(behaviour: Behaviour, rate: float, correct: bool, *what: object) -> bool:
    """Whether an answer flips, at `rate` for right answers and the balancing rate for wrong
    ones (expected right -> wrong equals expected wrong -> right at the model's accuracy)."""
    if not correct:
        rate = min(1.0, rate * behaviour.accuracy / max(1e-9, 1 - behaviour.accuracy))
    return unit(behaviour.seed, *what) < rate


def _misread(behaviour: Behaviour, damage: KvDamage | None, index: int) -> bool:
    """Whether a right answer goes wrong from a damaged KV state: at a share of 1, as often as the
    buggy cell turns right answers wrong ((accuracy - bug_accuracy) / accuracy), less with less."""
    if not damage:
        return False
    rate = max(0.0, behaviour.accuracy - behaviour.bug_accuracy) / max(1e-9, behaviour.accuracy)
    return unit(behaviour.seed, "kv-misread", index, damage.key) < damage.share * rate


def _correctness(behaviour: Behaviour, cell: Cell, size: int) -> list[bool]:
    """Right or wrong for every test question in ``cell``, the first time it is asked."""
    seed, key = behaviour.seed, cell.key

    def lowest(indices: list[int], count: int, *what: object) -> list[int]:
        return sorted(indices, key=lambda i: unit(seed, *what, i))[:count]

    by_difficulty = lowest(list(range(size)), size, "difficulty")
    correct = [False] * size
    for index in by_difficulty[: round(behaviour.accuracy * size)]:
        correct[index] = True
    correct = [not ok if _flips(behaviour, behaviour.noise, ok, "path-noise", i, cell.numerics) else ok
               for i, ok in enumerate(correct)]
    if cell.buggy:
        broken = max(0, round((behaviour.accuracy - behaviour.bug_accuracy) * size))
        for index in lowest([i for i in range(size) if correct[i]], broken, "bug", key):
            correct[index] = False
    return correct


def _loop_phrase(tokens: list[str], period: int) -> list[str]:
    """The last ``period`` tokens, shifted back so the phrase starts at a word boundary.

    A phrase that starts with whitespace can be repeated without its tokens merging (``"7"``
    after ``"000"`` would re-tokenise as one token), so streamed and joined text agree.
    """
    for start in range(len(tokens) - period, max(-1, len(tokens) - period - 16), -1):
        if start >= 0 and tokens[start][:1].isspace():
            return tokens[start : start + period]
    return [" the"]


def _apply_stop(tokens: list[str], finish: FinishReason, stop: tuple[str, ...]) -> Generation:
    """Cut the text before the first occurrence of any stop string (which is not returned)."""
    if not stop:
        return Generation(tokens, finish)
    text = "".join(tokens)
    cut = min((at for at in (text.find(s) for s in stop if s) if at >= 0), default=-1)
    if cut < 0:
        return Generation(tokens, finish)
    return Generation(tokenize(text[:cut]), "stop", stop_string=True)
