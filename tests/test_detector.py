"""The collapse detector's metrics, rules and streaming contract, as specifications.

Suite-level behaviour (recall, false positives, early-abort savings on realistic texts) is in
test_detector_suites.py.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.evals import detector
from evalkit.evals.detector import (
    DEFAULT_SETTINGS,
    Analysis,
    DetectorSettings,
    StreamingDetector,
    analyze,
    analyze_text,
    is_collapsed,
    split_text,
)
from evalkit.evals.detector import _kernels as K
from evalkit.evals.detector._analysis import measure
from evalkit.evals.detector._symbols import factorize, run_hash
from evalkit.evals.detector._text import split_pieces
from tests.detector_reference import reference_abort

A, B, C, X, Y = 1, 2, 3, 7, 8
SEVEN = [A, B, C, X, Y, 9, 10]
"""A unit longer than run_unit (6) tokens: it repeats as a periodic tail, not as a run."""


def healthy(n: int, seed: int = 0) -> np.ndarray:
    """Distinct tokens: no n-gram ever recurs, no period, no run."""
    return np.random.default_rng(seed).permutation(100_000)[:n] + 1000


def loop(unit: list[int], tokens: int) -> np.ndarray:
    return np.resize(np.asarray(unit), tokens)


def gsm8k_text() -> str:
    """Long healthy reasoning: the shipped GSM8K training answers, one after another."""
    from importlib import resources

    path = resources.files("evalkit").joinpath("data", "gsm8k", "train.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:600]]
    return "\n\n".join(f"{r['question']}\n{r['answer']}" for r in rows)


def brute_symbols(tokens: list[int], unit: int, copies: int) -> tuple[list[tuple[int, ...]], list[int]]:
    """The greedy factorisation by its definition: at each position the smallest unit of at most
    ``unit`` tokens that occurs ``copies`` times from there starts a run, which goes on while
    every token equals the one a unit before. Returns each symbol as (unit tokens, length) or
    (token,), and (length, unit) of a run still going on at the end, left out of the symbols."""
    n, i, symbols = len(tokens), 0, []
    while i < n:
        p = next((p for p in range(1, unit + 1) if i + copies * p <= n and all(tokens[i + j] == tokens[i + j + p] for j in range((copies - 1) * p))), 0)
        if not p:
            symbols.append((tokens[i],))
            i += 1
            continue
        b = i + p
        while b < n and tokens[b] == tokens[b - p]:
            b += 1
        if b == n:
            return symbols, [b - i, p]
        symbols.append((*tokens[i : i + p], b - i))
        i = b
    return symbols, [0, 0]


def brute_coverage(tokens: list[int], p: int) -> int:
    """Length of the longest suffix with period p, by counting back one token at a time."""
    n, k = len(tokens), 0
    while p + k < n and tokens[n - 1 - k] == tokens[n - 1 - k - p]:
        k += 1
    return p + k


# --- the public surface --------------------------------------------------------------------


def test_public_names_are_pinned() -> None:
    assert sorted(detector.__all__) == sorted(
        [
            "DEFAULT_SETTINGS",
            "NATURAL_FINISH_REASONS",
            "Analysis",
            "DetectorSettings",
            "Evidence",
            "Metrics",
            "StreamingDetector",
            "Verdict",
            "analyze",
            "analyze_text",
            "is_collapsed",
            "is_text_collapsed",
            "split_text",
        ]
    )


def test_settings_are_frozen_strict_and_every_threshold_is_documented() -> None:
    with pytest.raises(pydantic.ValidationError):
        DetectorSettings(min_loop_token=5)  # type: ignore[call-arg]  # a typo must not pass silently
    with pytest.raises(pydantic.ValidationError):
        DEFAULT_SETTINGS.max_run = 3  # type: ignore[misc]
    for name, field in DetectorSettings.model_fields.items():
        assert field.description and len(field.description) > 40, name
        assert field.default is not None, name


def test_settings_reject_combinations_the_streaming_check_cannot_honour() -> None:
    with pytest.raises(pydantic.ValidationError, match="tail_window"):
        DetectorSettings(tail_window=100)
    with pytest.raises(pydantic.ValidationError, match="recurrence_lookback"):
        DetectorSettings(max_period=600, recurrence_lookback=512)


def test_analysis_is_json_serialisable_with_verdict_metrics_and_evidence() -> None:
    a = analyze_text("Intro. " + "The answer is 42. " * 60, finish_reason="length")
    data = json.loads(json.dumps(a.to_dict()))
    assert data["verdict"] == "collapsed"
    assert data["metrics"]["finish_reason"] == "length"
    assert data["evidence"]["unit_text"].strip() in {"The answer is 42.", ". The answer is 42"}
    assert set(data) == {"verdict", "metrics", "evidence", "too_short"}
    assert data["too_short"] is False


def test_tokens_must_be_one_dimensional_and_match_their_pieces() -> None:
    with pytest.raises(ValueError, match="one-dimensional"):
        analyze(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="pieces"):
        analyze([1, 2, 3], pieces=["a", "b"])


# --- split_text ------------------------------------------------------------------------------


def test_split_text_is_lossless_and_tokenizer_like() -> None:
    text = "It's 12345 apples, said Ana.\n\n    return x_y  # ok\n" + "-" * 40
    pieces = split_pieces(text)
    assert "".join(pieces) == text
    assert pieces[:7] == ["It", "'s", " 123", "45", " apples", ",", " said"]
    assert pieces[-3:] == ["-" * 16, "-" * 16, "-" * 8]  # long runs merge, as BPE merges them


def test_split_text_ids_are_stable_across_processes() -> None:
    """Python's str hash is salted per process; the ids must not be."""
    code = "from evalkit.evals.detector import split_text; print(split_text('the cat sat on the mat').tolist())"
    runs = {
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True, check=True).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1
    assert json.loads(runs.pop()) == split_text("the cat sat on the mat").tolist()


