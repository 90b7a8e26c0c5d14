"""Vectorised kernels of the detector: every per-token loop runs here, inside numpy.

Conventions: ``x`` is a token sequence mixed to well-spread uint64 values by :func:`mix`;
``rev`` is ``x[::-1]`` (index 0 is the last token), because every tail quantity is a prefix
quantity of the reversed sequence. Hashes are polynomials modulo 2**64 (numpy integer
arithmetic wraps silently); where a collision could change a reported number, the caller
verifies that number by direct comparison, so results are exact.
"""

from __future__ import annotations

import numpy as np

MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constants (golden ratio, FNV prime)
OFFSET = np.uint64(0xD6E8FEB86659FD93)
_BASE = np.uint64(0x100000001B3)
_NGRAM_BASE = np.uint64(0xC2B2AE3D27D4EB4F)

_DIRECT = 8  # tokens compared directly before the hashed binary search takes over

_powers_cache = np.ones(1, dtype=np.uint64)


def mix(tokens: np.ndarray) -> np.ndarray:
    """Token ids as uint64 values spread over the whole range (ids may be small or 63-bit)."""
    return tokens.astype(np.uint64) * MIX + OFFSET


def _powers(count: int) -> np.ndarray:
    """``_BASE ** i`` modulo 2**64 for i < count, grown geometrically and cached."""
    global _powers_cache
    cache = _powers_cache  # one read: another thread may replace the cache meanwhile
    if len(cache) < count:
        factors = np.full(max(count, 2 * len(cache), 4096), _BASE, dtype=np.uint64)
        factors[0] = 1
        cache = _powers_cache = np.cumprod(factors)
    return cache[:count]


def periodic_coverage(rev: np.ndarray, max_period: int) -> np.ndarray:
    """``cov[p - 1]``: length of the longest suffix with period ``p``, for ``p = 1..P``.

    ``P = min(max_period, len - 1)``. The suffix of length L has period p when every token
    equals the token p positions earlier, so ``cov(p) = p + LCP(rev, rev[p:])``: the Z-function
    of the reversed sequence at p. (The KMP prefix function of the reversed sequence gives the
    same information ordered by suffix length; we need it by period, for bounded periods only.)
    The first few tokens are compared directly (healthy text leaves no period standing after
    that); the survivors' LCPs are found by a binary search over prefix hashes, vectorised over
    all of them at once: O(n + P log n) numpy work at worst. Values are exact unless two different token strings share a
    64-bit hash, in which case they are too large; :func:`select_period` re-checks the one it
    returns.
    """
    m = len(rev)
    count = min(max_period, m - 1)
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    lcp = np.zeros(count, dtype=np.int64)
    p = np.arange(1, count + 1)
    for k in range(_DIRECT):  # direct comparison first: almost every period stops here
        p = p[p + k < m]  # the others matched up to the end: their LCP, k, is final
        p = p[rev[p + k] == rev[k]]
        lcp[p - 1] = k + 1
        if not p.size:
            return lcp + np.arange(1, count + 1)
    pw = _powers(m + 1)
    prefix = np.zeros(m + 1, dtype=np.uint64)
    np.cumsum(rev * pw[:m], out=prefix[1:])
    shift_hash = prefix[p]
    shift_power = pw[p]
    lo = np.full(p.size, _DIRECT, dtype=np.int64)
    hi = m - p
    while True:
        open_ = lo < hi
        if not open_.any():
            break
        mid = (lo + hi + 1) >> 1
        equal = prefix[mid] * shift_power == prefix[p + mid] - shift_hash
        lo = np.where(equal, mid, lo)
        hi = np.where(equal, hi, mid - 1)
    lcp[p - 1] = lo
    return lcp + np.arange(1, count + 1)


def exact_coverage(rev: np.ndarray, p: int) -> int:
    """``cov(p)`` by direct comparison (the check behind :func:`select_period`)."""
    differ = rev[p:] != rev[:-p]
    first = int(np.argmax(differ))
    return p + (first if differ[first] else len(differ))


def select_period(rev: np.ndarray, coverage: np.ndarray, min_repeats: float) -> tuple[int, int]:
    """The period whose unit repeats at least ``min_repeats`` times over the longest tail.

    Among p with ``cov(p) >= min_repeats * p``, the one with the largest coverage, the smallest
    p on ties (multiples of a period cover exactly as much, so this is the primitive unit).
    Returns ``(p, cov(p))`` verified exactly, or ``(0, 0)``.
    """
    coverage = coverage.copy()
    periods = np.arange(1, len(coverage) + 1)
    while True:
        ranked = np.where(coverage >= min_repeats * periods, coverage, -1)
        if ranked.size == 0 or ranked.max() < 0:
            return 0, 0
        i = int(np.argmax(ranked))
        exact = exact_coverage(rev, i + 1)
        if exact == coverage[i]:
            return i + 1, exact
        coverage[i] = exact  # a hash collision overstated it; retry with the true value


