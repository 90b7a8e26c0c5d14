"""Runs of a short unit merged into one symbol: the sequence the tail rules read.

A 2-D numeric layout repeats one token inside every row: ``0 0 0 1 0 0`` (one token),
``0, 0, 1, 0`` or ``0 & 1 & 0`` (two), ``0.0, 0.0`` or ``0x00, 0x00`` (four). Token by token,
such rows recur all the time (every row is mostly ``0 0 0 0``), so the periodic, near-periodic
and recurrence rules would read a sparse matrix as a loop. Read as cells, the rows differ:
the run of zeros before the ``1`` of an identity matrix is one longer in every row. So before
the tail rules look at a text, every run of a short unit becomes one symbol that holds the
unit and the run's length, and a row of a sparse matrix reads as a handful of symbols
("zeros x 4, one, zeros x 11, line break") that change from row to row. A true loop repeats
the same unit, runs and line breaks included, so it stays a loop of symbols; a loop of one
short unit ("0 0 0 0 ...", "yes, yes, yes, ...") is a single growing run, which the run rule
judges by its length in tokens.

The factorisation is greedy from left to right: at each position, the smallest unit of at most
``run_unit`` tokens that occurs ``run_copies`` times in a row from there starts a run, and the
run goes on as long as every token equals the one a unit before it; anything else is a plain
token. A plain token's symbol is its mixed value itself, so a text without runs is read
exactly as token by token. Hash collisions between a run's symbol and another symbol can only
add repetition.

For a stream, a decision at position i looks at most ``run_unit * run_copies`` tokens ahead,
and a run's symbol (its length) is known only once the run has ended. The symbols of a text
cut at n are those of the finished text, except the last few: plain tokens whose decision
could still change, and a run still going on at n, which is left out of the symbols (it is a
partial cell, whose length no earlier copy can match) and reported as ``open_run`` for the run
rule. ``final`` counts the leading symbols that no further token can change.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

_RUN_BASE = np.uint64(0xFF51AFD7ED558CCD)  # odd 64-bit constants (murmur3 finaliser)
_RUN_MIX = np.uint64(0xC4CEB9FE1A85EC53)


@dataclass(frozen=True)
class Symbols:
    """A token sequence with its runs merged; see the module docstring."""

    values: np.ndarray
    """uint64 symbol values: a plain token's mixed value, or the hash of a run's unit and length."""
    lengths: np.ndarray
    """int64 tokens covered by each symbol (1 for a plain token)."""
    units: np.ndarray
    """int64 unit length of each run symbol, 0 for a plain token."""
    open_run: tuple[int, int]
    """(tokens, unit) of the run still going on at the end of the text, left out of ``values``;
    (0, 0) when the text does not end inside a run."""
    final: int
    """Leading symbols that no further token can change."""
    final_tokens: int
    """Tokens covered by those symbols: where a stream resumes the factorisation."""
    longest_run: int
    """Tokens of the longest run, the open one included (0: no run)."""


def run_hash(x: np.ndarray, starts: np.ndarray, units: np.ndarray, lengths: np.ndarray, unit: int) -> np.ndarray:
    """Hash of each run's unit tokens and length (vectorised over the runs)."""
    h = np.zeros(len(starts), dtype=np.uint64)
    for j in range(unit):
        inside = units > j
        h = np.where(inside, h * _RUN_BASE + x[np.minimum(starts + j, len(x) - 1)], h)
    return (h ^ (lengths.astype(np.uint64) * _RUN_MIX)) * _RUN_BASE + units.astype(np.uint64)


_ONES = np.ones(4096, dtype=np.int64)
_ZEROS = np.zeros(4096, dtype=np.int64)
_ONES.flags.writeable = _ZEROS.flags.writeable = False  # shared: slices of them are read-only too


def run_starts(x: np.ndarray, unit: int, copies: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """For each unit p <= ``unit`` whose run can start somewhere in ``x``: ``(starts, same)``,
    ``starts[i]`` whether p occurs ``copies`` times in a row from token i, ``same[i]`` whether
    ``x[i + p] == x[i]``. A run needs ``(copies - 1) * p`` matches in a row; most units stop at
    a count of their matches (prose rarely repeats even a few tokens at a distance of six or
    less), the others find windows of matches by doubling."""
    found = {}
    m = len(x)
    for p in range(1, unit + 1):
        need = (copies - 1) * p
        if m - p < need:
            break
        same = x[p:] == x[:-p]
        if np.count_nonzero(same) < need:
            continue
        window, have = same, 1  # window[i]: same[i : i + have] all True
        while have < need:
            step = min(have, need - have)
            window = window[:-step] & window[step:]
            have += step
            if not np.count_nonzero(window):
                break
        else:
            found[p] = (window, same)
    return found


def factorize(x: np.ndarray, unit: int, copies: int) -> Symbols:
    """Symbols of ``x`` (mixed tokens) read as a text that ends here (see the module docstring)."""
    m = len(x)
    found = run_starts(x, unit, copies)
    if not found:
        final = max(0, m - copies * unit + 1)
        ones = _ONES[:m] if m <= len(_ONES) else np.ones(m, dtype=np.int64)
        zeros = _ZEROS[:m] if m <= len(_ZEROS) else np.zeros(m, dtype=np.int64)
        return Symbols(x, ones, zeros, (0, 0), final, final, 0)
    first_unit = np.zeros(m, dtype=np.int64)  # smallest unit whose run starts at i (0: none)
    for p in sorted(found, reverse=True):
        starts = found[p][0]
        first_unit[: len(starts)][starts] = p
    candidates = np.flatnonzero(first_unit)
    mismatches = {p: np.flatnonzero(~found[p][1]).tolist() for p in set(first_unit[candidates].tolist())}

    runs: list[tuple[int, int, int]] = []
    cand = candidates.tolist()
    units_at = first_unit[candidates].tolist()
    i = 0
    while i < len(cand):
        a, p = cand[i], units_at[i]
        ends = mismatches[p]
        k = bisect_left(ends, a)
        b = ends[k] + p if k < len(ends) else m
        runs.append((a, b, p))
        i = bisect_left(cand, b, i + 1)

    starts_, ends_, units_ = (np.array(column, dtype=np.int64) for column in zip(*runs))
    depth = np.zeros(m + 1, dtype=np.int64)
    depth[starts_ + 1] += 1
    depth[ends_] -= 1
    keep = np.cumsum(depth[:m]) == 0  # plain tokens and the first token of each run
    position = np.flatnonzero(keep)
    values = x[position]
    lengths = np.ones(len(position), dtype=np.int64)
    units = np.zeros(len(position), dtype=np.int64)
    at = np.searchsorted(position, starts_)
    values[at] = run_hash(x, starts_, units_, ends_ - starts_, unit)
    lengths[at] = ends_ - starts_
    units[at] = units_
    open_run = (0, 0)
    if ends_[-1] == m:  # a run still going on: not a symbol yet
        open_run = (m - int(starts_[-1]), int(units_[-1]))
        position, values, lengths, units = position[:-1], values[:-1], lengths[:-1], units[:-1]
    # A plain token is decided once every unit's copies after it are in; a closed run is final.
    decided = (units > 0) | (position + copies * unit <= m)
    final = int(np.argmin(decided)) if not decided.all() else len(decided)
    if final < len(position):
        final_tokens = int(position[final])
    else:
        final_tokens = int(starts_[-1]) if open_run[0] else m
    return Symbols(values, lengths, units, open_run, final, final_tokens, max(int(lengths[units > 0].max(initial=0)), open_run[0]))