@given(st.text(max_size=300))
def test_split_text_never_loses_a_character(text: str) -> None:
    assert "".join(split_pieces(text)) == text
    assert len(split_text(text)) == len(split_pieces(text))


# --- metrics against hand-computed values ----------------------------------------------------


def test_tail_period_of_abcabcab_is_3_over_all_8_tokens() -> None:
    a = analyze([A, B, C, A, B, C, A, B], settings=DetectorSettings(min_repeats=2))
    assert (a.metrics.tail_period, a.metrics.tail_period_tokens) == (3, 8)


def test_tail_period_needs_min_repeats_whole_copies() -> None:
    tokens = [X, Y, *SEVEN * 2, *SEVEN[:5]]  # a 7-token unit over 19 tokens: 2.7 copies
    assert analyze(tokens).metrics.tail_period == 0  # default min_repeats is 3
    assert analyze([X, Y, *SEVEN * 3]).metrics.tail_period == 7


def test_tail_period_reports_the_primitive_unit_not_a_multiple() -> None:
    a = analyze([X, Y, *SEVEN * 6])
    assert (a.metrics.tail_period, a.metrics.tail_period_tokens) == (7, 42)


def test_longest_run_counts_a_unit_of_up_to_run_unit_tokens_repeated_run_copies_times() -> None:
    assert analyze([A, A, B, B, B, C]).metrics.longest_run == 3
    assert analyze([X, *[A, B] * 5, C]).metrics.longest_run == 10
    assert analyze([X, *SEVEN[:6] * 3, C]).metrics.longest_run == 18  # run_unit: 6
    assert analyze([X, *SEVEN * 3, C]).metrics.longest_run == 0  # 7 tokens: a periodic tail
    assert analyze([A, A, C, A, B, A, B]).metrics.longest_run == 0  # two copies are not a run
    assert analyze([A]).metrics.longest_run == 0


def test_seq_rep_4_counts_repeated_4_grams() -> None:
    # 4-grams of 1234 1234: 1234 2341 3412 4123 1234 -> 4 distinct of 5
    assert analyze([1, 2, 3, 4, 1, 2, 3, 4]).metrics.seq_rep == pytest.approx(1 - 4 / 5)
    assert analyze([1, 2, 3, 4, 5]).metrics.seq_rep == 0.0
    assert analyze([1, 2, 3]).metrics.seq_rep == 0.0  # no 4-gram at all


def test_distinct_1_and_2() -> None:
    m = analyze([1, 1, 2, 3]).metrics
    assert (m.distinct_1, m.distinct_2) == (3 / 4, 1.0)
    assert analyze([1, 2, 1, 2]).metrics.distinct_2 == pytest.approx(2 / 3)  # (1,2) (2,1) (1,2)


