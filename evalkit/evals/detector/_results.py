"""What the detector returns for one sample: verdict, metrics, evidence (JSON-ready)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["collapsed", "healthy"]

NATURAL_FINISH_REASONS = frozenset({"stop", "eos", "end_turn", "stop_sequence", "tool_calls"})
"""Finish reasons meaning the model ended the text itself. Any other value ("length",
"aborted", None when the server did not say) means the text was cut while the model was still
generating, which is when a loop at the tail is the typical collapse signature."""

@dataclass(frozen=True)
class Metrics:
    """Numbers measured on every sample, collapsed or not (compare cells on these).

    Periods, tails and spans are found on the text with its runs merged (see ``_symbols``: a
    run of a unit of at most ``run_unit`` tokens counts as one symbol) and given here in
    tokens; rates are over symbols. For a text without runs the two are the same.
    """

    n_tokens: int
    finish_reason: str | None
    tail_period: int
    """Smallest unit that repeats at least ``min_repeats`` times over the longest tail (0: none)."""
    tail_period_tokens: int
    """Tokens of that exactly periodic tail, its first unit included."""
    near_period: int
    """Period of the longest near-periodic tail (match rate >= ``min_match_rate``; 0: none)."""
    near_period_tokens: int
    near_period_match_rate: float
    recurrent_tail_tokens: int
    """Length of the CUSUM excursion still open at the end of the text (0 when closed)."""
    recurrent_tail_rate: float
    """Fraction of recurring n-grams in that excursion."""
    recurrent_span_tokens: int
    """Length of the highest CUSUM excursion anywhere in the text."""
    recurrent_span_rate: float
    recurring_ngram_rate: float
    """Fraction of all n-grams (of symbols) that recurred within ``recurrence_lookback`` symbols."""
    longest_run: int
    """Tokens of the longest run of one unit of at most ``run_unit`` tokens repeated at least
    ``run_copies`` times (0: none)."""
    seq_rep: float
    """seq-rep-n = 1 - distinct n-grams / n-grams, n = ``seq_rep_n`` (0.0 below n tokens)."""
    distinct_1: float
    """Distinct tokens / tokens (0.0 when empty)."""
    distinct_2: float
    """Distinct bigrams / bigrams (0.0 below 2 tokens)."""
    compression_ratio: float
    """Bytes / zlib-compressed bytes (0.0 when empty); healthy text is ~2-3, loops ~10+."""
    compression_basis: Literal["text", "token_ids"]
    """What was compressed: the text when pieces are known, else the ids as 4-byte integers
    (ratios on the two bases are not comparable)."""
    doubled_rate: float | None
    """Share of tokens in a unit of at most ``stutter_unit`` tokens, holding a word, written
    exactly twice in a row (stutter; see ``_garble``). This and the fields below are None when
    only ids were given (no text to read); for ids given with their text, they count the text's
    pieces (``analyze(text=...)``)."""
    stutter_span_tokens: int | None
    """Tokens of the highest excursion of the stutter CUSUM (0: none)."""
    stutter_span_rate: float | None
    """Share of doubled tokens in that excursion."""
    invalid_chars: int | None
    """U+FFFD, control characters and lone surrogates in the text."""
    script_switches: int | None
    """Letters of two alphabets written against each other inside a word."""
    script_switch_peak: int | None
    """Most script switches within ``script_window`` tokens."""


@dataclass(frozen=True)
class Evidence:
    """Where the loop is and what it repeats; empty when the verdict is healthy."""

    signals: tuple[str, ...]
    """Rules that fired: periodic_tail, near_periodic_tail, recurrent_tail, recurrent_span,
    token_run (category loop); stutter (stutter); invalid_chars, script_switches (soup)."""
    period: int
    """Length of the repeated unit in tokens (for a loop without a fixed period: the most
    common distance between recurring n-grams; for stutter: the first doubled unit's; 0 for
    soup)."""
    onset: int | None
    """Token index where the degenerate stretch starts (of the first category that fired; for
    a stutter or soup read from the text of ids, ``analyze(text=...)``, an index of that text's
    pieces, and the excerpt is that text)."""
    loop_tokens: int
    """Tokens from the onset to the end of that stretch."""
    unit_ids: tuple[int, ...]
    """The repeated unit as token ids (first 64; for stutter the first doubled unit, once)."""
    unit_text: str | None
    """The repeated unit as text (first 200 characters), when pieces are known."""
    excerpt: str
    """At most 200 characters around the onset (token ids when no pieces are known)."""
    excerpt_onset: int | None = None
    """Characters of the excerpt before the onset (None for a token-id excerpt, which marks
    the onset with " | ")."""
    categories: tuple[str, ...] = ()
    """The kinds of degenerate output that fired, in this order: loop, stutter, soup."""
    examples: tuple[str, ...] = ()
    """For stutter and soup, up to five places that fired, as text: a doubled unit
    ("capital capital"), or the word around a script switch or an invalid character (shown
    as U+FFFD or \\xNN)."""


NO_EVIDENCE = Evidence(signals=(), period=0, onset=None, loop_tokens=0, unit_ids=(), unit_text=None, excerpt="")


@dataclass(frozen=True)
class Analysis:
    """Verdict, metrics and evidence of one sample; ``to_dict()`` is JSON-serialisable."""

    verdict: Verdict
    metrics: Metrics
    evidence: Evidence
    too_short: bool = False
    """Healthy, but shorter than ``min_judged_tokens``: shorter than the stretch the stutter,
    word-salad and loop rules need to see, so "healthy" says little (a collapse found in a
    short text is still reported as one)."""

    @property
    def collapsed(self) -> bool:
        return self.verdict == "collapsed"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
