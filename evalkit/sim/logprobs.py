"""The simulated model's next-token distributions, and how each serving cell perturbs them.

Why: a divergence eval scores reference texts teacher-forced (``echo`` + ``logprobs``) in
every cell and compares each position's distribution with the baseline cell's: |delta
logprob| of the text token, top-1 agreement, KL from the top-k. That needs logprobs that
form a real distribution, that are the same in every cell up to numerics, and whose
numerics differ per cell the way kernels do, with the buggy cell far off.

Base distribution. Position i of a token sequence is keyed by (seed, its token, the
``WINDOW`` tokens before it), so a text scores the same wherever it appears and in every
cell. The key draws ``CANDIDATES`` tokens, the text token and alternatives with distinct
token ids (``COMMON`` English and arithmetic tokens, and the ``RECENT`` tokens before i, as
a model copies from its context), plus one lumped logit for the rest of the vocabulary, so
the top-k mass is always below 1. A share ``EASY_SHARE`` of positions is confident (top-1
gap 3-9 nats), the others are open (gap 0-2 nats, 5-40% of the mass in the tail). The text
token is the argmax at about 70% of positions (92% of easy ones, 45% of open ones), else a
runner-up (never below 20th: it is always a candidate), as real models are on natural
text; a generated token is the argmax always (greedy decoding chose it).

What the model knows. The simulated model was "trained" on the text evalkit ships (the GSM8K
train and test splits, whose sentences its prose is made of, and the shipped prompt and
reference-text sets): a teacher-forced token that never follows the token before it anywhere in
that text (its word bigrams, whitespace aside, plus any sentence opener after a
sentence end) is the 20th candidate, as unlikely as random vocabulary pieces are under a real
model (about -9 to -20 nats a token, against about -1 for its own prose). So its healthy prose
scores high and the same tokens shuffled, the buggy cell's soup, code or another language's text
score low, from the text alone: nothing asks whether a token is garbage. The divergence eval's
``generations`` and the repetition eval's model signal (evals/model_signal.py) measure it.

Numerics. Each cell adds Gaussian noise to every candidate logit, keyed by (seed,
``Cell.numerics``, position key): sigma ``Behaviour.logprob_noise`` (default 0.015 nats, like
bf16 kernels that reduce in another order) in healthy cells, ``Behaviour.logprob_bug_noise``
(default 0.4) in the buggy cell (ATOM PR #1596's registered all-gather), which also lets a
runner-up overtake the top at ``BUG_FLIP_RATE`` of positions. Cells with the same numerics
path (fix-on and fix-off twins outside PIECEWISE, as in ``evalkit.sim.model``) give the same
floats; the same cell and seed give byte-identical logprobs. At a generated position the
generated token is swapped back to the top if the noise moved it, since it was the argmax.
With the defaults, KL(baseline || cell) estimated from the top-5 has a p99 of about 4e-4 in
healthy cells and about 1.2 in the buggy cell, whose top-1 agrees at ~91% of positions.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
import zlib
from collections.abc import Sequence
from importlib import resources
from typing import NamedTuple

import numpy as np

from evalkit.sim.config import Behaviour, Cell
from evalkit.sim.hashing import hash64
from evalkit.sim.once import BuiltOnce
from evalkit.sim.tokens import token_id

CANDIDATES = 20
"""Tokens with an explicit logit per position: the most any request can see (vLLM's default
``--max-logprobs`` is 20)."""
WINDOW = 8
"""Tokens before a position that key its distribution."""
RECENT = 32
"""Tokens before a position that can be drawn as its alternatives."""
EASY_SHARE = 0.55
"""Share of positions where the model is confident."""
BUG_FLIP_RATE = 0.03
"""Share of positions where the buggy cell's argmax moves to a runner-up."""

