"""The detector on its test suites: realistic collapsed texts and hard healthy ones.

The suites are tests/data/detector/{positives,negatives}.jsonl, written by make_suites.py.
Run with ``pytest -s`` to see the rates per category.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from evalkit.evals.detector import Analysis, StreamingDetector, analyze, is_collapsed
from evalkit.evals.detector._text import piece_ids, split_pieces
from tests.detector_reference import reference_abort

SUITES = Path(__file__).parent / "data" / "detector"
MIN_RECALL = 0.99
MAX_FALSE_POSITIVE_RATE = 0.01
MIN_SAVED = 0.80


@dataclass(frozen=True)
class Sample:
    id: str
    category: str
    finish_reason: str
    pieces: list[str]
    tokens: np.ndarray
    onset: int | None
    """Token index where a positive's loop starts (from its ``loop_start`` character offset)."""


@cache
def suite(name: str) -> tuple[Sample, ...]:
    samples = []
    for line in (SUITES / f"{name}.jsonl").read_text(encoding="utf-8").split("\n")[:-1]:  # not splitlines(): texts hold U+2028
        row = json.loads(line)
        pieces = split_pieces(row["text"])
        onset = len(split_pieces(row["text"][: row["loop_start"]])) if "loop_start" in row else None
        samples.append(Sample(row["id"], row["category"], row["finish_reason"], pieces, piece_ids(pieces), onset))
    return tuple(samples)


@cache
def verdicts(name: str) -> tuple[Analysis, ...]:
    return tuple(analyze(s.tokens, finish_reason=s.finish_reason, pieces=s.pieces) for s in suite(name))


@dataclass(frozen=True)
class Streamed:
    aborted_at: int | None
    result: Analysis
    chunks: tuple[int, ...]


@cache
def streamed(name: str) -> tuple[Streamed, ...]:
    """Each sample fed in random chunk sizes (1-160 tokens, seeded), as a server streams it."""
    rng = np.random.default_rng(1596)
    out = []
    for s in suite(name):
        d = StreamingDetector()
        i, chunks = 0, []
        while i < len(s.tokens):
            chunks.append(size := int(rng.integers(1, 161)))
            if d.feed(s.tokens[i : i + size], s.pieces[i : i + size]):
                break
            i += size
        out.append(Streamed(d.aborted_at, d.finish(s.finish_reason), tuple(chunks)))
    return tuple(out)


def by_category(name: str, values: list[bool]) -> Iterator[tuple[str, int, int]]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s, v in zip(suite(name), values):
        counts[s.category][0] += v
        counts[s.category][1] += 1
    for category, (hits, total) in counts.items():
        yield category, hits, total


def test_suites_are_large_and_varied_enough_for_the_rates_to_mean_something() -> None:
    for name in ("positives", "negatives"):
        samples = suite(name)
        assert len(samples) >= 400
        assert min(total for _, _, total in by_category(name, [True] * len(samples))) >= 30
        lengths = [len(s.tokens) for s in samples]
        assert min(lengths) >= 500 and max(lengths) >= 7000
    finishes = {s.finish_reason for s in suite("negatives")}
    assert finishes == {"length", "stop"}  # long healthy text hits the cap too


def test_recall_on_collapsed_texts() -> None:
    collapsed = [a.collapsed for a in verdicts("positives")]
    print("\nrecall on positives:")
    for category, hits, total in by_category("positives", collapsed):
        print(f"  {category:18s} {hits:3d}/{total:<3d} {hits / total:6.1%}")
    print(f"  {'all':18s} {sum(collapsed):3d}/{len(collapsed):<3d} {np.mean(collapsed):6.1%}")
    assert np.mean(collapsed) >= MIN_RECALL