def test_recurring_ngram_rate_counts_5_grams_seen_before() -> None:
    # 5-grams of 12345 12345: 12345 23451 34512 45123 51234 12345 -> one of six recurred
    assert analyze([1, 2, 3, 4, 5, 1, 2, 3, 4, 5]).metrics.recurring_ngram_rate == pytest.approx(1 / 6)


def test_compression_ratio_is_bytes_over_zlib_bytes_of_the_text() -> None:
    text = "abc " * 100
    m = analyze_text(text).metrics
    assert m.compression_basis == "text"
    assert m.compression_ratio == pytest.approx(len(text) / len(zlib.compress(text.encode())))
    assert analyze([1, 2, 3]).metrics.compression_basis == "token_ids"


def test_cusum_rises_on_recurring_ngrams_and_never_goes_below_zero() -> None:
    flags = np.array([True, True, False, True, False, False, False])
    # rate 0.5: +500 per recurring n-gram, -500 per new one, floored at 0
    assert K.cusum(flags, 0.5).tolist() == [500, 1000, 500, 1000, 500, 0, 0]


def test_near_periodic_tail_tolerates_a_counter_in_every_copy() -> None:
    unit = list(range(100, 125))  # 25 tokens; token 0 becomes a counter
    tokens = [t for k in range(20) for t in [9000 + k, *unit[1:]]]
    m = analyze(np.concatenate([healthy(200), tokens])).metrics
    assert m.tail_period == 0  # no exact period survives the counter
    assert m.near_period == 25
    assert m.near_period_match_rate == pytest.approx(24 / 25, abs=0.01)
    assert m.near_period_tokens == pytest.approx(500, abs=2)


def test_onset_is_where_the_loop_starts() -> None:
    tokens = np.concatenate([healthy(300), loop(SEVEN, 400)])
    a = analyze(tokens, finish_reason="length")
    assert a.evidence.signals[0] == "periodic_tail"
    assert a.evidence.onset == 300
    assert a.evidence.period == 7
    assert a.evidence.unit_ids == tuple(SEVEN)
    assert a.evidence.loop_tokens == 400


def test_a_runs_evidence_is_its_unit_onset_and_length() -> None:
    tokens = np.concatenate([healthy(300), loop([A, B, C, X], 400)])
    a = analyze(tokens, finish_reason="length")
    assert a.evidence.signals == ("token_run",)
    assert (a.evidence.onset, a.evidence.period, a.evidence.unit_ids, a.evidence.loop_tokens) == (300, 4, (A, B, C, X), 400)


def test_evidence_shows_the_unit_and_an_excerpt_as_text_when_pieces_are_known() -> None:
    text = "We compute the sum of the first ten numbers carefully. " + "So the total is 24. " * 40
    a = analyze_text(text, finish_reason="length")
    assert "So the total is 24" in (a.evidence.unit_text or "")
    assert len(a.evidence.excerpt) <= 200
    assert "carefully" in a.evidence.excerpt  # context before the onset


def test_evidence_without_pieces_shows_token_ids() -> None:
    a = analyze(np.concatenate([healthy(50), loop([A, B], 300)]), finish_reason="length")
    assert a.evidence.unit_text is None
    assert a.evidence.unit_ids == (A, B)
    assert "1 2 1 2" in a.evidence.excerpt and len(a.evidence.excerpt) <= 200


# --- verdict rules ---------------------------------------------------------------------------


def test_a_cut_generation_ending_in_a_loop_is_collapsed() -> None:
    a = analyze(np.concatenate([healthy(500), loop(SEVEN, 110)]), finish_reason="length")
    assert a.collapsed and a.evidence.signals[0] == "periodic_tail"


def test_a_short_repetition_at_the_end_is_not_a_loop() -> None:
    """3 copies are required and the copies must repeat min_loop_tokens (96) tokens."""
    unit = list(healthy(40, seed=1))
    assert not analyze([*healthy(500), *unit * 2], finish_reason="length").collapsed  # a doubled chorus
    assert not analyze([*healthy(500), *unit * 3], finish_reason="length").collapsed  # 80 copied tokens
    assert analyze([*healthy(500), *unit * 4], finish_reason="length").collapsed  # 120 copied tokens


