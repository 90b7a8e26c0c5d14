"""The detector's language-agnostic rules and the held-out corpus they are measured on
(issue 48): each rule's property on small constructed texts, a text too short to judge, the
corpus split by document, and the figures script on a tiny slice of it."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from evalkit.evals.detector import DEFAULT_SETTINGS, StreamingDetector, analyze, analyze_text
from evalkit.evals.detector._text import piece_ids, split_pieces

DATA = Path(__file__).resolve().parent / "data" / "detector"
sys.path.insert(0, str(DATA))

import corpus  # noqa: E402  (tests/data/detector, put on the path above)
import rates  # noqa: E402


def prose(paragraphs: int, start: int = 0) -> str:
    """Distinct healthy paragraphs: GSM8K training questions."""
    rows = (Path(corpus.S.ROOT) / "evalkit/data/gsm8k/train.jsonl").read_text(encoding="utf-8").splitlines()
    return "".join(json.loads(row)["question"] + "\n\n" for row in rows[start : start + paragraphs])


def shuffled_pieces(text: str, seed: int = 48) -> str:
    """``text``'s own pieces in random order: nothing repeats, no alphabet changes."""
    pieces = split_pieces(text)
    random.Random(seed).shuffle(pieces)
    return "".join(pieces)


def signals(text: str, finish_reason: str = "length") -> tuple[str, ...]:
    return analyze_text(text, finish_reason=finish_reason).evidence.signals


# --------------------------------------------------------------------------------------------
# unordered_pieces: adjacent pieces no more related than in a shuffle of them


def test_a_texts_own_pieces_in_random_order_are_soup_and_the_text_in_order_is_not() -> None:
    text = prose(40)
    assert len(split_pieces(text)) > 2 * DEFAULT_SETTINGS.soup_block
    assert "unordered_pieces" not in signals(text)
    soup = analyze_text(text[:300] + shuffled_pieces(text), finish_reason="length")
    assert soup.collapsed and "unordered_pieces" in soup.evidence.signals and soup.evidence.categories == ("soup",)


def test_source_code_shuffled_after_its_opening_is_soup_in_any_script() -> None:
    code = Path(corpus.__file__).read_text(encoding="utf-8")
    assert "unordered_pieces" not in signals(code[:8000])
    assert "unordered_pieces" in signals(code[:600] + shuffled_pieces(code[600:8000]))
    catalogue = next(d["text"] for d in corpus.load_documents() if d["kind"] == "gettext_catalogue" and d["lang"] == "ru")
    assert "unordered_pieces" not in signals(catalogue)
    assert "unordered_pieces" in signals(catalogue[:300] + shuffled_pieces(catalogue[300:]))


def test_order_is_not_judged_where_the_pieces_are_numbers_or_one_word_repeated() -> None:
    counting = "Sure, counting to 800:\n\n" + " ".join(str(i) for i in range(1, 801))
    assert "unordered_pieces" not in signals(counting, "stop")
    assert "unordered_pieces" not in signals("ha " * 2000, "stop")  # a run: the loop rules' case


def test_a_stream_finds_the_unordered_blocks_analyze_finds() -> None:
    text = prose(10) + shuffled_pieces(prose(30, start=40))
    pieces = split_pieces(text)
    ids = piece_ids(pieces)
    stream = StreamingDetector()
    at = 0
    while at < len(ids) and not stream.feed(ids[at : at + 100], pieces[at : at + 100]):
        at += 100
    assert stream.aborted_at is not None
    whole = analyze(ids[: stream.aborted_at], finish_reason="aborted", pieces=pieces[: stream.aborted_at])
    assert "unordered_pieces" in whole.evidence.signals


# --------------------------------------------------------------------------------------------
# stutter read as words, whatever space stands before them


def test_a_word_written_again_after_a_space_is_stutter_like_a_spaced_one() -> None:
    lines = prose(12).split("\n\n")
    text = "\n".join(" ".join(f"{w} {w}" for w in line.split()) for line in lines)
    # the first word of each line has no space before it, its copy has one: the same word
    assert "Natalia Natalia" in text or text.split()[0] == text.split()[1]
    assert "stutter" in signals(text)


def test_a_phrase_of_several_pieces_written_twice_in_place_is_stutter() -> None:
    words = prose(12).split()
    phrases = [" ".join(words[i : i + 3]) for i in range(0, len(words) - 3, 3)]
    assert "stutter" in signals(" ".join(f"{p} {p}" for p in phrases))  # "sold clips to sold clips to"


def test_many_lines_written_again_are_stutter_and_one_line_re_read_is_not() -> None:
    lines = [line for line in prose(20).replace(". ", ".\n").split("\n") if line.strip()]
    assert "stutter" in signals("\n".join(x for line in lines for x in (line, line)))
    once = lines[:10] + lines[9:]  # a reasoning trace reading one line again
    assert "stutter" not in signals("\n".join(once))
    rows = "\n".join(f"{'-' * (k % 7)}XXXXXX{'-' * (9 - k % 7)}" for k in range(60) for _ in range(2))
    assert "stutter" not in signals(rows)  # bitmap rows doubled hold no two words


