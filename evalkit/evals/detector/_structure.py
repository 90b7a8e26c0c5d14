"""Token soup read as missing order: adjacent pieces no more related than in a shuffle (issue 48).

The other soup rules look for marks soup often leaves (a U+FFFD, two alphabets touching, bare
words without punctuation, broken sentences). Soup made of real pieces of one script in random
order leaves none: a source file's tokens shuffled after its opening, a text's own pieces in
random order, pieces sampled from its unigram frequencies. What every language and every kind
of text has, and those lack, is order: which piece follows which is not independent of the
pieces. This module measures that, in any script and without a word list, on blocks of
``soup_block`` pieces (starting every half block):

* **pieces**: how many pairs of positions start the same three pieces in a row (``sum
  C(n_abc, 2)`` over the block's trigrams), against the same count in the block's pieces
  permuted by a fixed permutation (the same every time: the verdict is deterministic). Healthy
  text repeats its phrases ("one of the", ``self.x``, ``msgstr "``) far more than a shuffle of
  its pieces would, and a list alternates its line breaks with new words far less; soup matches
  its shuffle. The measure is ``|ln((O + 1) / (O_shuffled + 1))|``. Trigrams, not pairs:
  scripts split into few distinct pieces (a Tamil or Korean syllable each) repeat pairs by
  chance in a shuffle too (on the tuning half, pairs flagged UI strings in Kannada, Malayalam,
  Tamil and Telugu; with pairs and trigrams together nothing changed but the time, twice).
* **classes**: the mutual information (nats) between the classes of adjacent pieces (line
  break, space, digits, a word of an alphabet, a CJK or other character, punctuation; each
  with or without a leading space) minus that of the permuted block: healthy text puts a word
  after a space and punctuation after a word, soup does not.

A block is unordered when both fall below their reference (``soup_pair_order``,
``soup_class_order``) and at least ``soup_min_words`` of its pieces are words: numbers,
matrices, bitmaps and hex dumps have their order in their values and their layout, which
neither measure reads (counting to 500 is 500 distinct pieces whose shuffle looks the same to
them), and a quarter of its trigrams are distinct (a word repeated thousands of times is the
same shuffled). The rule ``unordered_pieces`` fires on ``min_unordered_blocks`` such
blocks. Each block's figure is final once its last piece has arrived, so a stream counts
blocks as they complete (:class:`OrderStream`) and its count equals the whole text's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._chars import codepoints, join_pieces
from ._settings import DetectorSettings
from ._stutter import Heads, piece_heads

_CLASSES = 11
_BMP_UPPER = np.array([chr(c).isupper() for c in range(0x3000)] + [False] * (0x10000 - 0x3000), dtype=bool)
_ENDS = np.zeros(0x10000, dtype=bool)
_ENDS[[ord(c) for c in ".!?\u3002\uff01\uff1f\u0964\u061f\u06d4"]] = True
"""Sentence ends written as a piece of their own: . ! ? and the CJK, Devanagari and Arabic ones."""
_PERMUTATIONS: dict[int, np.ndarray] = {}


def _permutation(size: int) -> np.ndarray:
    """The fixed permutation of a block of ``size`` pieces (seeded: the same in every process)."""
    if size not in _PERMUTATIONS:
        _PERMUTATIONS[size] = np.random.default_rng(48).permutation(size)
    return _PERMUTATIONS[size]


def piece_classes(heads: Heads, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Per piece, its class (0-10): line break; space; digits; a CJK, Hangul or other
    character without a space before it; a word of an alphabet without a space; a word after
    a space, lowercase or of a script without case, or capitalised; punctuation; a sentence
    end alone; digits and punctuation split by whether a space leads the piece."""
    n = len(ends)
    if not n:
        return np.zeros(0, dtype=np.int64)
    last = max(len(points) - 1, 0)
    first = points[np.minimum(heads.first, last)].astype(np.int64)
    empty = heads.first >= ends
    spaced = heads.spaced.astype(np.int64)
    # a word of another script with a space before it (Tamil, Khmer...) is a spaced word too;
    # CJK and Hangul pieces never hold a space
    bmp = np.minimum(first, 0xFFFF)
    word = np.where(heads.letter, 5 + spaced, 4 + 2 * spaced)
    word = np.where(heads.spaced & _BMP_UPPER.take(bmp), 9, word)
    single = ends - heads.first == 1
    out = np.where(heads.word, word, np.where(single & ~heads.spaced & _ENDS.take(bmp), 10, 7 + spaced))
    out = np.where((first >= 0x30) & (first <= 0x39), 2 + spaced, out)
    out = np.where(empty | (first == 32) | (first == 9), 1, out)
    out = np.where(points[np.maximum(ends - 1, 0)] == 10, 0, out)
    return out