def test_a_natural_end_needs_natural_end_factor_times_more_loop() -> None:
    short = np.concatenate([healthy(500), loop(SEVEN, 200)])
    long = np.concatenate([healthy(500), loop(SEVEN, 600)])
    assert analyze(short, finish_reason="length").collapsed
    assert not analyze(short, finish_reason="stop").collapsed
    assert analyze(long, finish_reason="stop").collapsed


def test_unknown_finish_reason_is_treated_as_a_cut() -> None:
    tokens = np.concatenate([healthy(500), loop(SEVEN, 200)])
    assert analyze(tokens, finish_reason=None).collapsed
    assert analyze(tokens, finish_reason="aborted").collapsed


def test_a_long_loop_anywhere_is_a_collapse_even_if_the_model_escaped() -> None:
    tokens = np.concatenate([healthy(300), loop(SEVEN, 700), healthy(300, seed=2)])
    a = analyze(tokens, finish_reason="stop")
    assert a.collapsed and "recurrent_span" in a.evidence.signals
    assert a.evidence.onset == 300


def test_a_long_run_of_one_token_anywhere_is_a_collapse() -> None:
    tokens = np.concatenate([healthy(300), np.full(100, A), healthy(300, seed=3)])
    a = analyze(tokens, finish_reason="stop")
    assert a.evidence.signals == ("token_run",)
    assert (a.evidence.onset, a.evidence.loop_tokens) == (300, 100)
    assert not analyze(np.concatenate([healthy(300), np.full(90, A), healthy(300, seed=3)]), finish_reason="length").collapsed


def test_a_run_of_a_short_unit_is_judged_by_its_length_in_tokens() -> None:
    """ "yes, yes, yes, ..." is one growing run: collapsed from max_run (96) tokens on, whatever
    the finish reason, and invisible to the tail rules below that."""
    for unit in ([A], [A, B], [A, B, C, X, Y, 9]):
        short = np.concatenate([healthy(300), loop(unit, 90)])
        long = np.concatenate([healthy(300), loop(unit, 96), healthy(300, seed=2)])
        assert not analyze(short, finish_reason="length").collapsed, unit
        assert analyze(long, finish_reason="stop").evidence.signals == ("token_run",), unit


def test_a_loop_without_fixed_period_is_caught_by_recurrence() -> None:
    rng = np.random.default_rng(7)
    phrases = [[A, B, C, X], [A, B, Y, X, C], [B, C, A], [Y, Y, A, B, C, X]]
    drifting = [t for i in rng.integers(0, len(phrases), 300) for t in phrases[i]]
    a = analyze(np.concatenate([healthy(400), drifting]), finish_reason="length")
    assert a.metrics.tail_period == 0 or a.metrics.tail_period_tokens < 50
    assert a.collapsed and "recurrent_tail" in a.evidence.signals


def test_healthy_text_is_healthy() -> None:
    assert not analyze(healthy(5000), finish_reason="length").collapsed
    assert analyze([]).verdict == "healthy"


# --- streaming -------------------------------------------------------------------------------


def feed_all(tokens: np.ndarray, chunks: list[int], finish_reason: str | None = "length") -> tuple[StreamingDetector, Analysis]:
    d = StreamingDetector()
    i = 0
    for size in chunks:
        if i >= len(tokens):
            break
        if d.feed(tokens[i : i + size]):
            break
        i += size
    else:
        d.feed(tokens[i:])
    return d, d.finish(finish_reason)


def test_streaming_without_abort_equals_analyze_on_the_whole_text() -> None:
    tokens = healthy(3000)
    d, result = feed_all(tokens, [1, 7, 64, 500, 3] * 200)
    assert d.aborted_at is None
    assert result == analyze(tokens, finish_reason="length")


def test_streaming_aborts_a_collapse_early_and_finish_says_aborted() -> None:
    tokens = np.concatenate([healthy(300), loop([A, B, C, X, Y], 3796)])  # 4096 tokens in all
    d, result = feed_all(tokens, [16] * 300, finish_reason="length")
    assert d.aborted_at is not None and d.aborted_at <= 300 + 96 + 5 + 64
    assert result.collapsed and result.metrics.finish_reason == "aborted"
    assert result.metrics.n_tokens == d.aborted_at
    assert d.feed([A, B]) is True  # decided: later tokens are ignored
    assert d.n_tokens == d.aborted_at


