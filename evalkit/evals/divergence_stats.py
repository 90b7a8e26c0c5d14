"""The divergence between two servers' teacher-forced logprobs of the same texts (pure functions).

Each scored text is a samples row of the divergence eval: `tokens` (the server's tokenization,
identities compared exactly), `logprobs` (the logprob of each text token given the ones before,
None at position 0) and `top` (per position the server's top-k {token: logprob}). Between a cell
and its reference, per position of every text both scored:

* ``|Δ logprob|``: |logprob_cell(text token) - logprob_ref(text token)|;
* top-1 agreement: whether both servers' most likely next token is the same one;
* KL(ref || cell), estimated from the two top-k lists, as a lower bound (`position_kl`).

and over all positions their mean, 99th percentile (linear interpolation) and maximum, plus the
worst positions with the text around them. Two servers that tokenized a text differently are not
compared at all: the positions would not be the same predictions (`first_difference`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from evalkit.errors import EvalError

REST_FLOOR = 1e-9
"""Probability mass below which the bucket outside the top-k is taken as empty: a server's top-k
logprobs may sum to 1 or a little more (rounding), where 1 - sum is noise, not mass."""
WORST = 5
"""Worst positions kept per comparison, with the text around them."""
BEFORE_CHARS, AFTER_CHARS = 80, 40
"""Text shown before and after a worst position."""


def position_kl(ref: Mapping[str, float], cell: Mapping[str, float]) -> float:
    """KL(ref || cell) at one position from the two top-k logprob dicts: a lower bound of the
    true KL.

    The vocabulary is coarsened to the tokens present in BOTH top-k lists, one bucket each, plus
    one "rest" bucket holding everything else (the tails outside either top-k, and a token in one
    list but not the other). Both distributions are known exactly on that partition: a shared
    token's probability is in both lists, and each side's rest mass is 1 minus its shared tokens'
    sum. The KL of the coarsened pair is never larger than the true KL (the data-processing
    inequality: merging outcomes cannot make two distributions more distinguishable), so a
    reported divergence is real, never an artefact of the estimate; a regression hidden entirely
    in the tail is under-reported, and a larger `top_k` tightens the bound.

    Rest masses under REST_FLOOR count as empty (the cell's is floored at it, so a reference
    with tail mass never divides by zero); a float sum below 0 is 0. Identical inputs give
    exactly 0. The shared tokens are summed in the reference's order, never a set's: a set's order
    changes with each process's string hashing, and so would the last bits of every sum (a report
    recomputed later must equal the stored one).
    """
    shared = [token for token in ref if token in cell]
    total = 0.0
    p_shared = q_shared = 0.0
    for token in shared:
        lp, lq = ref[token], cell[token]
        p = math.exp(lp)
        p_shared += p
        q_shared += math.exp(lq)
        total += p * (lp - lq)
    p_rest, q_rest = 1.0 - p_shared, max(REST_FLOOR, 1.0 - q_shared)
    if p_rest > REST_FLOOR:
        total += p_rest * math.log(p_rest / q_rest)
    return max(0.0, total)


def top1(top: Mapping[str, float]) -> str:
    """The most likely token of a top-k dict (ties: the larger token string, so both sides agree)."""
    return max(top.items(), key=lambda kv: (kv[1], kv[0]))[0]


def first_difference(a: Sequence[str], b: Sequence[str]) -> int | None:
    """The first position where two tokenizations differ (the shorter one's length when one is a
    prefix of the other); None when they are the same."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def mismatch(text_id: str, cell: Sequence[str], ref: Sequence[str], where: str = "the reference") -> str | None:
    """A one-line refusal when a text was tokenized differently on the two sides, else None."""
    at = first_difference(cell, ref)
    if at is None:
        return None
    here = repr(cell[at]) if at < len(cell) else "the end"
    there = repr(ref[at]) if at < len(ref) else "the end"
    return (f"text {text_id}: tokenized differently from token {at} on ({here} here, {there} in {where}; "
            f"{len(cell)} vs {len(ref)} tokens): positions would not be the same predictions")


