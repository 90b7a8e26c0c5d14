"""The stutter flags of a text: words written two or three times in place, or glued to their
own copy, and which pieces are words at all (see ``_garble``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import islice

import numpy as np

from ._chars import (
    ASCII_LETTER,
    ASCII_LOWER,
    BMP_ALPHABET,
    BMP_LOWER,
    BMP_WORD,
    WORD,
    codepoints,
    is_letter,
    join_pieces,
)
from ._settings import DetectorSettings


def lookahead(s: DetectorSettings) -> int:
    """Tokens that must follow a token before its stutter flag is final: a unit's flag reads at
    most up to token ``i + (stutter_copies + 1) * stutter_unit - 1`` (one more copy rules it
    out), and a glued word is at most ``2 * GLUED_HALF`` pieces long (each piece holds a letter)."""
    return max((s.stutter_copies + 1) * s.stutter_unit - 1, 2 * GLUED_HALF, (s.stutter_copies + 1) * (STUTTER_LINE + 1))


def _all_in_window(eq: np.ndarray, width: int) -> np.ndarray:
    """``out[i] = eq[i : i + width].all()`` for every full window (doubling, as run_starts)."""
    window, have = eq, 1
    while have < width:
        step = min(have, width - have)
        window = window[:-step] & window[step:]
        have += step
    return window


_WORD = WORD


def doubled_flags(x: np.ndarray, pieces: Sequence[str], max_unit: int, max_copies: int = 3,
                  joined: tuple[str, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Per token: covered by a unit of at most ``max_unit`` tokens written two to
    ``max_copies`` times in a row (not preceded or followed by one more copy) that holds a word
    (see ``_WORD``; read from ``pieces``, aligned with ``x``) and no line break, and is not
    itself a repeat of a shorter unit ("a a" twice is a run of "a"). More copies are a run, the
    loop rules' case ("ha" 2,000 times). Numbers and punctuation repeated are data
    ("1,000,000", the "0,0" of a sparse CSV row, "0x00, 0x00"), a doubled line is layout (two
    equal rows of a bitmap).

    A unit of p tokens written twice needs p tokens in a row equal to the token p before them,
    so unit lengths with fewer such tokens are skipped (in healthy text, usually most of them),
    and only the candidate units are read as text: one by one when they are few, else all at
    once from per-character tables of the text (``joined``: the text, its piece ends and code
    points, when the caller has them)."""
    n = len(x)
    flags = np.zeros(n, dtype=bool)
    if n < 2:
        return flags
    eqs = {p: x[p:] == x[:-p] for p in range(1, min(max_unit, n // 2) + 1)}  # eq[p][j]: x[j + p] == x[j]
    search = _WORD.search
    found: list[tuple[np.ndarray, int, int]] = []  # (unit starts, p, copies) of the candidates
    for p, eq in eqs.items():
        if np.count_nonzero(eq) < p:  # usual in healthy text
            continue
        square = _all_in_window(eq, p)  # square[i]: x[i : i + p] == x[i + p : i + 2p]
        if not square.any():
            continue
        fresh = square.copy()
        fresh[p:] &= ~square[:-p]  # no copy before it: the first copy of a run
        for d in range(1, p):  # the unit has a smaller period d dividing p: a run, not a word
            if p % d == 0:
                fresh &= ~_all_in_window(eqs[d], p - d)[: len(fresh)]
        start = fresh  # start[i]: a run of at least `copies` copies of the unit starts at i
        for copies in range(2, max_copies + 1):
            more = np.zeros(len(square), dtype=bool)  # more[i]: one more copy follows
            more[: max(0, len(square) - (copies - 1) * p)] = square[(copies - 1) * p :]
            found.append((np.flatnonzero(start & ~more), p, copies))
            start = start & more
            if not start.any():
                break
    if sum(len(f[0]) for f in found) <= _FEW:
        for starts, p, copies in found:
            for i in starts.tolist():
                unit = "".join(pieces[i : i + p])
                before = pieces[i - 1][-1:] if i else ""  # what the unit's first letters follow
                if "\n" not in unit and search(before + unit, len(before)):
                    flags[i : i + copies * p] = True
        return flags
    return _units_with_words(found, pieces, n, joined)


_FEW = 48
"""Candidate units up to which reading each as text in Python is cheaper than the tables."""
_LETTER = re.compile(r"[^\W\d_]")
_ALNUM = re.compile(r"[^\W_]")
_CJK = re.compile(_WORD.pattern.split("|", 1)[1])


@cache
def _bmp_tables() -> tuple[np.ndarray, ...]:
    """Per code point below U+10000: matches ``_LETTER``, ``_ALNUM``, ``_CJK`` (as ``re`` decides)."""
    bmp = "".join(map(chr, range(0x10000)))
    out = []
    for pattern in (_LETTER, _ALNUM, _CJK):
        table = np.zeros(0x10000, dtype=bool)
        table[[m.start() for m in pattern.finditer(bmp)]] = True
        out.append(table)
    return tuple(out)


def _units_with_words(found: list[tuple[np.ndarray, int, int]], pieces: Sequence[str], n: int,
                      joined: tuple[str, np.ndarray, np.ndarray] | None) -> np.ndarray:
    """:func:`doubled_flags`' test of every candidate at once: the unit of pieces ``[i, i + p)``
    holds no line break and a ``_WORD`` match, its lookbehind reading the last character of
    piece ``i - 1`` (none when that piece is empty), as ``_WORD.search(before + unit)`` does."""
    if joined is None:
        text, ends = join_pieces(pieces)
        points = codepoints(text)
    else:
        text, ends, points = joined
    letter_t, alnum_t, cjk_t = _bmp_tables()
    bmp = points if points.dtype == np.uint8 else np.minimum(points, 0xFFFF)
    letter, alnum, cjk = letter_t.take(bmp), alnum_t.take(bmp), cjk_t.take(bmp)
    for k in np.flatnonzero(points > 0xFFFF).tolist():  # beyond the BMP: no CJK of _WORD's ranges
        letter[k], alnum[k] = _LETTER.match(text[k]) is not None, _ALNUM.match(text[k]) is not None
    length = len(points)
    pair = np.zeros(length, dtype=bool)  # pair[k]: letters at k and k + 1
    pair[:-1] = letter[:-1] & letter[1:]
    two = pair.copy()  # two[k]: a _WORD match of two letters starts at k, read in the whole text
    two[1:] &= ~alnum[:-1]
    zero = np.zeros(1, dtype=np.int64)
    two_sum = _prefix_count(two)
    cjk_sum = _prefix_count(cjk) if cjk.any() else None
    lines = np.flatnonzero(points == 10)  # few: searched, not counted character by character
    starts = np.concatenate((zero, ends[:-1]))
    lows, highs = [zero], [zero]
    for first, p, copies in found:
        a, b = starts[first], ends[first + p - 1]
        has = two_sum[np.maximum(b - 1, a)] > two_sum[a]
        if cjk_sum is not None:
            has |= cjk_sum[b] > cjk_sum[a]
        # a piece before the unit that is empty: the lookbehind reads nothing
        empty_before = (first > 0) & (starts[np.maximum(first - 1, 0)] == a)
        has |= empty_before & (b - a >= 2) & pair[np.minimum(a, length - 1)]
        ok = has & (np.searchsorted(lines, a) == np.searchsorted(lines, b))
        lows.append(first[ok])
        highs.append(first[ok] + copies * p)
    return _cover(np.concatenate(lows), np.concatenate(highs), n)


GLUED_HALF = 16
"""Longest word, in letters, whose copy glued to it counts ("thethe", "capitalcapital")."""


@dataclass(frozen=True)
class Heads:
    """Per piece of a text: where its first character after a leading space is, and what."""

    first: np.ndarray
    """Offset of that character (the piece's end when it has none)."""
    spaced: np.ndarray
    """The piece starts with a space."""
    letter: np.ndarray
    """That character is a letter of an alphabet (a glued word is made of those)."""
    word: np.ndarray
    """That character is a letter of any script, CJK and Hangul included (outside the
    punctuation and symbol blocks): the piece holds a word. Spaces, digits, punctuation and
    line breaks do not; the stutter CUSUM counts words only."""
    lower: np.ndarray
    """That character is a lowercase letter."""
    continues: np.ndarray
    """A piece of letters, with no space, right after a piece that ends with a letter: the rest
    of a word (``split_pieces`` cuts a letter run every 16 letters; a tokenizer anywhere)."""


def piece_heads(ends: np.ndarray, points: np.ndarray) -> Heads:
    """:class:`Heads` of the pieces ending at ``ends`` in a text of code points ``points``."""
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1]
    last = max(len(points) - 1, 0)  # a piece may end the text: read inside it, masked below
    spaced = (points[np.minimum(starts, last)] == 32) & (starts < ends) if len(points) else starts < 0
    first = starts + spaced
    has = first < ends
    c = points[np.minimum(first, last)] if len(points) else np.zeros(len(ends), dtype=points.dtype)
    if points.dtype == np.uint8:
        letter = word = ASCII_LETTER.take(c) & has
        lower = ASCII_LOWER.take(c) & has
    else:
        bmp = np.minimum(c, 0xFFFF)  # beyond the BMP: no alphabet here, a word (CJK extensions)
        letter, word, lower = BMP_ALPHABET.take(bmp) & has, (BMP_WORD.take(bmp) | (c > 0xFFFF)) & has, BMP_LOWER.take(bmp) & has
    continues = np.zeros(len(ends), dtype=bool)
    if len(ends) > 1:
        continues[1:] = letter[1:] & ~spaced[1:] & letter[:-1] & is_letter(points[np.maximum(ends[:-1] - 1, 0)])
    return Heads(first, spaced, letter, word, lower, continues)


def glued_flags(heads: Heads, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Per token: part of a word of letters that is a shorter word glued to its own copy
    ("thethe", "satsat"; 2 to ``GLUED_HALF`` letters each, not themselves a repeat:
    "hahahaha" is a run). A word is a piece of letters with the pieces of letters that
    continue it without a space (``split_pieces`` cuts a letter run every 16 letters; a
    tokenizer's pieces cut words anywhere). ``points``: the :func:`codepoints` of the text.

    Healthy words of that shape exist ("bonbon", "murmur", "couscous", "haha"), far too rarely
    to move the stutter CUSUM. Only words whose first and middle letters agree are compared
    letter by letter."""
    n = len(ends)
    flags = np.zeros(n, dtype=bool)
    letter = heads.letter
    if not letter.any():
        return flags
    # Every piece of letters is in one word: its first piece does not continue one, its last
    # is not continued, so the i-th first and the i-th last piece bound the i-th word.
    continued = np.zeros(n, dtype=bool)
    continued[:-1] = heads.continues[1:]
    first_piece = np.flatnonzero(letter & ~heads.continues)
    last_piece = np.flatnonzero(letter & ~continued)
    lo, hi = heads.first[first_piece], ends[last_piece]
    size = hi - lo
    index = np.flatnonzero((size % 2 == 0) & (size >= 4) & (size <= 2 * GLUED_HALF))
    lo, hi = lo[index], hi[index]
    half = (hi - lo) // 2
    mid = lo + half
    after_digit = (lo > 0) & (points[np.maximum(lo - 1, 0)] - 0x30 < 10)  # the letters of "0xabab"
    keep = np.flatnonzero(~after_digit & (points[lo] == points[mid]) & (points[mid - 1] == points[hi - 1]))
    if not keep.size:
        return flags
    words = index[keep[_glued(points, lo[keep], half[keep])]]
    return _cover(first_piece[words], last_piece[words] + 1, n)


def _glued(points: np.ndarray, lo: np.ndarray, half: np.ndarray) -> np.ndarray:
    """Whether each word of ``2 * half`` characters from ``lo`` is its first half written twice,
    all letters (``str.isalpha``), the half not itself a repeat ("haha" of "hahahaha"). Read
    for all words at once, a row of ``GLUED_HALF`` characters per word: the first half, its
    last character repeated to fill the row."""
    at = lo[:, None] + np.minimum(np.arange(GLUED_HALF), half[:, None] - 1)
    unit = points.take(at)

    def has_period(d: np.ndarray) -> np.ndarray:  # word[i] == word[i + d] for every i < half
        return (points.take(at + d[:, None]) == unit).all(axis=1)

    alpha = _bmp_alpha().take(unit if unit.dtype == np.uint8 else np.minimum(unit, 0xFFFF))
    beyond = unit > 0xFFFF
    if beyond.any():  # beyond the BMP the table does not know
        alpha[beyond] = [chr(c).isalpha() for c in unit[beyond].tolist()]
    glued = has_period(half) & alpha.all(axis=1)
    # The half is a repeat when a period d < half divides it; then so does half / q, for a prime
    # q dividing half / d. For such a d, word[i] == word[i + d] for i < half says exactly that.
    for d in _REPEAT_PERIODS[half].T:
        glued &= ~(has_period(d) & (d > 0))
    return glued


def _repeat_periods() -> np.ndarray:
    """Row h: ``h // q`` for each prime q dividing h, then zeros (no period)."""
    periods = [[h // q for q in range(2, h + 1) if h % q == 0 and all(q % r for r in range(2, q))] for h in range(GLUED_HALF + 1)]
    table = np.zeros((GLUED_HALF + 1, max(map(len, periods))), dtype=np.int64)
    for h, row in enumerate(periods):
        table[h, : len(row)] = row
    return table


_REPEAT_PERIODS = _repeat_periods()


@cache
def _bmp_alpha() -> np.ndarray:
    """``str.isalpha`` of every code point below U+10000."""
    return np.array([chr(c).isalpha() for c in range(0x10000)], dtype=bool)


def _prefix_count(flags: np.ndarray) -> np.ndarray:
    """``counts[k]``: how many of ``flags`` before position k are set. Counted in int64: numpy's
    cumsum of bools converts every element on the way, which takes 2.5 times as long."""
    counts = np.zeros(len(flags) + 1, dtype=np.int64)
    np.cumsum(flags.astype(np.int64), out=counts[1:])
    return counts


def _cover(low: np.ndarray, high: np.ndarray, n: int) -> np.ndarray:
    """Whether each of ``n`` positions lies in one of the ranges ``[low, high)`` (indexed
    position by position: the cost is the positions covered, not ``n``)."""
    flags = np.zeros(n, dtype=bool)
    lengths = high - low
    flags[np.repeat(low - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))] = True
    return flags


def stutter_flags(x: np.ndarray, pieces: Sequence[str], s: DetectorSettings, ends: np.ndarray, text: str,
                  points: np.ndarray) -> tuple[np.ndarray, Heads, np.ndarray]:
    """Per token: a word written two to ``stutter_copies`` times in place (:func:`doubled_flags`)
    or glued to its copy (:func:`glued_flags`); and the pieces' :class:`Heads` (``word``: what
    the stutter CUSUM counts)."""
    heads = piece_heads(ends, points)
    words = content_ids(heads.first, ends, points)
    flags = doubled_flags(words, pieces, s.stutter_unit, s.stutter_copies, (text, ends, points)) | glued_flags(heads, ends, points)
    return flags, heads, words


STUTTER_LINE = 48
"""Longest line, in pieces, whose copies written in a row count as stutter (a stream must see
the copies after a line before its flags are final, so the lookahead grows with it)."""


def doubled_lines(ends: np.ndarray, points: np.ndarray, text: str, max_copies: int) -> np.ndarray:
    """Piece index where each line of at most ``STUTTER_LINE`` pieces, holding two words (see
    ``_WORD``), is written two to ``max_copies`` times in a row (not preceded or followed by
    one more copy) starts: a model writing a line again. One such line is a reasoning trace
    re-reading itself; many close together are stutter (``min_stutter_lines``). Four or more
    copies of a line are a loop's; a line without two words (a bitmap row "0b00011111," or
    "----XXXX----", a rule of dashes, "}", one word of a list) is layout."""
    n = len(ends)
    breaks = np.flatnonzero(points == 10)
    if len(breaks) < 1 or not n:
        return np.zeros(0, dtype=np.int64)
    starts = np.concatenate(([0], breaks + 1))
    stops = np.concatenate((breaks, [len(points)]))
    up, down = _powers(len(points) + 1)
    prefix = np.zeros(len(points) + 1, dtype=np.uint64)
    np.cumsum((points.astype(np.uint64) + np.uint64(1)) * up[: len(points)], out=prefix[1:])
    hashes = (prefix[stops] - prefix[starts]) * down[starts] ^ (stops - starts).astype(np.uint64)
    line = np.searchsorted(breaks, ends - 1, side="left")  # the line each piece ends in (a break ends its own)
    size = np.bincount(line, minlength=len(starts))
    same = np.zeros(len(starts), dtype=bool)  # same[k]: line k equals line k - 1
    same[1:] = hashes[1:] == hashes[:-1]
    run = np.cumsum(~same)  # lines in one run of copies share a number
    copies = np.bincount(run)[run]
    first = np.flatnonzero(~same & (copies >= 2) & (copies <= max_copies) & (size <= STUTTER_LINE) & (stops > starts))
    words = _WORD.finditer
    first = first[[next(islice(words(text, int(starts[k]), int(stops[k])), 1, 2), None) is not None
                   for k in first.tolist()]] if first.size else first
    return np.searchsorted(ends, starts[first], side="right").astype(np.int64)


_BASE = np.uint64(0x100000001B3)  # odd: invertible modulo 2**64
_POWERS: list[np.ndarray] = []


def _powers(length: int) -> tuple[np.ndarray, np.ndarray]:
    """``_BASE ** k`` and its inverse ``** -k`` modulo 2**64 for k < ``length`` (cached, grown
    by doubling)."""
    if not _POWERS or len(_POWERS[0]) < length:
        size = max(length, 2 * len(_POWERS[0]) if _POWERS else 4096)
        inverse = np.uint64(pow(int(_BASE), -1, 1 << 64))
        up = np.empty(size, dtype=np.uint64)
        down = np.empty(size, dtype=np.uint64)
        up[0] = down[0] = 1
        up[1:] = _BASE
        down[1:] = inverse
        np.multiply.accumulate(up, out=up)
        np.multiply.accumulate(down, out=down)
        _POWERS[:] = [up, down]
    return _POWERS[0], _POWERS[1]


def content_ids(first: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Per piece, an int64 hash of its characters after a leading space: "Symbols" and
    " Symbols" are the same word, so a word written again after a space ("Symbols Symbols",
    the copy a model writes of a line's first word) is a doubled unit like " from from".
    A polynomial hash from prefix sums, modulo 2**64: the same wherever the piece stands."""
    up, down = _powers(len(points) + 1)
    prefix = np.zeros(len(points) + 1, dtype=np.uint64)
    np.cumsum((points.astype(np.uint64) + np.uint64(1)) * up[: len(points)], out=prefix[1:])
    return ((prefix[ends] - prefix[first]) * down[first] ^ (ends - first).astype(np.uint64)).view(np.int64)


def cusum_steps(flags: np.ndarray, rate: float, words: np.ndarray | None = None) -> np.ndarray:
    """Per-mille CUSUM increments of ``flags`` with reference ``rate`` (integers: exact); with
    ``words``, a token that is neither flagged nor a word adds nothing."""
    k = round(rate * 1000)
    steps = np.full(len(flags), -k, dtype=np.int64) if words is None else words.astype(np.int64) * -k
    steps[flags] = 1000 - k
    return steps


def cusum_from(steps: np.ndarray, start: int) -> np.ndarray:
    """``S[i] = max(0, S[i-1] + steps[i])`` with ``S[-1] = start`` (>= 0), without a Python loop."""
    total = start + np.cumsum(steps)
    return total - np.minimum(np.minimum.accumulate(total), 0)