def test_the_verdict_after_an_abort_is_the_full_runs_verdict() -> None:
    for unit in ([A], [A, B, C], list(healthy(200, seed=4))):
        tokens = np.concatenate([healthy(300), loop(unit, 3800)])
        d, result = feed_all(tokens, [16] * 400)
        full = analyze(tokens, finish_reason="length")
        assert d.aborted_at is not None and d.aborted_at < len(tokens)
        assert result.verdict == full.verdict == "collapsed"
        assert result.evidence.period == full.evidence.period == len(unit)


def test_a_collapse_at_token_300_of_4096_is_aborted_before_token_820() -> None:
    """Saves >= 80% of a 4096-token budget for every kind of loop the suites hold, but a loop
    over three phrases of 3-4 tokens in random order: a phrase said three times in a row is a
    run (one symbol), which slows the recurrence down, so that one saves 78% (token 900)."""
    rng = np.random.default_rng(11)
    kinds = {
        "single token": loop([A], 3796),
        "phrase": loop([A, B, C, X, Y], 3796),
        "paragraph": loop(list(healthy(150, seed=5)), 3796),
        "counter": np.concatenate([[9000 + k, *range(100, 129)] for k in range(127)])[:3796],
        "drifting": np.array([t for i in rng.integers(0, 3, 2000) for t in ([A, B, C], [A, X, C, Y], [B, B, Y])[i]])[:3796],
    }
    for name, tail in kinds.items():
        d, _ = feed_all(np.concatenate([healthy(300), tail]), [16] * 300)
        assert d.aborted_at is not None and d.aborted_at < (900 if name == "drifting" else 820), name


def test_pieces_are_given_with_every_chunk_or_with_none() -> None:
    d = StreamingDetector()
    d.feed([1, 2], ["a", "b"])
    with pytest.raises(ValueError, match="every chunk"):
        d.feed([3])
    assert d.finish("stop").metrics.compression_basis == "text"


# --- properties ------------------------------------------------------------------------------

small_sequences = st.lists(st.integers(0, 2), max_size=60)


@given(small_sequences, st.integers(1, 40))
def test_periodic_coverage_equals_brute_force(tokens: list[int], max_period: int) -> None:
    rev = K.mix(np.asarray(tokens, dtype=np.int64))[::-1]
    coverage = K.periodic_coverage(rev, max_period)
    assert coverage.tolist() == [brute_coverage(tokens, p) for p in range(1, min(max_period, len(tokens) - 1) + 1)]


@given(small_sequences, st.sampled_from([2.0, 2.5, 3.0, 4.0]), st.integers(1, 3), st.integers(2, 3))
def test_tail_period_equals_brute_force(tokens: list[int], min_repeats: float, unit: int, copies: int) -> None:
    """The period of the symbols (runs merged), in tokens, against counting back by hand."""
    s = DetectorSettings(min_repeats=min_repeats, max_period=16, tail_window=64, run_unit=unit, run_copies=copies)
    symbols, _ = brute_symbols(tokens, unit, copies)
    lengths = [1 if len(symbol) == 1 else symbol[-1] for symbol in symbols]
    qualifying = [(brute_coverage(symbols, p), -p) for p in range(1, min(16, len(symbols) - 1) + 1) if brute_coverage(symbols, p) >= min_repeats * p]
    expected = (0, 0)
    if qualifying:
        coverage, p = max(qualifying)[0], -max(qualifying)[1]
        start = len(symbols) - coverage
        expected = (sum(lengths[start : start + p]), len(tokens) - sum(lengths[:start]))
    m = analyze(tokens, settings=s).metrics
    assert (m.tail_period, m.tail_period_tokens) == expected


@given(small_sequences, st.integers(1, 4), st.integers(2, 3))
def test_factorize_is_the_greedy_factorisation(tokens: list[int], unit: int, copies: int) -> None:
    x = K.mix(np.asarray(tokens, dtype=np.int64))
    sym = factorize(x, unit, copies)
    symbols, open_run = brute_symbols(tokens, unit, copies)
    assert sym.lengths.tolist() == [1 if len(symbol) == 1 else symbol[-1] for symbol in symbols]
    assert sym.units.tolist() == [0 if len(symbol) == 1 else len(symbol) - 1 for symbol in symbols]
    assert list(sym.open_run) == open_run
    edge = np.concatenate(([0], np.cumsum(sym.lengths))).astype(np.int64)
    for k, symbol in enumerate(symbols):
        if len(symbol) == 1:
            assert sym.values[k] == x[edge[k]]
        else:
            run = np.array([edge[k]]), np.array([len(symbol) - 1]), np.array([symbol[-1]])
            assert sym.values[k] == run_hash(x, *run, unit)[0]


