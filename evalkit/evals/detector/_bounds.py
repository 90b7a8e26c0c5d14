"""Cheap upper bounds of the detector's rule inputs: where no rule can hold, skip measuring.

Used by :class:`StreamingDetector` before each check of a stream and by :func:`is_collapsed`
before measuring a whole text. They read the symbols of ``_symbols`` (runs merged), as the
tail rules do.
"""

from __future__ import annotations

import math

import numpy as np

from . import _kernels as K
from ._settings import DetectorSettings


class RuleBounds:
    """Upper bounds of what the verdict rules of a cut generation measure, symbol by symbol.

    ``scale`` multiplies the token thresholds as :func:`fired_rules` does (the early-abort
    margin; 1.0 for the verdict itself). A natural end only raises thresholds, so the bounds
    hold for every finish reason.

    A check of the window (``measure``, ~150 us of numpy calls) costs the same for 64
    tokens as for 2,000, so checking a long healthy stream every 64 tokens costs more than
    reading it. Every tail rule needs many recurring n-grams near the end of the text, and the
    recurring flags of the new symbols are cheap to get, so before each check we ask whether
    any rule *could* hold, and skip the check when none can. The bounds use the flags over the
    whole history (an n-gram whose hash slot, the top 14 bits of its hash, was seen within
    ``recurrence_lookback`` symbols: one table of last positions, no sort of the look-back),
    which are >= the flags inside any window, and every rule is treated as at least as weak as
    it is:

    * periodic tail with ``L - p >= min_loop_tokens``: the n-grams ending in its last
      ``L - p - (ngram - 1)`` symbols recur at distance ``p`` -> that many last flags all set;
    * near-periodic tail over ``L >= min_near_loop_tokens`` compared symbols with at most
      ``(1 - min_match_rate) * L`` mismatches: each mismatch unsets at most ``ngram`` flags, so
      ``count(last L flags) >= (1 - ngram * (1 - rate)) * L - (ngram - 1)`` for some such L
      (a CUSUM of the flags gives the best L at once);
    * recurrent tail: the window's CUSUM is <= the CUSUM of the whole-history flags;
    * recurrent span anywhere in the window: one that did not hold at the previous check point
      (its window held all older symbols, with more history) must end among the symbols that
      were not final then, so the whole-history CUSUM must reach the threshold there;
    * run: one that did not reach ``max_run`` at the previous check point reaches into the
      tokens received since, and the caller passes the longest such run.

    A stream's last few symbols are not final yet (see ``_symbols``): the bounds keep the
    final ones and count ``pending`` more whose flags are taken as set, which only raises them.

    So a rule that first holds at a check point always passes :meth:`may_fire` there: the
    streaming check aborts at the same token as without it, and a text for which it is False
    at once is healthy (tests/test_detector.py checks both on every suite sample and on
    generated loops). Hash collisions, and two hashes sharing a slot, can only add flags.
    """

    _SLOT_BITS = 14

    def __init__(self, s: DetectorSettings, scale: float) -> None:
        ng = s.recurrence_ngram
        self._ng, self._lookback = ng, s.recurrence_lookback
        self._loop_flags = math.ceil(s.min_loop_tokens * scale) - (ng - 1)
        mismatch = 1000 - round(s.min_match_rate * 1000)  # per mille, as near_periodic_coverage
        self._near_rate = 1000 - ng * mismatch  # CUSUM reference for the near-periodic bound
        self._near_tokens = math.ceil(s.min_near_loop_tokens * scale)
        recur_rate = round(s.recurrence_rate * 1000)
        self._rates = np.array([[recur_rate], [self._near_rate]], dtype=np.int64)
        self._gain = 1000 - recur_rate
        self._tail_score = self._gain * s.min_recurrent_tokens * scale
        self._span_score = self._gain * s.min_recurrent_span_tokens * scale
        self._run = math.ceil(s.max_run * scale)
        self._done = 0  # final symbols whose flag is known
        self._hashes = np.zeros(1024, dtype=np.uint64)  # n-gram hash by the n-gram's last symbol
        self._count = np.zeros(1025, dtype=np.int64)  # _count[i]: flags set among the first i
        self._near = np.zeros(1024, dtype=np.int64)  # near-periodic-bound CUSUM at each symbol
        self._recur = 0  # recurrence CUSUM (whole-history flags) at the last final symbol
        self._unset = -1  # the last final symbol whose flag is not set (-1: none)
        self._powers = K.ngram_powers(ng)
        # Last symbol at which an n-gram of each hash slot ended: a flag is set when the slot
        # was seen within the look-back (two hashes sharing a slot can only add flags).
        self._seen = np.full(1 << self._SLOT_BITS, -(1 << 40), dtype=np.int64)
        self._start = np.zeros((2, 1), dtype=np.int64)
        self._steps = np.arange(1025, dtype=np.int64)  # 0, 1, 2, ...: grows with the largest batch
        self._rate_steps = self._rates * self._steps[1:]  # rate * (1, 2, 3, ...) per CUSUM row

    def may_fire(self, symbols: np.ndarray, final: int, pending: int, run: int) -> bool:
        """Take the final symbols ``[done, final)`` of ``symbols`` into the bounds; False when no
        abort rule can hold on a window that ends with them and ``pending`` symbols more, and
        ``run`` (the longest run reaching into the tokens received since the last call) is short."""
        m, n, ng = self._done, final, self._ng
        new_max = 0
        if n > m:
            if n > len(self._hashes) or n - m >= len(self._steps):
                self._grow(n)
            first = max(m, ng - 1)  # the first n-gram ends at symbol ng - 1
            if n > first:
                grams = np.ndarray((n - first, ng), dtype=np.uint64, buffer=symbols, offset=8 * (first - ng + 1), strides=(8, 8))
                np.matmul(grams, self._powers, out=self._hashes[first:n])
                flags = self._recurring(self._hashes[first:n], first)
                if first > m:
                    flags = np.concatenate((np.zeros(first - m, dtype=bool), flags))
            else:
                flags = np.zeros(n - m, dtype=bool)
            count = self._count[m + 1 : n + 1]
            np.add.accumulate(flags, dtype=np.int64, out=count)
            if count[-1] != n - m:  # some new flag is not set: remember the last one
                self._unset = n - 1 - int(flags[::-1].argmin())
            # Both CUSUMs from the running count, in one pass: 1000 * count - rate * steps from
            # the last values (row 0 the recurrence rule's, row 1 the near-periodic bound's).
            self._start[0, 0], self._start[1, 0] = self._recur, self._near[m - 1] if m else 0
            total = 1000 * count - self._rate_steps[:, : n - m]
            total += self._start
            scores = total - np.minimum(np.minimum.accumulate(total, axis=1), 0)
            count += self._count[m]
            new_max = int(np.maximum.reduce(scores[0]))
            self._recur = int(scores[0, -1])
            self._near[m:n] = scores[1]
            self._done = n
        end = self._recur + pending * self._gain  # the pending symbols taken as recurring
        return (
            run >= self._run
            or self._loop_flags <= pending
            or (n >= self._loop_flags - pending and self._count[n] - self._count[n - self._loop_flags + pending] == self._loop_flags - pending)
            or self._near_possible(n, pending)
            or end >= self._tail_score
            or max(new_max, end) >= self._span_score
        )

    def _recurring(self, hashes: np.ndarray, first: int) -> np.ndarray:
        """Flags of the n-grams ending at symbols ``first, first + 1, ...``: whether their hash
        slot was seen at most ``recurrence_lookback`` symbols before (earlier calls, or earlier
        in this batch: a stable sort puts a slot's n-grams side by side in order)."""
        end = self._steps[: len(hashes)] + first
        slots = (hashes >> np.uint64(64 - self._SLOT_BITS)).astype(np.intp)
        flags = self._seen[slots] >= end - self._lookback
        order = slots.argsort(kind="stable")
        ordered = slots[order]
        again = ordered[1:] == ordered[:-1]
        later = order[1:][again]
        flags[later[later - order[:-1][again] <= self._lookback]] = True
        last = np.ones(len(ordered), dtype=bool)
        last[:-1] = ~again
        self._seen[ordered[last]] = end[order[last]]
        return flags

    def quiet(self, unfinal: int) -> int:
        """Tokens that must arrive before any abort rule can hold, when :meth:`may_fire` was
        just False and ``unfinal`` tokens at the end are not covered by final symbols.

        Whatever the next tokens are, the window then ends with the final symbols taken so far
        and at most ``unfinal + k`` more after ``k`` more tokens (a symbol covers a token or
        more), their flags at most all set, each adding at most the CUSUM gain of a recurring
        n-gram; a new run lies in those tokens. So a rule needs k of at least: the missing
        part of ``loop_flags`` set flags in a row; the flags the near-periodic bound lacks over
        its last ``near_tokens`` symbols; the CUSUM the tail or span threshold lacks over the
        gain; ``max_run`` tokens; each minus ``unfinal``. A stream can skip every check before
        that without changing where it aborts.
        """
        n = self._done
        need = min(
            self._loop_flags - (n - 1 - self._unset),
            self._near_need(n),
            math.ceil((min(self._tail_score, self._span_score) - self._recur) / self._gain),
            self._run,
        )
        return max(1, need - unfinal)

    def _near_need(self, n: int) -> int:
        """Recurring symbols to come before the near-periodic bound can hold (see :meth:`quiet`)."""
        if self._near_rate <= 0:
            return 0
        length = self._near_tokens
        known = min(n, length)
        before = int(np.maximum.reduce(self._near[max(0, n - length - 1) : n])) if n else 0  # any extension further back
        missing = self._near_rate * length - 1000 * (self._ng - 1) - before
        return min(length, max(0, math.ceil(missing / 1000) - int(self._count[n] - self._count[n - known])))

    def _near_possible(self, n: int, pending: int) -> bool:
        """Whether the flags of some tail of >= near_tokens symbols (the last ``pending`` of
        them taken as set) reach the near-periodic bound."""
        if self._near_rate <= 0:
            return True  # the bound says nothing for such settings: always check
        length = self._near_tokens
        if length <= pending:
            return True  # the tail would be pending symbols only: nothing to bound it with
        if n + pending <= length:
            return False  # a near-periodic tail also needs its first unit before it
        known = length - pending  # final symbols among the last ``length``
        tail = 1000 * (int(self._count[n] - self._count[n - known]) + pending) - self._near_rate * length
        before = int(self._near[n - known - 1])  # best extension further back (>= 0)
        return tail + before >= -1000 * (self._ng - 1)

    def _grow(self, n: int) -> None:
        if n - self._done >= len(self._steps):
            self._steps = np.arange(2 * (n - self._done) + 1, dtype=np.int64)
            self._rate_steps = self._rates * self._steps[1:]
        if n <= len(self._hashes):
            return
        size = max(n, 2 * len(self._hashes))
        for name in ("_hashes", "_near"):
            old = getattr(self, name)
            grown = np.zeros(size, dtype=old.dtype)
            grown[: len(old)] = old
            setattr(self, name, grown)
        count = np.zeros(size + 1, dtype=np.int64)
        count[: len(self._count)] = self._count
        self._count = count