def _context(row: Mapping[str, Any], at: int) -> dict[str, str]:
    pieces = row.get("pieces") or row["tokens"]
    return {"before": "".join(pieces[max(0, at - BEFORE_CHARS):at])[-BEFORE_CHARS:], "here": pieces[at],
            "after": "".join(pieces[at + 1:at + 1 + AFTER_CHARS])[:AFTER_CHARS]}


def _spread(values: np.ndarray) -> dict[str, float]:
    return {"mean": float(values.mean()), "p99": float(np.percentile(values, 99)), "max": float(values.max())}


def _worst(values: np.ndarray, where: list[tuple[Mapping[str, Any], int]]) -> list[dict[str, Any]]:
    """The WORST largest values (the first of equal ones first), each with its text around it."""
    order = np.argsort(-values, kind="stable")[:WORST]
    return [{"id": where[i][0]["id"], "at": where[i][1], "value": float(values[i]), **_context(*where[i])}
            for i in order if values[i] > 0]


def between(cell: Mapping[str, Mapping[str, Any]], ref: Mapping[str, Mapping[str, Any]],
            where: str = "the reference") -> dict[str, Any] | str | None:
    """The divergence of `cell`'s scored texts from `ref`'s (each: text id -> samples row), over the
    texts both scored (in the reference's order): a dict of the distributions and worst places, a
    one-line refusal naming the first text tokenized differently, or None when no text is shared."""
    kl: list[float] = []
    agree: list[bool] = []
    delta: list[float] = []
    kl_at: list[tuple[Mapping[str, Any], int]] = []
    delta_at: list[tuple[Mapping[str, Any], int]] = []
    shared = [text_id for text_id in ref if text_id in cell]
    if not shared:
        return None
    for text_id in shared:
        mine, theirs = cell[text_id], ref[text_id]
        if (refusal := mismatch(text_id, mine["tokens"], theirs["tokens"], where)) is not None:
            return refusal
        for at in range(1, len(mine["tokens"])):
            lq, lp = mine["logprobs"][at], theirs["logprobs"][at]
            if lq is not None and lp is not None:
                delta.append(abs(lq - lp))
                delta_at.append((mine, at))
            q_top, p_top = mine["top"][at], theirs["top"][at]
            if q_top and p_top:
                kl.append(position_kl(p_top, q_top))
                agree.append(top1(q_top) == top1(p_top))
                kl_at.append((mine, at))
    if not kl or not delta:
        return None
    kls, deltas = np.asarray(kl), np.asarray(delta)
    return {"texts": len(shared), "positions": len(kl), "kl": _spread(kls), "logprob_abs": _spread(deltas),
            "top1_agreement": float(np.mean(agree)), "worst_kl": _worst(kls, kl_at),
            "worst_logprob": _worst(deltas, delta_at)}


def changes(result: Mapping[str, Any]) -> dict[str, float]:
    """A comparison's headline values as changes from a server compared with itself (0 for the
    divergences, 1 for the agreement): what thresholds and noise floors read."""
    return {"kl_mean": result["kl"]["mean"], "kl_p99": result["kl"]["p99"],
            "logprob_abs_mean": result["logprob_abs"]["mean"], "top1_agreement": result["top1_agreement"] - 1.0}


def noise_floor(first: Mapping[str, Mapping[str, Any]], repeats: Sequence[Mapping[str, Mapping[str, Any]]],
                ) -> dict[str, Any]:
    """How far the same server moves from itself: each repeat compared with the first scoring, per
    headline value the largest |change|. A repeat that tokenized a text differently is an
    EvalError: a server must tokenize its own input the same way twice."""
    floors: dict[str, float] = {}
    for again in repeats:
        result = between(again, first, where="the first scoring")
        if isinstance(result, str):
            raise EvalError(f"divergence: {result}")
        if result is None:
            continue
        for name, change in changes(result).items():
            floors[name] = max(floors.get(name, 0.0), abs(change))
    return floors