# --------------------------------------------------------------------------------------------
# a sentence repeated; a text too short to judge


def test_one_sentence_written_twelve_times_is_a_loop_however_short() -> None:
    a = analyze_text("I am fine. " * 12, finish_reason="stop")
    assert a.metrics.n_tokens < DEFAULT_SETTINGS.min_loop_tokens
    assert a.collapsed and a.evidence.signals == ("repeated_unit",) and a.evidence.categories == ("loop",)
    assert not a.too_short


@pytest.mark.parametrize("end", ["\n", " \n\n", "\t"])
def test_one_sentence_written_twelve_times_is_a_loop_whatever_whitespace_ends_it(end: str) -> None:
    # `evalkit detect FILE` reads a file's last newline; a stop can follow a line break.
    a = analyze_text(("The cat sat on the mat. " * 12).rstrip() + end, finish_reason="stop")
    assert a.collapsed and a.evidence.signals == ("repeated_unit",) and not a.too_short
    # The evidence is the sentence: 7 tokens a copy, from the second copy (the first opens the
    # text without its space) to the end, not the empty unit of a rule that found no loop.
    assert (a.evidence.period, a.evidence.onset, a.evidence.unit_text) == (7, 1, " cat sat on the mat. The")


def test_a_short_healthy_text_is_too_short_to_judge_and_a_long_one_is_not() -> None:
    short = analyze_text("I am fine. " * 5, finish_reason="stop")
    assert short.verdict == "healthy" and short.too_short
    assert short.metrics.n_tokens < DEFAULT_SETTINGS.min_judged_tokens
    long = analyze_text(prose(3), finish_reason="stop")
    assert long.verdict == "healthy" and not long.too_short


def test_a_repeated_unit_without_a_word_is_layout_not_a_sentence() -> None:
    row = "  " + "0xff, " * 12 + "\n"
    assert "repeated_unit" not in signals("unsigned char data[] = {\n" + row * 3 + "};\n", "stop")


# --------------------------------------------------------------------------------------------
# the corpus: split once by document, figures per category, language and text type


@pytest.fixture(scope="module")
def documents() -> list[dict[str, str]]:
    return corpus.load_documents()


def test_every_document_is_in_one_half_only_fixed_by_the_seed(documents: list[dict[str, str]]) -> None:
    names = [d["doc"] for d in documents]
    assert len(names) == len(set(names)) > 800
    halves = {name: corpus.half_of(name) for name in names}
    assert set(halves.values()) == {"tuning", "heldout"}
    assert 0.4 < sum(h == "heldout" for h in halves.values()) / len(halves) < 0.6
    tuning = corpus.Half("tuning", documents, positives=1, composites=1)
    heldout = corpus.Half("heldout", documents, positives=1, composites=1)
    assert not {d["doc"] for d in tuning.docs} & {d["doc"] for d in heldout.docs}
    assert len(tuning.docs) + len(heldout.docs) == len(documents)


def test_every_text_of_a_half_is_made_of_that_halfs_documents(documents: list[dict[str, str]]) -> None:
    some = [d for d in documents if d["kind"] in ("code", "ui_strings", "man_page", "reasoning")][::6]
    half = corpus.Half("heldout", some, positives=1, composites=1)
    rows = half.negatives() + half.positives()
    assert {r["group"] for r in rows} == {"healthy", "stutter", "soup", "loop"}
    assert all(corpus.half_of(str(r["doc"])) == "heldout" for r in rows)
    positives = [r for r in rows if r["group"] != "healthy"]
    assert all(0 <= int(r["loop_start"]) < len(str(r["text"])) for r in positives)


def test_the_figures_script_tabulates_recall_and_false_positives_on_a_slice(documents: list[dict[str, str]]) -> None:
    some = [d for d in documents if d["kind"] in ("code", "ui_strings", "reasoning")][::10]
    half = corpus.Half("tuning", some, positives=1, composites=0)
    rows = half.negatives()[:6] + half.positives()
    table = rates.corpus_figures(rows, DEFAULT_SETTINGS)
    assert "| category | flagged | rate |" in table and "| language | flagged | rate |" in table
    assert "| text type | flagged | rate |" in table
    for category in corpus.STUTTER + corpus.SOUP + corpus.LOOP:
        assert f"| {category} | " in table
    counts = [int(line.split("|")[2].split("/")[1]) for line in table.splitlines() if line.startswith("| soup_")]
    assert counts == [1] * len(corpus.SOUP)
    assert all(len(line) <= 80 for line in table.splitlines() if line.startswith("| ") and "+" not in line)