def near_periodic_coverage(rev: np.ndarray, p: int, match_rate: float) -> tuple[int, int]:
    """Longest tail that matches itself shifted by ``p`` in at least ``match_rate`` of places.

    Scores +(1 - rate) per match and -rate per mismatch going back from the end and takes
    the best-scoring length (a maximal-scoring prefix of the reversed sequence), so the tail
    found has a match rate >= ``match_rate`` and stops where the text stops repeating.
    Integer weights (per mille) keep the comparison exact. Returns ``(coverage, matches)``,
    coverage counting the first unit as ``cov(p)`` does; ``(0, 0)`` when nothing matches.
    """
    if not 0 < p < len(rev):
        return 0, 0
    differ = rev[p:] != rev[:-p]
    rate = round(match_rate * 1000)
    # Scored block by block, each twice the last: past a block the score rises by at most
    # (1000 - rate) per match left, and once that cannot beat the best so far, no later
    # length can (healthy text stops after the first block).
    left = len(differ) - int(np.count_nonzero(differ))  # matches not yet scored
    best, top, total, start, size = 0, -(1 << 62), 0, 0, _NEAR_BLOCK
    while start < len(differ) and total + (1000 - rate) * left > top:
        part = differ[start : start + size]
        score = total + np.cumsum(np.where(part, -rate, 1000 - rate))
        k = int(np.argmax(score))
        if score[k] > top:
            best, top = start + k, int(score[k])
        total = int(score[-1])
        left -= len(part) - int(np.count_nonzero(part))
        start, size = start + len(part), 2 * size
    if top < 0:
        return 0, 0
    length = best + 1
    return p + length, length - int(np.count_nonzero(differ[:length]))


_NEAR_BLOCK = 512
"""Comparisons :func:`near_periodic_coverage` scores first."""


def ngram_hashes(x: np.ndarray, n: int) -> np.ndarray:
    """Hash of every n-gram, ``h[j]`` for ``x[j:j + n]``; empty when the text is shorter."""
    count = len(x) - n + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    h = x[:count].copy()
    for k in range(1, n):
        h = h * _NGRAM_BASE + x[k : k + count]
    return h


def previous_distance(h: np.ndarray) -> np.ndarray:
    """``d[j] = j - j'`` for the last ``j' < j`` with ``h[j'] == h[j]``, 0 for a first occurrence.

    One sort of keys that pack the high hash bits above the index: equal hashes end up next to
    each other in index order without a (slower) stable argsort. Dropping the low bits of a
    64-bit hash leaves >= 32 bits for any sequence below 2**32 tokens.
    """
    m = len(h)
    d = np.zeros(m, dtype=np.int64)
    if m < 2:
        return d
    shift = np.uint64(max(1, (m - 1).bit_length()))
    keys = ((h >> shift) << shift) | np.arange(m, dtype=np.uint64)
    keys.view(np.int64).sort()  # numpy sorts int64 faster; equal hashes stay side by side in index order
    index = (keys & ((np.uint64(1) << shift) - np.uint64(1))).astype(np.int64)
    high = keys >> shift
    same = high[1:] == high[:-1]
    later = index[1:][same]
    d[later] = later - index[:-1][same]
    return d


def ngram_powers(n: int) -> np.ndarray:
    """``[B**(n-1), ..., B, 1]``: :func:`ngram_hashes` as a dot product with n consecutive tokens."""
    return np.array([pow(int(_NGRAM_BASE), n - 1 - k, 1 << 64) for k in range(n)], dtype=np.uint64)


def cusum(recurring: np.ndarray, rate: float) -> np.ndarray:
    """One-sided CUSUM of the recurring flags with reference ``rate``, in per-mille units.

    ``S[i] = max(0, S[i-1] + flag[i] - rate)`` without a Python loop: with ``X`` the running
    sum of the increments, ``S = X - min(0, running min of X)``. Integer increments keep
    comparisons between a window and the full text exact.
    """
    k = round(rate * 1000)
    steps = np.where(recurring, 1000 - k, -k)  # int64
    total = np.cumsum(steps)
    return total - np.minimum(np.minimum.accumulate(total), 0)


def last_zero_before(score: np.ndarray, end: int) -> int:
    """Start of the CUSUM excursion that contains ``end``: one past the last zero before it."""
    zeros = np.flatnonzero(score[:end] == 0)
    return int(zeros[-1]) + 1 if zeros.size else 0


def count_distinct(values: np.ndarray) -> int:
    """Number of distinct values (a sort and a count of changes; sorted as int64, which numpy
    sorts faster than uint64)."""
    if len(values) == 0:
        return 0
    ordered = np.sort(values.view(np.int64))
    return 1 + int(np.count_nonzero(ordered[1:] != ordered[:-1]))
