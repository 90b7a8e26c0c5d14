"""Incremental detection, so the caller can stop a collapsed stream long before max_tokens."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from . import _kernels as K
from ._analysis import Analysis, fired_rules, measure, analyze
from ._settings import DEFAULT_SETTINGS, DetectorSettings
from ._text import HELD_PIECES, piece_ids, split_pieces


class StreamingDetector:
    """Feed tokens as they arrive; ``feed`` turns True once the sample is clearly collapsed.

    Every ``check_every`` tokens the rules for a cut generation are evaluated on the last
    ``tail_window + recurrence_lookback`` tokens only, so a call costs O(chunk) amortised plus
    one bounded check per ``check_every`` tokens, however long the stream gets. ``finish``
    runs the whole-text :func:`analyze` once. A server that streams text without token ids
    is fed with :meth:`feed_text`.

    Why the verdict after an abort is the verdict of the run to max_tokens:

    1. The abort rule is the verdict rule for a cut generation, with every token threshold
       times ``abort_margin`` >= 1, evaluated on a window of the text received so far.
    2. Each rule input on the window is a lower bound of the same input on the whole text:
       less history can only hide repetition (the CUSUM starts later and sees fewer recurring
       n-grams, a periodic tail cannot reach past the window). The near-periodic candidates
       are the same periods in both, because they are read from the last ``tail_window``
       distances and the window keeps ``recurrence_lookback`` >= ``max_period`` tokens of
       history in front of them. For the exact period, the reported unit on the whole text
       copies at least as many tokens as the window's (Fine and Wilf's theorem; needs
       ``min_repeats`` >= 2). So ``analyze(tokens so far, finish_reason="aborted")`` is
       collapsed, and it is what :meth:`finish` returns.
    3. If the generation goes on repeating its loop until max_tokens, the periodic, near-
       periodic or recurrent tail only gets longer and every rule is monotone in that length,
       so the full run is collapsed too. ``recurrent_span`` and ``token_run`` hold whatever
       follows. The suites test this on every sample (tests/test_detector_suites.py).

    Most checks are skipped without changing when a stream is aborted: :class:`_RuleBounds`
    keeps upper bounds of the rule inputs up to date in O(new tokens) and runs the full check
    only where some rule could hold (healthy text: about one check in twenty).
    """

    def __init__(self, settings: DetectorSettings = DEFAULT_SETTINGS) -> None:
        self._settings = settings
        self._tokens = np.empty(1024, dtype=np.int64)
        self._n = 0
        self._pieces: list[str] | None = None
        self._pending_text = ""
        self._next_check = settings.check_every
        self._aborted_at: int | None = None
        self._window = settings.tail_window + settings.recurrence_lookback + settings.recurrence_ngram - 1
        self._bounds = _RuleBounds(settings)

    @property
    def n_tokens(self) -> int:
        return self._n

    @property
    def aborted_at(self) -> int | None:
        """Tokens received when ``feed`` first returned True (None: not aborted)."""
        return self._aborted_at

    def feed(self, token_ids: Sequence[int] | np.ndarray, pieces: Sequence[str] | None = None) -> bool:
        """Append the next tokens (and their strings, if known, for every chunk or for none).

        Returns True once the sample is collapsed by the early-abort rule; from then on the
        sample is decided and further tokens are ignored.
        """
        if self._aborted_at is not None:
            return True
        self._append(np.asarray(token_ids, dtype=np.int64).ravel(), pieces)
        if self._n >= self._next_check:
            self._next_check = self._n + self._settings.check_every
            if not self._bounds.may_fire(self._tokens, self._n):
                return False
            window = self._tokens[max(0, self._n - self._window) : self._n]
            if fired_rules(measure(window, self._settings), self._settings, natural_end=False, scale=self._settings.abort_margin):
                self._aborted_at = self._n
        return self._aborted_at is not None

    def feed_text(self, text: str) -> bool:
        """:meth:`feed` for a server that streams text but no token ids.

        The text is split as :func:`split_text` splits the whole text, whatever the chunks:
        the last pieces, which the next chunk could still change, wait for it (or for
        :meth:`finish`). The pieces become the evidence text.
        """
        if self._aborted_at is not None:
            return True
        if self._n == 0 and self._pieces is None:
            self._pieces = []  # text from the start: the evidence is text even if it stays empty
        self._pending_text += text
        pieces = split_pieces(self._pending_text)
        if len(pieces) <= HELD_PIECES:
            return False
        self._pending_text = "".join(pieces[-HELD_PIECES:])
        ready = pieces[:-HELD_PIECES]
        return self.feed(piece_ids(ready), ready)

    def finish(self, finish_reason: str | None) -> Analysis:
        """The final verdict on everything received. After an abort the finish reason is
        recorded as "aborted" whatever is passed: the server's reason then describes the
        cancellation, not the sample."""
        if self._pending_text and self._aborted_at is None:
            pieces = split_pieces(self._pending_text)
            self._append(piece_ids(pieces), pieces)
            self._pending_text = ""
        reason = "aborted" if self._aborted_at is not None else finish_reason
        return analyze(self._tokens[: self._n], finish_reason=reason, settings=self._settings, pieces=self._pieces)

    def _append(self, ids: np.ndarray, pieces: Sequence[str] | None) -> None:
        if pieces is not None and len(pieces) != len(ids):
            raise ValueError(f"{len(pieces)} pieces for {len(ids)} tokens")
        if self._n == 0 and pieces is not None:
            self._pieces = []
        if (pieces is not None) != (self._pieces is not None) and len(ids):
            raise ValueError("give pieces with every chunk or with none")
        end = self._n + len(ids)
        if end > len(self._tokens):
            grown = np.empty(max(end, 2 * len(self._tokens)), dtype=np.int64)
            grown[: self._n] = self._tokens[: self._n]
            self._tokens = grown
        self._tokens[self._n : end] = ids
        if pieces is not None and self._pieces is not None:
            self._pieces.extend(pieces)
        self._n = end


class _RuleBounds:
    """Upper bounds of what the early-abort rules measure, updated for each batch of tokens.

    A check of the window (:func:`measure`, ~150 us of numpy calls) costs the same for 64
    tokens as for 2,000, so checking a long healthy stream every 64 tokens costs more than
    reading it. Every rule needs many recurring n-grams near the end of the text, and the
    recurring flags of the new tokens are cheap to get, so before each check we ask whether
    any rule *could* hold, and skip the check when none can. The bounds use the flags over the
    whole history (n-gram seen within ``recurrence_lookback`` tokens), which are >= the flags
    inside any window, and every rule is treated as at least as weak as it is:

    * periodic tail with ``L - p >= min_loop_tokens``: the n-grams ending in its last
      ``L - p - (ngram - 1)`` tokens recur at distance ``p`` -> that many last flags all set;
    * near-periodic tail over ``L >= min_near_loop_tokens`` compared tokens with at most
      ``(1 - min_match_rate) * L`` mismatches: each mismatch unsets at most ``ngram`` flags, so
      ``count(last L flags) >= (1 - ngram * (1 - rate)) * L - (ngram - 1)`` for some such L
      (a CUSUM of the flags gives the best L at once);
    * recurrent tail: the window's CUSUM is <= the CUSUM of the whole-history flags;
    * recurrent span and token run anywhere in the window: one that did not hold at the
      previous check point (its window held all older tokens, with more history) must end
      among the new tokens, so the whole-history CUSUM or a run must reach the threshold there.

    So a rule that first holds at a check point always passes the gate there, and the abort
    happens at the same token as without the gate (tests/test_detector.py compares both on
    every suite sample and on generated loops). Hash collisions can only add flags.
    """

    def __init__(self, s: DetectorSettings) -> None:
        scale, ng = s.abort_margin, s.recurrence_ngram
        self._ng, self._lookback = ng, s.recurrence_lookback
        self._loop_flags = math.ceil(s.min_loop_tokens * scale) - (ng - 1)
        mismatch = 1000 - round(s.min_match_rate * 1000)  # per mille, as near_periodic_coverage
        self._near_rate = 1000 - ng * mismatch  # CUSUM reference for the near-periodic bound
        self._near_tokens = math.ceil(s.min_near_loop_tokens * scale)
        recur_rate = round(s.recurrence_rate * 1000)
        self._rates = np.array([[recur_rate], [self._near_rate]], dtype=np.int64)
        per_token = 1000 - recur_rate
        self._tail_score = per_token * s.min_recurrent_tokens * scale
        self._span_score = per_token * s.min_recurrent_span_tokens * scale
        self._run = math.ceil(s.max_run * scale)
        self._done = 0  # tokens whose flag is known
        self._hashes = np.zeros(1024, dtype=np.uint64)  # n-gram hash by the n-gram's last token
        self._count = np.zeros(1025, dtype=np.int64)  # _count[i]: flags set among the first i
        self._near = np.zeros(1024, dtype=np.int64)  # near-periodic-bound CUSUM at each token
        self._recur = 0  # recurrence CUSUM (whole-history flags) at the last token

    def may_fire(self, tokens: np.ndarray, n: int) -> bool:
        """Take tokens ``[done, n)`` into the bounds; False when no abort rule can hold at n."""
        m, ng = self._done, self._ng
        self._grow(n)
        flags = np.zeros(n - m, dtype=bool)
        first = max(m, ng - 1)  # the first n-gram ends at token ng - 1
        if n > first:
            self._hashes[first:n] = K.ngram_hashes(K.mix(tokens[first - ng + 1 : n]), ng)
            start = max(ng - 1, first - self._lookback)
            distance = K.previous_distance(self._hashes[start:n])[first - start :]
            flags[first - m :] = (distance > 0) & (distance <= self._lookback)
        self._count[m + 1 : n + 1] = self._count[m] + np.cumsum(flags)
        # Both CUSUMs in one pass: row 0 the recurrence rule's, row 1 the near-periodic bound's.
        start = np.array([[self._recur], [self._near[m - 1] if m else 0]], dtype=np.int64)
        scores = _cusum_from(start, flags, self._rates)
        self._recur = int(scores[0, -1])
        self._near[m:n] = scores[1]
        self._done = n
        return (
            self._loop_flags <= 0
            or (n >= self._loop_flags and self._count[n] - self._count[n - self._loop_flags] == self._loop_flags)
            or self._near_possible(n)
            or self._recur >= self._tail_score
            or int(scores[0].max()) >= self._span_score
            or self._run_possible(tokens, m, n)
        )

    def _run_possible(self, tokens: np.ndarray, m: int, n: int) -> bool:
        """Whether a run of max_run equal tokens ends among the new tokens ``[m, n)``."""
        if n < 2 or not (tokens[max(1, m) : n] == tokens[max(1, m) - 1 : n - 1]).any():
            return False  # no token repeats its predecessor: no run reaches into the new tokens
        return K.longest_run(tokens[max(0, m - self._run + 1) : n])[0] >= self._run

    def _near_possible(self, n: int) -> bool:
        """Whether the flags of some tail of >= near_tokens tokens reach the near-periodic bound."""
        if self._near_rate <= 0:
            return True  # the bound says nothing for such settings: always check
        length = self._near_tokens
        if n <= length:
            return False  # a near-periodic tail also needs its first unit before it
        tail = 1000 * int(self._count[n] - self._count[n - length]) - self._near_rate * length
        before = int(self._near[n - length - 1])  # best extension further back (>= 0)
        return tail + before >= -1000 * (self._ng - 1)

    def _grow(self, n: int) -> None:
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


def _cusum_from(start: np.ndarray, flags: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """Per row r: ``S[i] = max(0, S[i-1] + (1000 - rate if flag else -rate))`` from
    ``S[-1] = start[r] >= 0`` (the reflected-walk form of :func:`_kernels.cusum`)."""
    total = start + np.cumsum(np.where(flags, 1000 - rates, -rates), axis=1)
    return total - np.minimum(np.minimum.accumulate(total, axis=1), 0)