@given(small_sequences, st.integers(1, 4), st.integers(2, 3))
def test_symbols_marked_final_are_those_of_every_longer_text(tokens: list[int], unit: int, copies: int) -> None:
    """What the streaming check relies on: the symbols a prefix marks final, and the tokens they
    cover, are the same whatever follows."""
    x = K.mix(np.asarray(tokens, dtype=np.int64))
    whole = factorize(x, unit, copies)
    for k in range(len(tokens) + 1):
        prefix = factorize(x[:k], unit, copies)
        f = prefix.final
        assert prefix.values[:f].tolist() == whole.values[:f].tolist()
        assert prefix.lengths[:f].tolist() == whole.lengths[:f].tolist()
        assert prefix.final_tokens == int(prefix.lengths[:f].sum())
        rest = factorize(x[prefix.final_tokens :], unit, copies)  # resuming there reads the rest alike
        assert rest.values.tolist() == whole.values[f:].tolist()
        assert rest.open_run == whole.open_run


@given(st.lists(st.integers(0, 2**62), max_size=3), st.sampled_from([None, "stop", "length"]))
def test_tiny_inputs_never_crash(tokens: list[int], finish_reason: str | None) -> None:
    assert analyze(tokens, finish_reason=finish_reason).verdict == "healthy"
    d = StreamingDetector()
    d.feed(tokens)
    assert d.finish(finish_reason) == analyze(tokens, finish_reason=finish_reason)


def test_huge_inputs_stay_fast_and_correct() -> None:
    tokens = np.concatenate([healthy(99_000), loop([A, B, C], 200_000), np.arange(2**40, 2**40 + 100)])
    a = analyze(tokens, finish_reason="stop")
    assert a.collapsed and a.evidence.onset == 99_000 and a.evidence.period == 3


@st.composite
def looping_streams(draw: st.DrawFn) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            parts.append(rng.integers(0, 50_000, draw(st.integers(0, 600))))
        else:
            unit = rng.integers(0, 20, draw(st.integers(1, 30)))
            parts.append(np.resize(unit, draw(st.integers(0, 900))))
    chunks = draw(st.lists(st.integers(1, 200), min_size=1, max_size=50))
    return np.concatenate(parts).astype(np.int64), chunks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(looping_streams(), st.sampled_from(["length", "stop", None]))
