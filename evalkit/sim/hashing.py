"""Deterministic pseudo-randomness keyed by what is being decided, never by a global RNG.

Every decision the simulated model makes (is this question answered correctly, does this
generation collapse, where does it start to loop) is a pure function of the seed and of the
decision's key. Request order and restarts therefore never change an answer, which is what a
real greedy-decoding engine promises and what evalkit's paired statistics need; concurrency
changes one only where the key holds the batch a request ran in, on purpose
(``evalkit.sim.batching``: short prose, which the consistency eval probes).
"""

from __future__ import annotations

import hashlib

_SCALE = float(2**64)


def hash64(*parts: object) -> int:
    """64-bit hash of the parts, stable across processes (unlike ``hash()``)."""
    key = "\x1f".join(map(str, parts)).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def unit(*parts: object) -> float:
    """A number in [0, 1) that is uniform over keys: ``unit(...) < p`` happens with rate p."""
    return hash64(*parts) / _SCALE


def between(low: int, high: int, *parts: object) -> int:
    """An integer in [low, high], uniform over keys."""
    return low + hash64(*parts) % (high - low + 1)