COMMON: tuple[str, ...] = (
    " the", " a", " of", " to", " and", " in", " is", " that", " for", " it", " was", " on",
    " with", " as", " he", " she", " they", " be", " at", " by", " this", " had", " not",
    " are", " but", " from", " or", " have", " an", " which", " one", " you", " were", " her",
    " his", " all", " their", " there", " can", " has", " more", " will", " each", " so", " if",
    " two", " three", " four", " five", " ten", " $", " =", " +", " -", " *", " /", ",", ".",
    "\n", ":", " 1", " 2", " 3", " 4", " 5", " 6", " 8", " 10", " 12", " 20", " 50", " 100",
    " total", " many", " much", " how", " what", " per", " day", " every", " times", " left",
    " after", " then", " He", " She", " The", " There", " In", " If",
)
"""Alternatives every position can draw, besides the tokens just before it."""


class Scored(NamedTuple):
    """One position of a sequence as the model scored it (a tuple: a long request makes thousands)."""

    token: str
    logprob: float
    rank: int
    """The token's rank in the distribution, 1 for the argmax (vLLM's ``rank``)."""
    top: tuple[tuple[str, float], ...]
    """The most likely candidates with their logprobs, as many as asked for, most likely first."""


class Scorer:
    """Scores token sequences the way one serving cell's numerics would (module docstring).

    The numbers are drawn in numpy for all positions of a request at once, from a
    counter-based generator keyed per position (splitmix64 of key + counter), so a position's
    values depend on its key alone, never on the other positions of the request.
    """

    def __init__(self, behaviour: Behaviour, cell: Cell, *, damaged: bool = False) -> None:
        """``damaged``: the numbers of a decode worker whose KV state was read wrong
        (evalkit/sim/disagg.py), as far off as the buggy cell's."""
        self.seed = behaviour.seed
        self.numerics_key = hash64(behaviour.seed, "numerics", cell.numerics, *(("kv-damaged",) if damaged else ()))
        broken = cell.buggy or damaged
        self.sigma = behaviour.logprob_bug_noise if broken else behaviour.logprob_noise
        self.flip_rate = BUG_FLIP_RATE if broken else 0.0
        self._prefix = f"{behaviour.seed}\x1flogprobs\x1f"

    def score(self, tokens: Sequence[str], start: int, greedy_from: int, keep: int = CANDIDATES) -> list[Scored]:
        """Positions ``start`` to the end of ``tokens`` with their ``keep`` most likely candidates;
        those from ``greedy_from`` on were generated. A candidate's name and value do not depend
        on ``keep``, which only saves naming candidates nobody sees."""
        positions = range(start, len(tokens))
        if not positions:
            return []
        keys = np.array([self._key(tokens, i) for i in positions], dtype=np.uint64)
        greedy = np.array([i >= greedy_from for i in positions])
        unknown = ~greedy & ~known_pairs(tokens, start)
        draws = _uniforms(keys, _BASE_DRAWS if keep else _POOL)  # the pool's draws only name candidates
        logits, tail = _base_logits(draws, greedy, unknown)
        noisy = logits + self._noise(keys)
        if self.flip_rate:
            _flip(noisy, logits, _uniforms(keys ^ np.uint64(self.numerics_key ^ 1), 3), self.flip_rate)
        logits = noisy
        own_is_top = logits.argmax(axis=1) == 0
        swap = greedy & ~own_is_top
        if swap.any():
            rows, top = np.nonzero(swap)[0], logits[swap].argmax(axis=1)
            logits[rows, 0], logits[rows, top] = logits[rows, top], logits[rows, 0].copy()
        full = np.concatenate([logits, tail[:, None]], axis=1)
        peak = full.max(axis=1, keepdims=True)
        logprobs = logits - (peak + np.log(np.exp(full - peak).sum(axis=1, keepdims=True)))
        order = np.argsort(-logprobs, axis=1, kind="stable")
        ranks = (order == 0).argmax(axis=1) + 1
        pool_sizes = np.array([len(COMMON) + min(i, RECENT) for i in positions])[:, None]
        if not keep:  # no candidate is shown: the text token's own logprob and rank
            return [Scored(tokens[i], value, rank, ())
                    for i, value, rank in zip(positions, logprobs[:, 0].tolist(), ranks.tolist(), strict=True)]
        picks = (draws[:, _POOL:] * pool_sizes).astype(np.int64).tolist()
        shown, values, rank_list = order[:, :keep].tolist(), logprobs.tolist(), ranks.tolist()
        scored = []
        for row, i in enumerate(positions):
            slots = shown[row]
            names = _candidates(tokens[i], tokens[max(0, i - RECENT) : i], picks[row], max(slots) + 1)
            top = tuple((names[slot], values[row][slot]) for slot in slots)
            scored.append(Scored(tokens[i], values[row][0], rank_list[row], top))
        return scored

    def _key(self, tokens: Sequence[str], i: int) -> int:
        """Position ``i``'s key: ``hash64(seed, "logprobs", token, *the WINDOW tokens before it)``,
        its bytes joined here from a prefix made once (the hot loop of a long request)."""
        key = self._prefix + "\x1f".join((tokens[i], *tokens[max(0, i - WINDOW) : i]))
        return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")

    def _noise(self, keys: np.ndarray) -> np.ndarray:
        """This cell's numerics: Gaussian noise (Box-Muller) on every candidate's logit."""
        draws = _uniforms(keys ^ np.uint64(self.numerics_key), 2 * CANDIDATES)
        first, second = draws[:, :CANDIDATES], draws[:, CANDIDATES:]
        return self.sigma * np.sqrt(-2.0 * np.log1p(-first)) * np.cos(2.0 * np.pi * second)