def _pair_repeats(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``keys``: pairs of equal elements (``sum C(n_k, 2)`` over its values), and
    how many distinct values it holds."""
    ordered = np.sort(keys, axis=1)
    eq = ordered[:, 1:] == ordered[:, :-1]
    col = np.arange(eq.shape[1])
    broke = np.maximum.accumulate(np.where(eq, -1, col), axis=1)  # last position not equal to its left
    return np.where(eq, col - broke, 0).sum(axis=1), keys.shape[1] - np.count_nonzero(eq, axis=1)


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _ngrams(x: np.ndarray, n: int) -> np.ndarray:
    """Per row of ids ``x``: a hash of each n-gram (equal n-grams, equal hashes)."""
    keys = x[:, : x.shape[1] - n + 1].astype(np.uint64)
    for k in range(1, n):
        keys = keys * _MIX ^ x[:, k : x.shape[1] - n + 1 + k].astype(np.uint64)
    return keys


def _order(x: np.ndarray, shuffled: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per block: |ln((O + 1) / (O' + 1))|, O the pairs of positions holding the same n-gram
    of ``x``, O' the same of ``shuffled``; and the distinct n-grams of ``x`` (over a quarter of
    the block in any text with words in it; a word repeated thousands of times has one)."""
    repeats, distinct = _pair_repeats(_ngrams(x, n))
    return np.abs(np.log((repeats + 1) / (_pair_repeats(_ngrams(shuffled, n))[0] + 1))), distinct


def _class_information(c: np.ndarray) -> np.ndarray:
    """Per row of classes ``c``: the mutual information of adjacent classes, in nats."""
    rows, width = c.shape
    codes = (np.arange(rows)[:, None] * _CLASSES * _CLASSES + c[:, :-1] * _CLASSES + c[:, 1:]).ravel()
    joint = np.bincount(codes, minlength=rows * _CLASSES * _CLASSES).reshape(rows, _CLASSES, _CLASSES) / (width - 1)
    outer = joint.sum(axis=2)[:, :, None] * joint.sum(axis=1)[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(joint > 0, joint * np.log(joint / np.where(outer > 0, outer, 1)), 0.0)
    return terms.sum(axis=(1, 2))


def unordered_blocks(ids: np.ndarray, classes: np.ndarray, starts: np.ndarray, s: DetectorSettings) -> np.ndarray:
    """Which of the blocks of ``s.soup_block`` pieces at ``starts`` are unordered (see the
    module docstring); ``ids`` and ``classes`` per piece (equal pieces, equal ids)."""
    size = s.soup_block
    if not len(starts):
        return np.zeros(0, dtype=bool)
    at = starts[:, None] + np.arange(size)
    c = classes.take(at)
    perm = _permutation(size)
    information = _class_information(c) - _class_information(c[:, perm])
    words = np.count_nonzero(((c >= 4) & (c <= 6)) | (c == 9), axis=1) >= s.soup_min_words * size
    out = words & (information < s.soup_class_order)
    if out.any():  # the trigrams are sorted only where the classes leave it open (healthy text: rarely)
        open_ = np.flatnonzero(out)
        x = ids.take(at[open_])
        order, distinct = _order(x, x[:, perm], 3)
        out[open_] = (distinct >= size // 4) & (order < s.soup_pair_order)  # "ha ha ha": one trigram
    return out


def block_starts(n: int, s: DetectorSettings, first: int = 0) -> np.ndarray:
    """Starts of the complete blocks of a text of ``n`` pieces, from block number ``first``."""
    stride = s.soup_block // 2
    count = max(0, (n - s.soup_block) // stride + 1)
    return np.arange(first, count, dtype=np.int64) * stride


def measure_order(ids: np.ndarray, heads: Heads, ends: np.ndarray, points: np.ndarray, s: DetectorSettings) -> np.ndarray:
    """Piece index of the start of each unordered block of a whole text."""
    starts = block_starts(len(ids), s)
    if not len(starts):
        return starts
    return starts[unordered_blocks(ids, piece_classes(heads, ends, points), starts, s)]


class OrderStream:
    """The unordered blocks of a stream, each judged once its last piece has arrived."""

    def __init__(self, s: DetectorSettings) -> None:
        self._s = s
        self._next = 0  # number of the next block to judge
        self.found: list[int] = []

    def update(self, ids: np.ndarray, pieces: Sequence[str], n: int) -> None:
        """Judge the blocks that the first ``n`` pieces complete."""
        starts = block_starts(n, self._s, self._next)
        if not len(starts):
            return
        lo, hi = int(starts[0]), int(starts[-1]) + self._s.soup_block
        text, ends = join_pieces(pieces[lo:hi])
        points = codepoints(text)
        classes = piece_classes(piece_heads(ends, points), ends, points)
        found = unordered_blocks(ids[lo:hi], classes, starts - lo, self._s)
        self.found += starts[found].tolist()
        self._next += len(starts)
