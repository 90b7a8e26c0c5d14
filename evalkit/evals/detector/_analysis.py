"""Metrics, rules and verdict for one generated sample (see the package docstring)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from . import _kernels as K
from ._bounds import RuleBounds
from ._chars import WORD
from ._garble import (
    Garble,
    category_of,
    garble_examples,
    garble_extent,
    garble_rules,
    join_pieces,
    measure_garble,
)
from ._results import NATURAL_FINISH_REASONS, NO_EVIDENCE, Analysis, Evidence, Metrics
from ._settings import DEFAULT_SETTINGS, DetectorSettings
from ._symbols import Symbols, factorize
from ._text import SplitText, piece_ids, split_pieces

EXCERPT_CHARS = 200
_EXCERPT_BEFORE = 50  # characters of context kept before the onset
_UNIT_IDS = 64  # the repeated unit is shown up to this many tokens


@dataclass(frozen=True)
class Measure:
    """What the rules look at; computed the same way on a whole text and on a stream's tail.

    Everything but ``run`` is counted in symbols (the text with its runs merged, see
    ``_symbols``), ``run`` in tokens."""

    n: int
    x: np.ndarray
    """The symbols (uint64, well spread: tokens mixed by ``_kernels.mix``, or run hashes)."""
    tail_period: int
    tail_period_tokens: int
    near: tuple[tuple[int, int, int], ...]
    """(period, coverage, matches) for each candidate period whose unit repeats min_repeats times."""
    tail_score: int
    tail_start: int
    span_score: int
    span_start: int
    span_end: int
    run: int
    """Tokens of the longest run of a short unit (see ``Symbols.longest_run``)."""
    distance: np.ndarray
    """Distance back to the previous occurrence of the n-gram ending at each symbol (0: none)."""
    recurring: np.ndarray


def measure(x: np.ndarray, s: DetectorSettings, run: int = 0) -> Measure:
    """Rule inputs for the symbols ``x`` (a whole text's, or the last symbols of a stream) and
    ``run``, the longest run among them. On the last symbols of a longer text every quantity
    is a lower bound of the whole text's value (less history can only hide repetition), which
    is what makes an early abort imply the whole-text verdict."""
    n = len(x)
    rev = x[::-1]
    period, period_tokens = K.select_period(rev, K.periodic_coverage(rev, s.max_period), s.min_repeats)

    ng = s.recurrence_ngram
    distance = np.zeros(n, dtype=np.int64)
    distance[ng - 1 :] = K.previous_distance(K.ngram_hashes(x, ng))
    recurring = (distance > 0) & (distance <= s.recurrence_lookback)

    recent = distance[max(0, n - s.tail_window) :]
    recent = recent[(recent > 0) & (recent <= s.max_period)]
    near: list[tuple[int, int, int]] = []
    if recent.size:
        counts = np.bincount(recent)
        order = np.argsort(-counts, kind="stable")[: s.near_period_candidates]
        for p in order[counts[order] > 0]:
            coverage, matches = K.near_periodic_coverage(rev, int(p), s.min_match_rate)
            if coverage >= s.min_repeats * p:
                near.append((int(p), coverage, matches))

    score = K.cusum(recurring, s.recurrence_rate) if n else np.zeros(1, dtype=np.int64)
    tail_score = int(score[-1])
    tail_start = K.last_zero_before(score, len(score) - 1) if tail_score > 0 else n
    span_end = int(np.argmax(score))
    span_score = int(score[span_end])
    span_start = K.last_zero_before(score, span_end) if span_score > 0 else span_end
    return Measure(
        n=n,
        x=x,
        tail_period=period,
        tail_period_tokens=period_tokens,
        near=tuple(near),
        tail_score=tail_score,
        tail_start=tail_start,
        span_score=span_score,
        span_start=span_start,
        span_end=span_end,
        run=run,
        distance=distance,
        recurring=recurring,
    )


def fired_rules(m: Measure, s: DetectorSettings, *, natural_end: bool, scale: float) -> tuple[str, ...]:
    """Names of the rules that hold. ``scale`` multiplies the token thresholds (the early-abort
    margin); a natural end multiplies the tail thresholds by ``natural_end_factor``."""
    tail_scale = scale * (s.natural_end_factor if natural_end else 1.0)
    per_token = 1000 - round(s.recurrence_rate * 1000)  # CUSUM gain of one recurring n-gram
    fired = []
    if m.tail_period and m.tail_period_tokens - m.tail_period >= s.min_loop_tokens * tail_scale:
        fired.append("periodic_tail")
    if any(coverage - p >= s.min_near_loop_tokens * tail_scale for p, coverage, _ in m.near):
        fired.append("near_periodic_tail")
    if m.tail_score >= per_token * s.min_recurrent_tokens * tail_scale:
        fired.append("recurrent_tail")
    if m.span_score >= per_token * s.min_recurrent_span_tokens * scale:
        fired.append("recurrent_span")
    if m.run >= s.max_run * scale:
        fired.append("token_run")
    return tuple(fired)


def repeated_unit(sym: Symbols, m: Measure, n: int, pieces: Sequence[str] | None,
                  s: DetectorSettings) -> tuple[int, int, int] | None:
    """(onset, unit, end) in tokens of a unit of three or more tokens that holds a word (read
    from ``pieces``; nothing without them) written ``min_unit_copies`` times in a row, as a run
    or as the periodic tail: one sentence written again and again is a loop however short the
    text (twelve copies of a five-token sentence are 60 tokens, under ``max_run`` and
    ``min_loop_tokens``); None when there is none. Not an abort rule: a stream leaves it to the
    final verdict."""
    if pieces is None:
        return None
    edge = np.concatenate(([0], np.cumsum(sym.lengths)))
    runs = np.flatnonzero((sym.units >= 3) & (sym.lengths >= s.min_unit_copies * sym.units))
    found = [(int(edge[k]), int(sym.units[k]), int(edge[k + 1])) for k in runs.tolist()]
    tokens, unit = sym.open_run
    if unit >= 3 and tokens >= s.min_unit_copies * unit:
        found.append((n - tokens, unit, n))
    if m.tail_period and m.tail_period_tokens >= s.min_unit_copies * m.tail_period:
        first = m.n - m.tail_period_tokens  # in symbols
        a, b = int(edge[first]), int(edge[first + m.tail_period])
        if b - a >= 3:
            found.append((a, b - a, n))
    search = WORD.search  # read after the character before the unit: "xff" of "0xff" is no word
    return next((loop for loop in found
                 if search((pieces[loop[0] - 1][-1:] if loop[0] else "") + "".join(pieces[loop[0] : loop[0] + loop[1]]),
                           1 if loop[0] else 0)), None)


def _repeated_unit_before_trailing_space(t: np.ndarray, sym: Symbols, m: Measure, pieces: Sequence[str] | None,
                                         s: DetectorSettings) -> tuple[int, int, int] | None:
    """`repeated_unit` on the text, or on it without the whitespace that ends it: a sentence
    written twelve times and then a newline (a file's last line, a stop after a line break) is
    the same loop, but that last piece breaks the periodic tail the rule reads."""
    if pieces is None:
        return None
    if (found := repeated_unit(sym, m, len(t), pieces, s)) is not None:
        return found
    end = len(pieces)
    while end and not pieces[end - 1].strip():
        end -= 1
    if end in (0, len(pieces)):
        return None
    cut = factorize(K.mix(t[:end]), s.run_unit, s.run_copies)
    return repeated_unit(cut, measure(cut.values, s, cut.longest_run), end, pieces[:end], s)


def _near_best(m: Measure, near_loop_tokens: float) -> tuple[int, int, int]:
    """The near-periodic candidate to report: the longest of those that fire, else the longest."""
    if not m.near:
        return 0, 0, 0
    firing = [c for c in m.near if c[1] - c[0] >= near_loop_tokens]
    return max(firing or m.near, key=lambda c: (c[1], -c[0]))


def _dominant_distance(m: Measure, start: int, end: int) -> int:
    """Most common recurrence distance in ``[start, end)``: the cycle length of a drifting loop."""
    d = m.distance[start:end][m.recurring[start:end]]
    return int(np.argmax(np.bincount(d))) if d.size else 0


def _loop_extent(m: Measure, signals: tuple[str, ...], s: DetectorSettings, near_loop_tokens: float) -> tuple[int, int, int] | None:
    """(period, onset, end) in symbols of the loop the tail or span signals describe, the tail
    signals first; None when only the run rule fired."""
    n = m.n
    onsets: list[tuple[int, int]] = []  # (onset, period) for each tail signal that fired
    if "periodic_tail" in signals:
        onsets.append((n - m.tail_period_tokens, m.tail_period))
    if "near_periodic_tail" in signals:
        p, coverage, _ = _near_best(m, near_loop_tokens)
        onsets.append((n - coverage, p))
    if "recurrent_tail" in signals:
        start = _excursion_start(m, n - 1)
        onsets.append((_back_to_first_copy(m, start, s), _dominant_distance(m, m.tail_start, n)))
    if onsets:
        period = onsets[0][1]  # the most specific signal names the unit
        return period, min(o for o, _ in onsets), n
    if "recurrent_span" in signals:
        end = m.span_end + 1
        return _dominant_distance(m, m.span_start, end), _back_to_first_copy(m, _excursion_start(m, m.span_end), s), end
    return None


_ONSET_RATE = 0.5
"""Reference of the CUSUM that dates a recurrent loop's start. The alarm CUSUM (0.85) only
starts to climb once the loop's first cycles are behind it; at 0.5 the excursion starts where
recurring n-grams began to outnumber new ones, which is where the loop set in."""


def _excursion_start(m: Measure, end: int) -> int:
    """Start of the loop that raised the recurrence alarm at ``end``, dated by the 0.5 CUSUM."""
    score = K.cusum(m.recurring[: end + 1], _ONSET_RATE)
    return K.last_zero_before(score, end) if score[end] > 0 else end


def _back_to_first_copy(m: Measure, start: int, s: DetectorSettings) -> int:
    """A CUSUM excursion starts at the first *recurring* n-gram; the loop began at its first copy."""
    if start >= m.n:
        return m.n
    return max(0, start - int(m.distance[start]) - s.recurrence_ngram + 1)


def _excerpt(tokens: np.ndarray, pieces: Sequence[str] | None, onset: int) -> str:
    if pieces is None:
        before = " ".join(str(t) for t in tokens[max(0, onset - 8) : onset])
        after = " ".join(str(t) for t in tokens[onset : onset + 40])
        text = f"{before} | {after}" if before else after
        return text[:EXCERPT_CHARS]
    before = "".join(pieces[max(0, onset - _EXCERPT_BEFORE) : onset])[-_EXCERPT_BEFORE:]
    after = "".join(pieces[onset : onset + EXCERPT_CHARS])
    return (before + after)[:EXCERPT_CHARS]


_ZLIB_LEVEL = 1
"""zlib's fastest level for the reported compression ratio: it reads the same repetition
(a loop compresses many times better than prose at any level), and level 6 took a third of a
whole-text analysis (issue 36). Ratios are ~10% lower than level 6's on prose."""


def _compression(tokens: np.ndarray, text: str | None) -> tuple[float, Literal["text", "token_ids"]]:
    if text is not None:
        raw = text.encode("utf-8", "surrogatepass")
        basis: Literal["text", "token_ids"] = "text"
    else:
        raw = tokens.astype("<u4").tobytes()
        basis = "token_ids"
    return (len(raw) / len(zlib.compress(raw, _ZLIB_LEVEL)) if raw else 0.0), basis


def _distinct_ratio(values: np.ndarray) -> float:
    return K.count_distinct(values) / len(values) if len(values) else 0.0


def analyze(
    tokens: Sequence[int] | np.ndarray,
    *,
    finish_reason: str | None = None,
    settings: DetectorSettings = DEFAULT_SETTINGS,
    pieces: Sequence[str] | None = None,
    text: str | SplitText | None = None,
) -> Analysis:
    """Measure one generated sample and decide whether it collapsed into repetition.

    ``tokens`` are the generated token ids (or :func:`split_text` ids); ``pieces`` their
    strings when known, which show the evidence as text and which stutter and soup read.
    ``text``, instead of ``pieces``: the text the ids decode to, from a server that streams ids
    and text whose pieces are not known: stutter and soup are then read from the text split as
    :func:`analyze_text` splits it, so they are judged as for a text-only server, and their
    evidence (onset, stretch, excerpt, examples) counts that text's pieces (a :class:`SplitText`:
    the same, split already); the loop rules still read the ids. ``finish_reason`` as the server reported it; ``"aborted"`` after an early abort.
    """
    t = np.asarray(tokens, dtype=np.int64)
    if t.ndim != 1:
        raise ValueError(f"tokens must be one-dimensional, got shape {t.shape}")
    if pieces is not None and len(pieces) != len(t):
        raise ValueError(f"{len(pieces)} pieces for {len(t)} tokens")
    if pieces is not None and text is not None:
        raise ValueError("give pieces or text, not both")
    s = settings
    x = K.mix(t)
    sym = factorize(x, s.run_unit, s.run_copies)
    m = measure(sym.values, s, sym.longest_run)
    natural_end = finish_reason in NATURAL_FINISH_REASONS
    loop_signals = fired_rules(m, s, natural_end=natural_end, scale=1.0)
    unit_loop = None if "periodic_tail" in loop_signals else _repeated_unit_before_trailing_space(t, sym, m, pieces, s)
    if unit_loop is not None:
        loop_signals += ("repeated_unit",)
    joined = join_pieces(pieces) if pieces is not None else None
    g_tokens, g_pieces, g_joined = t, pieces, joined  # what stutter and soup read: the tokens, or the text's pieces
    given = text if isinstance(text, str) else None  # what the pieces join to, known
    if isinstance(text, str):
        text_pieces = split_pieces(text)
        text = SplitText(text_pieces, piece_ids(text_pieces))
    if text is not None:
        g_tokens, g_pieces, g_joined = text.ids, text.pieces, join_pieces(text.pieces, given)
    g = measure_garble(g_tokens, g_pieces, s, natural_end=natural_end, joined=g_joined)
    garble_signals = garble_rules(g, s, scale=1.0)
    signals = loop_signals + garble_signals
    near_loop_tokens = s.min_near_loop_tokens * (s.natural_end_factor if natural_end else 1.0)

    n = len(t)
    edge = np.zeros(m.n + 1, dtype=np.int64)  # edge[k]: token where symbol k starts
    np.cumsum(sym.lengths, out=edge[1:])

    def after(k: int) -> int:  # tokens from symbol k to the end of the text
        return n - int(edge[k])

    def width(k: int, count: int) -> int:  # tokens of ``count`` symbols from symbol k
        return int(edge[min(m.n, k + count)] - edge[k])

    near_p, near_cov, near_matches = _near_best(m, near_loop_tokens)
    tail_start = m.n - m.tail_period_tokens
    near_start = m.n - near_cov
    tail_len = m.n - m.tail_start
    span_len = m.span_end + 1 - m.span_start if m.span_score > 0 else 0
    ngrams = max(0, m.n - s.recurrence_ngram + 1)
    ratio, basis = _compression(t, joined[0] if joined is not None else None)
    metrics = Metrics(
        n_tokens=n,
        finish_reason=finish_reason,
        tail_period=width(tail_start, m.tail_period) if m.tail_period else 0,
        tail_period_tokens=after(tail_start) if m.tail_period else 0,
        near_period=width(near_start, near_p) if near_cov else 0,
        near_period_tokens=after(near_start) if near_cov else 0,
        near_period_match_rate=near_matches / (near_cov - near_p) if near_cov else 0.0,
        recurrent_tail_tokens=after(m.tail_start) if tail_len else 0,
        recurrent_tail_rate=float(m.recurring[m.tail_start :].mean()) if tail_len else 0.0,
        recurrent_span_tokens=width(m.span_start, span_len) if span_len else 0,
        recurrent_span_rate=float(m.recurring[m.span_start : m.span_end + 1].mean()) if span_len else 0.0,
        recurring_ngram_rate=int(np.count_nonzero(m.recurring)) / ngrams if ngrams else 0.0,
        longest_run=m.run,
        seq_rep=1.0 - _distinct_ratio(K.ngram_hashes(x, s.seq_rep_n)) if n >= s.seq_rep_n else 0.0,
        distinct_1=_distinct_ratio(t),
        distinct_2=_distinct_ratio(K.ngram_hashes(x, 2)),
        compression_ratio=ratio,
        compression_basis=basis,
        **_garble_metrics(g),
    )
    if not signals:
        return Analysis(verdict="healthy", metrics=metrics, evidence=NO_EVIDENCE, too_short=n < s.min_judged_tokens)
    extent = _loop_extent(m, loop_signals, s, near_loop_tokens) if loop_signals else None
    shown_tokens, shown_pieces = t, pieces  # what the evidence counts and shows
    if not loop_signals:
        shown_tokens, shown_pieces = g_tokens, g_pieces
        period, onset, end = garble_extent(g, garble_signals, g_tokens, s)
    elif extent is None and unit_loop is not None:  # a short text's repeated sentence
        onset, period, end = unit_loop
    elif extent is None:  # only the run rule: the longest run, the open one if it is longest
        runs = np.flatnonzero(sym.units)
        k = int(runs[np.argmax(sym.lengths[runs])]) if runs.size else m.n
        if k == m.n or sym.open_run[0] >= sym.lengths[k]:
            period, onset, end = sym.open_run[1], int(edge[m.n]), n
        else:
            period, onset, end = int(sym.units[k]), int(edge[k]), int(edge[k + 1])
    else:
        unit, first, last = extent
        period, onset, end = width(first, unit), int(edge[first]), n if last == m.n else int(edge[last])
    unit_ids = shown_tokens[onset : onset + min(period, _UNIT_IDS)]
    evidence = Evidence(
        signals=signals,
        period=period,
        onset=onset,
        loop_tokens=end - onset,
        unit_ids=tuple(int(u) for u in unit_ids),
        unit_text="".join(shown_pieces[onset : onset + period])[:EXCERPT_CHARS] if shown_pieces is not None and period else None,
        excerpt=_excerpt(shown_tokens, shown_pieces, onset),
        excerpt_onset=len("".join(shown_pieces[max(0, onset - _EXCERPT_BEFORE) : onset])[-_EXCERPT_BEFORE:]) if shown_pieces is not None else None,
        categories=tuple(dict.fromkeys(category_of(name) for name in signals)),
        examples=garble_examples(g, garble_signals, g_tokens, g_pieces, s),
    )
    return Analysis(verdict="collapsed", metrics=metrics, evidence=evidence)


def _garble_metrics(g: Garble) -> dict[str, Any]:
    """The stutter and soup fields of :class:`Metrics` (None without the text)."""
    if not g.measured:
        return dict.fromkeys(("doubled_rate", "stutter_span_tokens", "stutter_span_rate", "invalid_chars",
                              "script_switches", "script_switch_peak"))
    span = g.doubled[g.stutter_start : g.stutter_end]
    return {
        "doubled_rate": float(g.doubled.mean()) if len(g.doubled) else 0.0,
        "stutter_span_tokens": len(span),
        "stutter_span_rate": float(span.mean()) if len(span) else 0.0,
        "invalid_chars": int(g.invalid.size),
        "script_switches": int(g.switches.size),
        "script_switch_peak": g.switch_peak[0],
    }


def is_collapsed(
    tokens: Sequence[int] | np.ndarray,
    *,
    finish_reason: str | None = None,
    settings: DetectorSettings = DEFAULT_SETTINGS,
    pieces: Sequence[str] | None = None,
) -> bool:
    """``analyze(...).collapsed``, without the metrics and evidence: for scanning many texts.

    Healthy text is usually ruled out for the loop rules by :class:`RuleBounds` alone (one
    pass over the recurring n-grams), so a verdict costs a fraction of :func:`analyze`. The
    soup rules need ``pieces``, as in :func:`analyze`.
    """
    t = np.asarray(tokens, dtype=np.int64)
    natural_end = finish_reason in NATURAL_FINISH_REASONS
    if garble_rules(measure_garble(t, pieces, settings, natural_end=natural_end), settings, scale=1.0):
        return True
    sym = factorize(K.mix(t), settings.run_unit, settings.run_copies)
    m = measure(sym.values, settings, sym.longest_run) if pieces is not None else None  # the repeated-unit rule's
    if m is not None and _repeated_unit_before_trailing_space(t, sym, m, pieces, settings) is not None:
        return True
    if not RuleBounds(settings, scale=1.0).may_fire(sym.values, len(sym.values), 0, sym.longest_run):
        return False
    m = m if m is not None else measure(sym.values, settings, sym.longest_run)
    return bool(fired_rules(m, settings, natural_end=natural_end, scale=1.0))


def is_text_collapsed(
    text: str,
    *,
    finish_reason: str | None = None,
    settings: DetectorSettings = DEFAULT_SETTINGS,
) -> bool:
    """:func:`is_collapsed` for a text without token ids (every GSM8K answer of a cell)."""
    pieces = split_pieces(text)
    return is_collapsed(piece_ids(pieces), finish_reason=finish_reason, settings=settings, pieces=pieces)


def analyze_text(
    text: str,
    *,
    finish_reason: str | None = None,
    settings: DetectorSettings = DEFAULT_SETTINGS,
) -> Analysis:
    """:func:`analyze` for a server that returned text only: split with :func:`split_text`'s
    pieces, which also become the evidence text."""
    pieces = split_pieces(text)
    return analyze(piece_ids(pieces), finish_reason=finish_reason, settings=settings, pieces=pieces)
