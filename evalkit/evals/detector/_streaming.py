"""Incremental detection, so the caller can stop a collapsed stream long before max_tokens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import _kernels as K
from ._analysis import Analysis, analyze, fired_rules, measure
from ._bounds import RuleBounds
from ._garble import GarbleStream
from ._settings import DEFAULT_SETTINGS, DetectorSettings
from ._symbols import factorize, run_hash
from ._text import HELD_PIECES, SplitText, piece_ids, split_pieces


class StreamingDetector:
    """Feed tokens as they arrive; ``feed`` turns True once the sample is clearly collapsed.

    Every ``check_every`` tokens the rules for a cut generation are evaluated on a window: the
    last ``tail_window + recurrence_lookback + recurrence_ngram - 1`` symbols of the text
    received so far (its runs merged, see ``_symbols``), read as a text that ends there, exactly
    as :func:`analyze` reads it, and the runs among them. So a call costs O(chunk) amortised
    plus one bounded check per ``check_every`` tokens, however long the stream gets. Symbols
    are found incrementally: those no later token can change are kept, the last few (at most
    ``run_unit * run_copies - 1`` tokens, or a run still going on) are found again at each
    check. ``finish`` runs the whole-text :func:`analyze` once. A server that streams text
    without token ids is fed with :meth:`feed_text`.

    Why the verdict after an abort is the verdict of the run to max_tokens:

    1. The abort rule is the verdict rule for a cut generation, with every token threshold
       times ``abort_margin`` >= 1, evaluated on a window of the text received so far.
    2. Each rule input on the window is a lower bound of the same input on the whole text:
       less history can only hide repetition (the CUSUM starts later and sees fewer recurring
       n-grams, a periodic tail cannot reach past the window). The near-periodic candidates
       are the same periods in both, because they are read from the last ``tail_window``
       distances and the window keeps ``recurrence_lookback`` >= ``max_period`` symbols of
       history in front of them. For the exact period, the reported unit on the whole text
       copies at least as many symbols as the window's (Fine and Wilf's theorem; needs
       ``min_repeats`` >= 2). A run in the window is a run of the whole text, as long. So
       ``analyze(tokens so far, finish_reason="aborted")`` is collapsed, and it is what
       :meth:`finish` returns.
    3. If the generation goes on repeating its loop until max_tokens, the periodic, near-
       periodic or recurrent tail or the run only gets longer and every rule is monotone in
       that length, so the full run is collapsed too. ``recurrent_span`` and ``token_run`` hold
       whatever follows. The suites test this on every sample (tests/test_detector_suites.py).
    4. Stutter and soup (when pieces or text are fed) are judged on everything received, by
       :class:`~._garble.GarbleStream` every ``UPDATE_EVERY`` tokens: its figures count only
       flags and events that no later token changes, and its rules are thresholds on a
       maximum or a count, so they hold on any continuation of the text too. A stream of ids
       with their text (``feed(ids, text=...)``) has them judged on the text's pieces, split as
       :meth:`feed_text` splits it: the same figures as for the same text from a text-only
       server, and :meth:`finish` is ``analyze(ids, text=...)``, which reads them the same way.

    Most checks are skipped without changing when a stream is aborted: :class:`RuleBounds`
    keeps upper bounds of the rule inputs up to date in O(new tokens) and runs the full check
    only where some rule could hold (on 16k tokens of GSM8K reasoning: none of 256 checks);
    after a check no rule could pass, it also says how many tokens must arrive before one
    could (about 75 in prose), and the check points before that do nothing at all.
    """

    def __init__(self, settings: DetectorSettings = DEFAULT_SETTINGS) -> None:
        self._settings = settings
        self._tokens = np.empty(1024, dtype=np.int64)
        self._n = 0
        self._pieces: list[str] | None = None
        self._splitter = _Splitter()  # the text of feed_text, split as the whole text splits
        self._text: _TextPieces | None = None  # the text of an id stream (feed(ids, text=...))
        self._unsplit: list[str] = []  # that text's chunks since the last check, split at the next
        self._next_check = settings.check_every
        self._aborted_at: int | None = None
        self._window = settings.tail_window + settings.recurrence_lookback + settings.recurrence_ngram - 1
        self._bounds = RuleBounds(settings, scale=settings.abort_margin)
        self._garble = GarbleStream(settings, scale=settings.abort_margin)
        self._x = np.empty(1024, dtype=np.uint64)  # the tokens mixed, up to _mixed
        self._mixed = 0
        self._values = np.empty(1024, dtype=np.uint64)  # final symbols
        self._lengths = np.empty(1024, dtype=np.int64)
        self._units = np.empty(1024, dtype=np.int64)
        self._final = 0  # final symbols
        self._resume = 0  # tokens they cover: where the factorisation resumes
        self._open_unit = 0  # unit of a run going on from _resume whose start is final (0: none)
        self._open_checked = 0  # tokens up to which that run is known to go on
        self._quiet_until = 0  # no abort rule can hold before this many tokens (RuleBounds.quiet)

    @property
    def n_tokens(self) -> int:
        return self._n

    @property
    def aborted_at(self) -> int | None:
        """Tokens received when ``feed`` first returned True (None: not aborted)."""
        return self._aborted_at

    def feed(self, token_ids: Sequence[int] | np.ndarray, pieces: Sequence[str] | None = None, *,
             text: str | None = None) -> bool:
        """Append the next tokens and, for every chunk or for none, their strings (``pieces``)
        or the text they decode to (``text``, as a server that streams ids sends it along: its
        pieces need not line up with the ids, a chunk may hold a cut multi-byte character).

        Returns True once the sample is collapsed by the early-abort rule; from then on the
        sample is decided and further tokens are ignored.
        """
        if self._aborted_at is not None:
            return True
        if pieces is not None and text is not None:
            raise ValueError("give pieces or text, not both")
        if text is not None and self._text is None:
            if self._n or self._pieces is not None:
                raise ValueError("give text with every chunk or with none")
            self._text = _TextPieces()
        elif text is None and self._text is not None and len(token_ids):
            raise ValueError("give text with every chunk or with none")
        if text is not None:
            self._unsplit.append(text)
        self._append(np.asarray(token_ids, dtype=np.int64).ravel(), pieces)
        if self._n >= self._next_check:
            self._next_check = self._n + self._settings.check_every
            if self._check():
                self._aborted_at = self._n
        return self._aborted_at is not None

    def _check(self) -> bool:
        """Whether the abort rules hold on the window of the text received so far (the loop
        rules) or on everything received (stutter and soup, kept up to date incrementally)."""
        s, n = self._settings, self._n
        side = self._text
        if side is not None:
            self._split_text()
        if side is not None and self._garble.fires(side.ids, side.n, side.pieces):
            return True
        if side is None and self._garble.fires(self._tokens, n, self._pieces):
            return True
        if n < self._quiet_until:
            return False
        x, done = self._x, self._mixed
        if n > done:  # mix the new tokens in place, as _kernels.mix does
            np.multiply(self._tokens[done:n].view(np.uint64), K.MIX, out=x[done:n])
            x[done:n] += K.OFFSET
            self._mixed = n
        run = 0  # the longest run reaching into the tokens since the last check
        if self._open_unit:  # a run going on at the last check: does it still?
            a, p, c = self._resume, self._open_unit, self._open_checked
            same = x[c:n] == x[c - p : n - p]
            if same.all():
                self._open_checked = n
                run = n - a
            else:
                b = c + int(np.argmin(same))
                self._keep(run_hash(x, np.array([a]), np.array([p]), np.array([b - a]), s.run_unit), np.array([b - a]), np.array([p]))
                self._resume, self._open_unit, run = b, 0, b - a
        if self._open_unit:
            pending_values = pending_lengths = pending_units = x[:0]
            open_run = n - self._resume
        else:
            sym = factorize(x[self._resume : n], s.run_unit, s.run_copies)
            f = sym.final
            self._keep(sym.values[:f], sym.lengths[:f], sym.units[:f])
            self._resume += sym.final_tokens
            pending_values, pending_lengths, pending_units = sym.values[f:], sym.lengths[f:], sym.units[f:]
            open_run = sym.open_run[0]
            if open_run and f == len(sym.values):  # its start is final: follow it from here on
                self._open_unit, self._open_checked = sym.open_run[1], n
            run = max(run, sym.longest_run)
        if not self._bounds.may_fire(self._values, self._final, len(pending_values), run):
            self._quiet_until = n + self._bounds.quiet(n - self._resume)
            return False
        start = max(0, self._final + len(pending_values) - self._window)
        values = np.concatenate((self._values[start : self._final], pending_values))
        units = np.concatenate((self._units[start : self._final], pending_units))
        lengths = np.concatenate((self._lengths[start : self._final], pending_lengths))
        longest = max(int(lengths[units > 0].max()) if units.any() else 0, open_run)
        return bool(fired_rules(measure(values, s, longest), s, natural_end=False, scale=s.abort_margin))

    def _keep(self, values: np.ndarray, lengths: np.ndarray, units: np.ndarray) -> None:
        """Append final symbols."""
        end = self._final + len(values)
        if end > len(self._values):
            size = max(end, 2 * len(self._values))
            for name in ("_values", "_lengths", "_units"):
                old = getattr(self, name)
                grown = np.empty(size, dtype=old.dtype)
                grown[: self._final] = old[: self._final]
                setattr(self, name, grown)
        self._values[self._final : end] = values
        self._lengths[self._final : end] = lengths
        self._units[self._final : end] = units
        self._final = end

    def feed_text(self, text: str) -> bool:
        """:meth:`feed` for a server that streams text but no token ids.

        The text is split as :func:`split_text` splits the whole text, whatever the chunks:
        the last pieces, which the next chunk could still change, wait for it (or for
        :meth:`finish`). The pieces become the evidence text.
        """
        if self._aborted_at is not None:
            return True
        if self._text is not None:
            raise ValueError("feed_text after feed(ids, text=...): one stream is ids with text or text alone")
        if self._n == 0 and self._pieces is None:
            self._pieces = []  # text from the start: the evidence is text even if it stays empty
        ready = self._splitter.add(text)
        return self.feed(piece_ids(ready), ready) if ready else False

    def finish(self, finish_reason: str | None) -> Analysis:
        """The final verdict on everything received. After an abort the finish reason is
        recorded as "aborted" whatever is passed: the server's reason then describes the
        cancellation, not the sample."""
        reason = "aborted" if self._aborted_at is not None else finish_reason
        if self._text is not None:  # all the text that came with the ids, as analyze reads it
            self._split_text()
            self._text.add(self._splitter.rest())
            text = SplitText(self._text.pieces, self._text.ids[: self._text.n])
            return analyze(self._tokens[: self._n], finish_reason=reason, settings=self._settings, text=text)
        if self._aborted_at is None and (rest := self._splitter.rest()):
            self._append(piece_ids(rest), rest)
        return analyze(self._tokens[: self._n], finish_reason=reason, settings=self._settings, pieces=self._pieces)

    def _split_text(self) -> None:
        """Split the id stream's text received since the last check: once per check rather than
        per chunk (a chunk is often one token), the same pieces, as the splitter's are whatever
        the chunks."""
        if self._unsplit and self._text is not None:
            self._text.add(self._splitter.add("".join(self._unsplit)))
            self._unsplit.clear()

    def _append(self, ids: np.ndarray, pieces: Sequence[str] | None) -> None:
        if pieces is not None and len(pieces) != len(ids):
            raise ValueError(f"{len(pieces)} pieces for {len(ids)} tokens")
        if self._n == 0 and pieces is not None:
            self._pieces = []
        if (pieces is not None) != (self._pieces is not None) and len(ids):
            raise ValueError("give pieces with every chunk or with none")
        end = self._n + len(ids)
        if end > len(self._tokens):
            size = max(end, 2 * len(self._tokens))
            grown = np.empty(size, dtype=np.int64)
            grown[: self._n] = self._tokens[: self._n]
            self._tokens = grown
            mixed = np.empty(size, dtype=np.uint64)
            mixed[: self._n] = self._x[: self._n]
            self._x = mixed
        self._tokens[self._n : end] = ids
        if pieces is not None and self._pieces is not None:
            self._pieces.extend(pieces)
        self._n = end


class _Splitter:
    """A text arriving in chunks, split as :func:`split_text` splits the whole text: the last
    ``HELD_PIECES`` pieces, which the next chunk could still change, wait for it."""

    def __init__(self) -> None:
        self._pending = ""

    def add(self, text: str) -> list[str]:
        """The pieces of the text so far that no later chunk changes and were not returned yet."""
        self._pending += text
        pieces = split_pieces(self._pending)
        if len(pieces) <= HELD_PIECES:
            return []
        self._pending = "".join(pieces[-HELD_PIECES:])
        return pieces[:-HELD_PIECES]

    def rest(self) -> list[str]:
        """The pieces held back, once the text has ended."""
        pieces, self._pending = split_pieces(self._pending), ""
        return pieces


class _TextPieces:
    """The pieces of an id stream's text and their ids, in a buffer that doubles as it fills
    (:class:`~._garble.GarbleStream` reads a prefix of it)."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.ids = np.empty(1024, dtype=np.int64)
        self.n = 0

    def add(self, pieces: list[str]) -> None:
        if not pieces:
            return
        end = self.n + len(pieces)
        if end > len(self.ids):
            grown = np.empty(max(end, 2 * len(self.ids)), dtype=np.int64)
            grown[: self.n] = self.ids[: self.n]
            self.ids = grown
        self.ids[self.n : end] = piece_ids(pieces)
        self.pieces.extend(pieces)
        self.n = end