def _flip(noisy: np.ndarray, base: np.ndarray, draws: np.ndarray, rate: float) -> None:
    """The bug's wrong argmaxes: at ``rate`` of the rows, a runner-up of the base distribution
    (rank 2-4) overtakes the noisy top by 0.1-1.5 nats (in place)."""
    rows = np.nonzero(draws[:, 0] < rate)[0]
    runner_up = np.argsort(-base[rows], axis=1, kind="stable")[np.arange(len(rows)), 1 + (draws[rows, 1] * 3).astype(int)]
    noisy[rows, runner_up] = noisy[rows].max(axis=1) + 0.1 + 1.4 * draws[rows, 2]


_GAPS = 1
"""Column layout of a position's base draws: easy, gaps, tail, rank (2), pool indices."""
_TAIL = _GAPS + CANDIDATES - 1
_RANK = _TAIL + 1
_POOL = _RANK + 2
_POOL_DRAWS = 64
_BASE_DRAWS = _POOL + _POOL_DRAWS
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _uniforms(keys: np.ndarray, count: int) -> np.ndarray:
    """``count`` uniforms in [0, 1) per key: splitmix64 of key + (j + 1) * golden ratio."""
    with np.errstate(over="ignore"):
        x = keys[:, None] + np.arange(1, count + 1, dtype=np.uint64)[None, :] * _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _base_logits(draws: np.ndarray, greedy: np.ndarray, unknown: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cell-independent logits, slot 0 the text token (the last candidate where the model
    never saw it after the token before it, read teacher-forced), and the tail's lumped logit."""
    easy = draws[:, 0] < EASY_SHARE
    gap = draws[:, _GAPS : _TAIL]
    first = np.where(easy, 3.0 + 6.0 * gap[:, 0], 2.0 * gap[:, 0])
    rest = np.where(easy[:, None], 0.3 - np.log1p(-gap[:, 1:]) / 2.0, 0.1 - np.log1p(-gap[:, 1:]) / 3.0)
    by_rank = -np.cumsum(np.concatenate([np.zeros((len(draws), 1)), first[:, None], rest], axis=1), axis=1)
    tail_draw = draws[:, _TAIL]
    tail = np.where(easy, -first - 1.0 - 2.0 * tail_draw, -3.5 + 3.0 * tail_draw)
    rank = np.where(greedy, 0, np.where(unknown, CANDIDATES - 1, _rank(draws[:, _RANK], draws[:, _RANK + 1], easy)))
    slots = np.arange(CANDIDATES)[None, :]
    # the text token (slot 0) takes rank r; alternatives fill the other ranks in order
    source = np.where(slots <= rank[:, None], slots - 1, slots)
    source[:, 0] = rank
    return np.take_along_axis(by_rank, source, axis=1), tail


def _rank(draw: np.ndarray, sub: np.ndarray, easy: np.ndarray) -> np.ndarray:
    """Where the text token stands in the base distribution (0: the argmax)."""
    easy_rank = np.where(draw < 0.92, 0, 1 + (sub**2 * 4).astype(int))
    open_rank = np.select(
        [draw < 0.45, draw < 0.70, draw < 0.82], [0, 1, 2], 3 + (sub**2 * (CANDIDATES - 3)).astype(int)
    )
    return np.where(easy, easy_rank, open_rank)


def _candidates(token: str, recent: Sequence[str], picks: list[int], count: int) -> list[str]:
    """The text token and ``count - 1`` alternatives, with distinct token ids (a response
    keys its entries by token, or by id with ``return_tokens_as_token_ids``). ``picks`` index
    ``COMMON`` then ``recent``; if they run out (a context of a few repeated tokens),
    ``COMMON`` fills in, in order."""
    seen = {_token_id(token)}
    chosen = [token]
    if count == 1:
        return chosen
    common = len(COMMON)
    drawn = (COMMON[pick] if pick < common else recent[pick - common] for pick in picks)
    for candidate in itertools.chain(drawn, COMMON):
        ident = _token_id(candidate)
        if ident not in seen:
            seen.add(ident)
            chosen.append(candidate)
            if len(chosen) == count:
                break
    return chosen


_token_id = functools.lru_cache(maxsize=1 << 16)(token_id)
"""Token ids, memoised: every position looks up about 22 of them."""


_WORD = re.compile(r"\s*(\w+|[^\w\s]+)")
"""A simulator token without its leading whitespace (evalkit.sim.tokens' split)."""
_CORPUS_SETS = ("long_generation_v1", "reference_texts_v1")
"""The shipped prompt and reference-text sets the model knows besides GSM8K."""


def _corpus() -> str:
    """Every text the simulated model was trained on, one per line."""
    texts = []
    for split in ("train", "test"):
        with (resources.files("evalkit") / "data" / "gsm8k" / f"{split}.jsonl").open("r", encoding="utf-8") as lines:
            for line in lines:
                row = json.loads(line)
                texts += [row["question"], row["answer"]]
    for name in _CORPUS_SETS:
        with (resources.files("evalkit.evals.prompts") / f"{name}.jsonl").open("r", encoding="utf-8") as lines:
            texts += [json.loads(line)["prompt"] for line in lines]
    return "\n".join(texts)


@functools.lru_cache(maxsize=1 << 16)
def _word_key(word: str) -> int:
    return zlib.crc32(word.strip().encode("utf-8"))


@BuiltOnce
def _known_keys() -> np.ndarray:
    """Sorted keys of every (word, next word) pair of the corpus, and of every sentence end
    followed by any word that opens a sentence there: the model's knowledge, built once per
    process on first use (about a second for 1.2 M tokens)."""
    words = _WORD.findall(_corpus())
    vocab: dict[str, int] = {}
    ids = np.fromiter((vocab.setdefault(w, len(vocab)) for w in words), dtype=np.int64, count=len(words))
    crcs = np.array([_word_key(w) for w in vocab], dtype=np.uint64)
    keys = crcs[ids]
    ends = np.array([_word_key(w) for w in vocab if w[-1] in ".?!" and not w[0].isalnum()], dtype=np.uint64)
    openers = np.unique(keys[1:][np.isin(keys[:-1], ends)])
    pairs = [(keys[:-1] << np.uint64(32)) | keys[1:], ((ends[:, None] << np.uint64(32)) | openers[None, :]).ravel()]
    return np.unique(np.concatenate(pairs))


def known_pairs(tokens: Sequence[str], start: int) -> np.ndarray:
    """Per position from ``start``: whether the model saw its token after the token before it
    (whitespace aside; a whitespace token or the first of a text is always known)."""
    before = max(0, start - 1)
    keys = np.array([_word_key(t) for t in tokens[before:]], dtype=np.uint64)
    pairs = (keys[:-1] << np.uint64(32)) | keys[1:]
    table = _known_keys()
    found = table[np.minimum(np.searchsorted(table, pairs), len(table) - 1)] == pairs
    known = np.concatenate([[True], found]) if start == 0 else found
    return known | np.array([not t.strip() for t in tokens[start:]], dtype=bool)