def test_false_positive_rate_on_hard_negatives() -> None:
    flagged = [a.collapsed for a in verdicts("negatives")]
    print("\nfalse positives on hard negatives:")
    for category, hits, total in by_category("negatives", flagged):
        print(f"  {category:18s} {hits:3d}/{total:<3d} {hits / total:6.1%}")
    print(f"  {'all':18s} {sum(flagged):3d}/{len(flagged):<3d} {np.mean(flagged):6.1%}")
    assert np.mean(flagged) <= MAX_FALSE_POSITIVE_RATE


def test_the_onset_found_is_never_much_later_than_where_the_loop_starts() -> None:
    """A periodic tail's onset is exact up to the first copy of the unit; a recurrence excursion
    starts once the loop's n-grams recur, a little after its first cycle. The onset found can be
    earlier than the generator's: a prefix that already holds the loop's unit is part of it."""
    for s, a in zip(suite("positives"), verdicts("positives")):
        if not a.collapsed:
            continue  # the recall test accounts for those
        assert a.evidence.onset is not None and s.onset is not None
        periodic = {"periodic_tail", "near_periodic_tail"} & set(a.evidence.signals)
        assert a.evidence.onset - s.onset <= (a.evidence.period + 5 if periodic else 64), s.id


@pytest.mark.parametrize("name", ["positives", "negatives"])
def test_streaming_in_random_chunks_equals_analyze_on_the_whole_text(name: str) -> None:
    for s, whole, run in zip(suite(name), verdicts(name), streamed(name)):
        if run.aborted_at is None:
            assert run.result == whole, s.id
        else:  # what finish() returns is the analysis of what was received, cut by the abort
            assert run.result == analyze(s.tokens[: run.aborted_at], finish_reason="aborted", pieces=s.pieces[: run.aborted_at]), s.id


def test_early_abort_never_touches_a_healthy_text() -> None:
    assert [s.id for s, run in zip(suite("negatives"), streamed("negatives")) if run.aborted_at is not None] == []


def test_skipped_checks_never_move_an_abort() -> None:
    """Every positive is aborted at the token where checking every window would abort it."""
    for s, run in zip(suite("positives"), streamed("positives")):
        assert run.aborted_at == reference_abort(s.tokens, run.chunks), s.id


@pytest.mark.parametrize("name", ["positives", "negatives"])
def test_the_verdict_only_check_agrees_with_analyze_on_every_sample(name: str) -> None:
    for s, whole in zip(suite(name), verdicts(name)):
        assert is_collapsed(s.tokens, finish_reason=s.finish_reason) == whole.collapsed, s.id


def test_early_abort_never_changes_a_verdict() -> None:
    for name in ("positives", "negatives"):
        for s, whole, run in zip(suite(name), verdicts(name), streamed(name)):
            assert run.result.verdict == whole.verdict, s.id


def test_early_abort_saves_most_of_the_tokens_a_collapse_would_spend() -> None:
    """Saved = tokens after the abort / tokens after the loop's onset, over the positives cut at
    max_tokens (what the engine would have spent on the loop without the abort)."""
    saved: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    latency = []
    for s, run in zip(suite("positives"), streamed("positives")):
        if s.finish_reason != "length" or s.onset is None:
            continue
        stop = run.aborted_at if run.aborted_at is not None else len(s.tokens)
        saved[s.category][0] += len(s.tokens) - stop
        saved[s.category][1] += len(s.tokens) - s.onset
        latency.append(stop - s.onset)
    print("\ntokens saved by early abort (of those generated after the onset):")
    for category, (kept, spent) in saved.items():
        print(f"  {category:18s} {kept / spent:6.1%}")
    total = sum(k for k, _ in saved.values()) / sum(s for _, s in saved.values())
    print(f"  {'all':18s} {total:6.1%}   abort latency after onset: median {np.median(latency):.0f}, p95 {np.percentile(latency, 95):.0f} tokens")
    assert total >= MIN_SAVED


@pytest.mark.slow  # regenerates both suites (~1 min): .ci/run runs it
def test_the_committed_suites_are_what_the_seeded_generator_writes() -> None:
    done = subprocess.run([sys.executable, str(SUITES / "make_suites.py"), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
