"""Word salad: real words of one language in random order (issue 36).

Nothing repeats and no alphabet changes, so neither the loop rules nor the other soup rules
see it. What the text alone still shows is that prose has syntax: words come in clauses
broken by punctuation, and a sentence that ends is followed by one that starts with a
capital. Salad breaks both:

* bare words one after another: a run of ``min_salad_words`` (48) words, each after one
  space, with no punctuation, digit, line break or word written twice in a row between them
  (the words of a word longer than a piece count once). Healthy text rarely goes 30 words
  without a comma or a full stop (at most 32 on the suites); a list of words the user asked
  for, written with spaces only, is the look-alike;
* words shuffled as written, with their punctuation: a full stop lands after a word and a
  lowercase word follows. ``min_salad_breaks`` (3) such breaks within ``salad_window`` (256)
  tokens make it salad (healthy text on the suites: at most 1). A sentence end counts only
  after two words, the last of four letters or more, and before a word, so "e.g. the",
  "i. the" (a numbered list), "etc. and" or "v1.2. the" do not; a longer abbreviation
  inside a sentence ("approx. the") does.

Scripts without case (Arabic, Hebrew, Georgian, the Indic scripts) have only the first
shape; CJK text, written without spaces, has neither. Salad in all lowercase prose written
without punctuation, or with its full stops and capitals in place, needs a language model.

Every mark of a piece reads at most the three pieces before it and the one after it, so a
stream keeps them up to date exactly (:class:`SaladStream`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._stutter import Heads

_SHORT = 4
"""A sentence end counts after a word of at least four letters (the piece holds its space):
most abbreviations are shorter ("etc.", "vs.", "cf.", "al.", "Dr.")."""
BEFORE = 3
"""Pieces before a piece that its marks read."""


@dataclass(frozen=True)
class SaladMarks:
    """Per piece of a text, what the word-salad rules count."""

    counted: np.ndarray
    """A word after one space, not the same piece as the one before: it lengthens a run."""
    breaker: np.ndarray
    """Anything else but the rest of a word (punctuation, digits, line breaks, a repeat): it ends a run."""
    breaks: np.ndarray
    """Piece index of each lowercase word right after a sentence end that follows two words
    (and is not the word before the end again: that is stutter)."""


def salad_marks(tokens: np.ndarray, heads: Heads, ends: np.ndarray, points: np.ndarray) -> SaladMarks:
    """:class:`SaladMarks` of pieces with ids ``tokens``, :class:`Heads` ``heads`` and end
    offsets ``ends`` in a text of code points ``points``."""
    n = len(tokens)
    spaced_word = heads.spaced & heads.letter
    repeat = np.zeros(n, dtype=bool)
    repeat[1:] = tokens[1:] == tokens[:-1]
    counted = spaced_word & ~repeat
    breaker = ~(spaced_word | heads.continues) | repeat
    breaks = np.zeros(0, dtype=np.int64)
    if n > BEFORE:
        last = points[ends[BEFORE - 1 : -1] - 1]  # the last character of pieces BEFORE - 1 .. n - 2
        one = ends[BEFORE - 1 : -1] - ends[BEFORE - 2 : -2] == 1
        stop = one & ((last == 0x2E) | (last == 0x21) | (last == 0x3F))  # ".", "!" or "?" alone
        # piece e (from BEFORE on): a lowercase word after "word word."
        hit = stop & spaced_word[1:-2] & spaced_word[:-3] & spaced_word[BEFORE:] & heads.lower[BEFORE:]
        hit &= tokens[BEFORE:] != tokens[1:-2]  # "years. years": a stutter's copy, not a new sentence
        hit &= ends[BEFORE - 2 : -2] - ends[BEFORE - 3 : -3] > _SHORT  # "etc. and", "vs. the": abbreviations
        breaks = np.flatnonzero(hit) + BEFORE
    return SaladMarks(counted, breaker, breaks)


def longest_run(marks: SaladMarks) -> tuple[int, int, int]:
    """(words, first piece, last piece) of the longest run of counted words."""
    if not marks.counted.any():
        return 0, 0, 0
    group = np.cumsum(marks.breaker.astype(np.int64))  # a cumsum of bools converts each one on the way: slower
    counts = np.bincount(group[marks.counted])
    best = int(np.argmax(counts))
    members = np.flatnonzero(marks.counted & (group == best))
    return int(counts[best]), int(members[0]), int(members[-1])


class SaladStream:
    """The longest run and the sentence breaks of a stream, kept up to date from the marks of
    the pieces that arrived since the last update (read with :data:`BEFORE` pieces before
    them): the open run is carried, so at every update they equal those of everything received."""

    def __init__(self) -> None:
        self.done = 0
        self.open = 0  # words in the run still open at the end of what was received
        self.peak = 0
        self.breaks: list[int] = []

    def update(self, marks: SaladMarks, lo: int, n: int, window: int) -> None:
        """Count pieces ``[done, n)`` from ``marks``, the :func:`salad_marks` of pieces ``[lo,
        n)`` (``lo <= done - BEFORE`` where there are so many); keep the breaks that can still
        share a ``window`` of tokens with later ones."""
        counted, breaker = marks.counted[self.done - lo :], marks.breaker[self.done - lo :]
        if breaker.any():
            first = int(np.argmax(breaker))
            group = np.cumsum(breaker[first:])
            counts = np.bincount(group[counted[first:]], minlength=int(group[-1]) + 1)
            self.peak = max(self.peak, self.open + int(np.count_nonzero(counted[:first])), int(counts.max()))
            self.open = int(counts[-1])
        else:
            self.open += int(np.count_nonzero(counted))
        self.peak = max(self.peak, self.open)
        new = (lo + marks.breaks[marks.breaks >= self.done - lo]).tolist()
        if new:
            self.breaks = [b for b in self.breaks if b > new[0] - window] + new
        self.done = n