def test_streaming_in_random_chunks_agrees_with_analyze(stream: tuple[np.ndarray, list[int]], finish_reason: str | None) -> None:
    tokens, chunks = stream
    d, result = feed_all(tokens, chunks * (len(tokens) // max(1, sum(chunks)) + 1), finish_reason)
    if d.aborted_at is None:
        assert result == analyze(tokens, finish_reason=finish_reason)
    else:  # the abort rule implies the verdict on what was received
        assert result == analyze(tokens[: d.aborted_at], finish_reason="aborted")
        assert result.collapsed


def feed_in(tokens: np.ndarray, chunks: list[int], s: DetectorSettings) -> int | None:
    """Feed ``tokens`` in exactly these chunk sizes; the token count at the abort."""
    d, n = StreamingDetector(s), 0
    for size in chunks:
        if n >= len(tokens) or d.feed(tokens[n : n + size]):
            break
        n += size
    return d.aborted_at


@st.composite
def near_loops(draw: st.DrawFn) -> np.ndarray:
    """Loops whose copies differ every few tokens: the near-periodic rule's territory."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    unit = rng.integers(0, 50_000, draw(st.integers(5, 120)))
    body = np.resize(unit, draw(st.integers(200, 2500)))
    every = draw(st.integers(3, 40))
    body[::every] = rng.integers(50_000, 100_000, len(body[::every]))  # a counter that changes
    return np.concatenate([rng.integers(0, 50_000, draw(st.integers(0, 800))), body,
                           rng.integers(0, 50_000, draw(st.integers(0, 300)))]).astype(np.int64)


gate_settings = st.sampled_from([
    DetectorSettings(),
    DetectorSettings(abort_margin=1.5, natural_end_factor=1.0),
    DetectorSettings(check_every=16, min_loop_tokens=3, max_run=8),
    DetectorSettings(min_match_rate=0.8),  # a near-periodic bound that says nothing
    DetectorSettings(recurrence_ngram=3, min_near_loop_tokens=40, min_recurrent_tokens=20),
    DetectorSettings(min_recurrent_tokens=900, min_recurrent_span_tokens=60, min_loop_tokens=900,
                     min_near_loop_tokens=900),  # the span rule decides first
])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(looping_streams().map(lambda t: t[0]), near_loops()),
       st.lists(st.integers(1, 200), min_size=1, max_size=50), gate_settings)
def test_skipping_impossible_checks_never_moves_an_abort(tokens: np.ndarray, sizes: list[int], s: DetectorSettings) -> None:
    """StreamingDetector aborts at the very token where checking every window would."""
    chunks = sizes * (len(tokens) // sum(sizes) + 1)
    assert feed_in(tokens, chunks, s) == reference_abort(tokens, chunks, s)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(looping_streams().map(lambda t: t[0]), near_loops()), gate_settings,
       st.sampled_from(["length", "stop", None]))
def test_is_collapsed_is_analyzes_verdict(tokens: np.ndarray, s: DetectorSettings, finish_reason: str | None) -> None:
    assert is_collapsed(tokens, finish_reason=finish_reason, settings=s) == analyze(
        tokens, finish_reason=finish_reason, settings=s).collapsed


def test_a_near_loop_with_a_mismatch_every_fifth_token_aborts_as_without_skipping() -> None:
    """No 5-gram of such a tail recurs at all, yet the near-periodic rule can hold."""
    rng = np.random.default_rng(3)
    body = np.resize(np.arange(60), 2000)
    body[::5] = rng.integers(1000, 2000, len(body[::5]))
    for tail_noise in (0, 64, 200):
        tokens = np.concatenate([healthy(300), body, healthy(tail_noise, seed=9)])
        for chunks in ([64] * 60, [1] * 3000, [100] * 40):
            assert feed_in(tokens, chunks, DetectorSettings(min_match_rate=0.75)) == reference_abort(
                tokens, chunks, DetectorSettings(min_match_rate=0.75))


def test_short_runs_and_recurrent_spans_abort_as_without_skipping() -> None:
    """Each rule first alone: a run of 96-130 tokens then prose (the run rule holds for a few
    checks only), a drifting loop under settings where the span or the recurrent tail decides."""
    span_first = DetectorSettings(min_recurrent_tokens=900, min_recurrent_span_tokens=60,
                                  min_loop_tokens=900, min_near_loop_tokens=900)
    rng = np.random.default_rng(5)
    phrases = ([*SEVEN], [A, X, C, Y, B, 9, 11, 12], [B, B, Y, C, 10, 13, 14])  # longer than run_unit: no runs
    drift = np.array([t for i in rng.integers(0, 3, 200) for t in phrases[i]])
    for run in (96, 100, 120, 130):
        tokens = np.concatenate([healthy(200), loop([A], run), healthy(500, seed=2)])
        for chunks in ([64] * 20, [7] * 200, [1] * 900):
            assert feed_in(tokens, chunks, DEFAULT_SETTINGS) == reference_abort(tokens, chunks) is not None
    tail_first = DetectorSettings(min_loop_tokens=900, min_near_loop_tokens=900)
    for length in (400, 700):
        tokens = np.concatenate([healthy(200), drift[:length], healthy(500, seed=2)])
        for chunks, s in itertools.product(([64] * 20, [7] * 200), (span_first, tail_first)):
            assert feed_in(tokens, chunks, s) == reference_abort(tokens, chunks, s) is not None


def test_a_healthy_stream_is_rarely_checked_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real reasoning text (GSM8K answers): most checks are skipped, none is needed."""
    from evalkit.evals.detector import _streaming

    calls = []
    monkeypatch.setattr(_streaming, "measure", lambda *a: calls.append(1) or measure(*a))
    tokens = np.asarray(split_text(gsm8k_text())[:16_384])
    d = StreamingDetector()
    for i in range(0, len(tokens), 64):
        assert not d.feed(tokens[i : i + 64])
    assert len(calls) < 0.1 * len(tokens) / 64


def test_after_a_check_no_rule_could_pass_the_next_check_points_do_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """RuleBounds.quiet: no rule can hold before ~75 more tokens of prose, so with 64-token
    check points only every other one takes the new tokens in (aborts are unchanged: see the
    exactness tests against the reference schedule)."""
    from evalkit.evals.detector import _bounds

    calls = []
    original = _bounds.RuleBounds.may_fire
    monkeypatch.setattr(_bounds.RuleBounds, "may_fire", lambda self, *a: calls.append(1) or original(self, *a))
    tokens = np.asarray(split_text(gsm8k_text())[:16_384])
    d = StreamingDetector()
    for i in range(0, len(tokens), 16):
        assert not d.feed(tokens[i : i + 16])
    check_points = len(tokens) // 64
    assert len(calls) <= 0.55 * check_points


# --- look-alikes -----------------------------------------------------------------------------


def test_counting_and_counting_songs_are_healthy() -> None:
    bottles = "".join(f"{n} bottles of beer on the wall, {n} bottles of beer.\nTake one down and pass it around, {n - 1} bottles of beer on the wall.\n\n" for n in range(99, 0, -1))
    assert not analyze_text(bottles, finish_reason="length").collapsed
    assert not analyze_text(", ".join(str(i) for i in range(1, 3000)), finish_reason="length").collapsed


def test_matrices_grids_and_dumps_with_long_runs_of_zeros_are_healthy() -> None:
    """Issue #19: rows of one shape whose cells differ are data, not a loop (the suites hold
    210 such texts, tests/data/detector/layouts.py)."""
    def identity(n: int, sep: str) -> str:
        return "\n".join(sep.join("1" if i == j else "0" for j in range(n)) for i in range(n)) + "\n"
    texts = [identity(20, ","), identity(90, " "), identity(40, ", "), identity(30, " & "),
             "".join(f"{k * 16:08x}: " + " ".join(["0000"] * 8) + "  ................\n" for k in range(200)),
             "".join(f"2024-{1 + d // 28:02d}-{1 + d % 28:02d}," + ",".join(["0"] * 12) + "\n" for d in range(150))]
    for text in texts:
        for finish in ("length", "stop"):
            assert not analyze_text(text, finish_reason=finish).collapsed, (text[:40], finish)
        d = StreamingDetector()
        assert not any(d.feed_text(text[i : i + 40]) for i in range(0, len(text), 40)), text[:40]


def test_known_look_alikes_are_flagged_because_the_rules_are_token_statistics() -> None:
    """Legitimate outputs that no token statistic tells from a loop (see the package docstring)."""
    zero_rows = "".join("  " + ", ".join(["0x00"] * 12) + ",\n" for _ in range(40))  # a C array of zero padding
    assert analyze_text(zero_rows, finish_reason="length").collapsed
    assert not analyze_text(zero_rows, finish_reason="stop").collapsed
    rng = np.random.default_rng(0)  # a bare one-hot matrix: rows from 4 patterns in random order
    one_hot = "".join(" ".join("1" if j == c else "0" for j in range(4)) + "\n" for c in rng.integers(0, 4, 150))
    assert analyze_text(one_hot, finish_reason="length").collapsed
    wide = "1" + " 0" * 120 + "\n"  # the first row of a 121-column identity matrix: 120 zeros
    assert analyze_text(wide, finish_reason="length").evidence.signals == ("token_run",)


# --- streaming text --------------------------------------------------------------------------

tricky_text = st.lists(st.sampled_from(list("ab 's\n\r!1日-") + ["ll", "re", "ve", "  ", "\r\n"]), max_size=120).map("".join)


@given(tricky_text, st.lists(st.integers(1, 12), min_size=1, max_size=40))
def test_feed_text_in_any_chunks_splits_as_the_whole_text(text: str, sizes: list[int]) -> None:
    d = StreamingDetector()
    i = 0
    for size in sizes * (len(text) // sum(sizes) + 1):
        d.feed_text(text[i : i + size])
        i += size
    assert d.finish("stop") == analyze_text(text, finish_reason="stop")


def test_feed_text_aborts_a_loop_written_without_spaces() -> None:
    d = StreamingDetector()
    fed = [d.feed_text(chunk) for chunk in ["我们来计算一下。"] + ["好的"] * 400]
    assert any(fed)
    assert d.finish(None).evidence.unit_text == "好的"
