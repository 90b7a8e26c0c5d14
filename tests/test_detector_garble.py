"""The detector's stutter and soup signals: what they count, what they leave alone, and how a
stream aborts on them (issue 30). The suites in tests/data/detector measure their rates; these
tests pin the behaviour on the texts of the bug reports and on small constructed cases."""

from __future__ import annotations

import json
import re
from importlib import resources

import numpy as np
import pytest

from evalkit.evals.detector import (
    DEFAULT_SETTINGS,
    DetectorSettings,
    StreamingDetector,
    analyze,
    analyze_text,
    is_text_collapsed,
)
from evalkit.evals.detector._chars import codepoints, piece_ends, soup_events
from evalkit.evals.detector._garble import UPDATE_EVERY
from evalkit.evals.detector._stutter import doubled_flags, glued_flags, piece_heads
from evalkit.evals.detector._text import piece_ids, split_pieces
from evalkit.evals.repetition import RepetitionSettings, scan_texts
from evalkit.render.details import event_facts
from evalkit.render.html_details import marked_excerpt
from evalkit.sim.tokens import token_id, tokenize
from tests.detector_reference import reference_abort

PARAGRAPH = (
    "The capital of France is Paris. It lies on the Seine in the north of the country, and it has been the "
    "seat of the government for most of the last thousand years. Visitors come for the museums, the food "
    "and the long walks along the river, and many of them stay for a week or more. In spring the parks fill "
    "with people, the cafes put their tables on the pavement, and the whole city seems to slow down a little. "
    "The metro reaches almost every corner, so a car is rarely needed. Most residents live in flats, often "
    "in buildings that are more than a century old, and the rents are among the highest in Europe. "
)


def prose(paragraphs: int, start: int = 0) -> str:
    """Distinct healthy paragraphs (GSM8K train problems): no loop in them or between them."""
    path = resources.files("evalkit").joinpath("data", "gsm8k", "train.jsonl")
    with path.open("r", encoding="utf-8") as lines:
        rows = [json.loads(line) for _, line in zip(range(start + paragraphs), lines)][start:]
    return "".join(row["question"] + "\n\n" for row in rows)


def doubled(text: str) -> str:
    """Every word written twice in place, as in ik_llama.cpp #2006."""
    return " ".join(f"{w} {w}" for w in text.split())


def flags_of(text: str) -> list[str]:
    """The pieces of ``text`` that doubled_flags marks."""
    pieces = split_pieces(text)
    return [p for p, f in zip(pieces, doubled_flags(piece_ids(pieces), pieces, 4)) if f]


# --- stutter ---------------------------------------------------------------------------------


def test_a_paragraph_with_every_word_doubled_is_stutter_and_the_evidence_shows_it() -> None:
    text = doubled(PARAGRAPH)  # ~200 words: judged healthy before issue 30
    assert len(text.split()) >= 200
    a = analyze_text(text, finish_reason="stop")
    assert a.collapsed
    assert a.evidence.signals == ("stutter",) and a.evidence.categories == ("stutter",)
    # "The The" are two tokens ("The", " The"), as with a BPE tokenizer, but one word written
    # twice (issue 48: the stutter rules compare words without their leading space)
    assert a.evidence.onset == 0 and a.evidence.period == 1
    assert a.evidence.examples[:3] == ("The The", " capital capital", " of of")
    assert a.metrics.doubled_rate is not None and a.metrics.doubled_rate > 0.9


def test_the_stutter_of_the_report_is_counted_word_by_word() -> None:
    assert flags_of("The capital capital of of France France is is Paris Paris..") == [
        " capital", " capital", " of", " of", " France", " France", " is", " is", " Paris", " Paris"]


def test_only_a_unit_with_a_word_written_two_or_three_times_counts() -> None:
    assert flags_of("we walked over over the hill") == [" over", " over"]
    assert flags_of("we walked over over over the hill") == [" over", " over", " over"]  # issue 36
    assert flags_of("we walked over over over over the hill") == []  # four copies: a run, the loop rules' case
    assert flags_of("Herr Schulze Schulze kam") == [" Schulze", " Schulze"]
    assert flags_of("total 1,000,000 and 0,0,1 and 0x00, 0x00,") == []  # numbers are data
    assert flags_of("row one\nrow one\nrow two") == []  # a doubled line is layout
    assert flags_of("他们慢慢地走，谢谢") == ["慢", "慢", "谢", "谢"]  # CJK: one character is a word


def test_every_word_written_three_times_is_stutter() -> None:
    a = analyze_text(" ".join(f"{w} {w} {w}" for w in prose(3).split()), finish_reason="length")
    assert a.evidence.signals == ("stutter",)
    assert a.evidence.examples[1].split() == [a.evidence.examples[1].split()[0]] * 3  # all three copies shown


def test_a_word_glued_to_its_own_copy_is_stutter() -> None:
    """"thethe cat satsat" (issue 36): one piece per word, so no two tokens are equal."""
    count = iter(range(10**6))
    text = re.sub(r"[A-Za-z]+", lambda m: m.group() * 2 if next(count) % 3 else m.group(), prose(4))  # 2 words in 3
    a = analyze_text(text, finish_reason="length")
    assert a.evidence.signals == ("stutter",)
    pieces = split_pieces("thethe cat satsat on the matmat, informationinformation haha bonbon")
    text = "".join(pieces)
    glued = glued_flags(piece_heads(piece_ends(pieces), codepoints(text)), piece_ends(pieces), codepoints(text))
    assert [p for p, f in zip(pieces, glued) if f] == ["thethe", " satsat", " matmat", " informationinfor", "mation", " haha", " bonbon"]


def test_a_healthy_glued_word_now_and_then_is_not_stutter() -> None:
    text = PARAGRAPH + "We had couscous and bonbons in the murmur of the room, haha. " + PARAGRAPH
    assert not analyze_text(text, finish_reason="stop").collapsed


def test_healthy_text_that_doubles_a_word_now_and_then_is_not_stutter() -> None:
    text = PARAGRAPH + "What he had had was not enough, and that that was the plan. Bye bye, Bora Bora. " + PARAGRAPH
    a = analyze_text(text, finish_reason="stop")
    assert not a.collapsed and a.metrics.doubled_rate is not None and 0 < a.metrics.doubled_rate < 0.1


def test_asked_for_repetition_is_never_stutter() -> None:
    a = analyze_text('Sure! Here is "ha" 2000 times:\n\n' + "ha " * 2000, finish_reason="stop")
    assert a.evidence.categories == ("loop",)  # the known look-alike, not a stutter


def test_sparser_stutter_needs_a_longer_stretch() -> None:
    rng = np.random.default_rng(0)
    words = prose(12).split()
    half = " ".join(f"{w} {w}" if rng.random() < 0.5 else w for w in words)
    assert analyze_text(half, finish_reason="length").evidence.signals == ("stutter",)
    assert not analyze_text(" ".join(half.split()[:60]), finish_reason="length").collapsed


# --- soup ------------------------------------------------------------------------------------


def test_a_replacement_character_is_soup_and_shown_where_it_is() -> None:
    a = analyze_text("The formula C\ufffdH12O6 comes to mind when we think of glucose.", finish_reason="stop")
    assert a.collapsed and a.evidence.signals == ("invalid_chars",) and a.evidence.categories == ("soup",)
    assert "C\ufffdH12O6" in a.evidence.examples[0]
    assert a.evidence.period == 0 and a.evidence.unit_text is None


def test_control_characters_are_soup_and_shown_escaped() -> None:
    a = analyze_text("The total is 4\x01 dollars.", finish_reason="stop")
    assert a.evidence.signals == ("invalid_chars",) and "\\x01" in a.evidence.examples[0]
    assert not analyze_text("a\tb\nc\r\nd", finish_reason="stop").collapsed  # tab and line breaks are text


def test_a_form_feed_or_vertical_tab_is_text_not_soup() -> None:
    """The GNU licences, CPython's email package and many C headers break pages with U+000C."""
    licence = PARAGRAPH + "\f\n\t    GNU GENERAL PUBLIC LICENSE\n" + PARAGRAPH + "\v" + PARAGRAPH
    assert not analyze_text(licence, finish_reason="stop").collapsed
    assert not analyze_text(licence.replace("\n", "\r\n"), finish_reason="stop").collapsed


def test_a_replacement_character_ending_a_cut_text_is_a_cut_character() -> None:
    text = PARAGRAPH + "caf\ufffd"
    assert not analyze_text(text, finish_reason="length").collapsed  # max_tokens cut a multi-byte character
    assert analyze_text(text, finish_reason="stop").collapsed


def test_letters_of_two_alphabets_written_together_are_script_switches() -> None:
    assert soup_events("Schul.scalablytyped373ьallis")[1].tolist() == [23]  # "ьa": dated at the "a"
    assert soup_events("Пpивет")[1].size == 2  # a Latin p inside a Russian word
    for healthy in ["使用PyTorch的tensor进行计算", "PyTorchのtensorをGPUに転送する", "使用 PyTorch 的 tensor",
                    "7 μm thick, ΔT = 4 K, α = 0.05", "한국어(韓國語)", "Мы используем PyTorch для обучения",
                    "https://example.com/a3f9c2?x=1", "مرحبا بالعالم",
                    "--mtime으로 날짜를", "앞으로 %s초",  # Korean particles on a Latin word
                    'msgstr "%sФайл\\nФайл %1$sФайл"']:  # printf conversions and escapes in a catalogue
        assert soup_events(healthy)[1].size == 0, healthy


def test_real_words_in_random_order_are_soup() -> None:
    """Word salad (issue 36): bare words with nothing between them, or words shuffled with
    their punctuation, so that sentences end before lowercase words."""
    words = re.findall(r"[A-Za-z]+", prose(6))
    rng = np.random.default_rng(1)
    bare = " ".join(rng.permutation(words)[:120].tolist())
    assert analyze_text(bare, finish_reason="length").evidence.signals == ("unpunctuated_words",)
    shuffled = " ".join(rng.permutation(prose(6).split())[:150].tolist())
    a = analyze_text(shuffled, finish_reason="length")
    assert "lowercase_sentences" in a.evidence.signals and a.evidence.categories == ("soup",)
    assert all(". " in example or "! " in example or "? " in example for example in a.evidence.examples)


def test_prose_lists_and_abbreviations_are_not_salad() -> None:
    long_sentence = ("I think that the best way to do this would be to first make sure that you have all of the "
                     "things that you need and then go ahead and start putting everything together")  # 37 words
    abbreviations = "We bought apples, pears etc. and then went home. Prices vs. quality, i.e. the usual. " + PARAGRAPH
    numbered = "\n".join(f"  {n}. the {w} clause applies" for n, w in zip(("i", "ii", "iii", "iv", "v"), ("first", "next", "moral", "other", "last")))
    for text in (long_sentence + ". " + PARAGRAPH, abbreviations * 2, numbered + "\n" + PARAGRAPH):
        assert not analyze_text(text, finish_reason="stop").collapsed, text[:40]


def test_a_multiscript_soup_is_flagged_from_where_it_starts() -> None:
    soup = "Demp Schul.scalablytyped373ьallis gutterぼdiaeftry Fallon572 Sransself recless ${INFRINGEMENT Консульта Cr"
    assert not analyze_text(soup, finish_reason="length").collapsed  # one switch: not enough alone
    garbage = " ".join(["дом" + "ain", "Fallon" + "ьx", "код" + "Stream", "вид" + "eo", "tmp" + "ель"] * 4)
    text = PARAGRAPH + garbage
    a = analyze_text(text, finish_reason="length")
    assert a.evidence.signals == ("script_switches",) and a.evidence.categories == ("soup",)
    assert a.evidence.onset is not None and a.evidence.onset >= len(split_pieces(PARAGRAPH)) - 1
    assert a.metrics.script_switch_peak is not None and a.metrics.script_switch_peak >= 3


def test_texts_without_pieces_measure_no_stutter_or_soup() -> None:
    """Token ids alone cannot say which unit holds a word or which characters were written."""
    pieces = split_pieces(doubled(PARAGRAPH) + "C\ufffdH")
    a = analyze(piece_ids(pieces), finish_reason="stop")
    assert not a.collapsed and a.metrics.doubled_rate is None and a.metrics.invalid_chars is None
    assert analyze(piece_ids(pieces), finish_reason="stop", pieces=pieces).evidence.categories == ("stutter", "soup")


def test_the_verdict_only_check_reads_the_text_too() -> None:
    assert is_text_collapsed(doubled(PARAGRAPH), finish_reason="stop")
    assert is_text_collapsed("C\ufffdH12O6", finish_reason="stop")
    assert not is_text_collapsed(PARAGRAPH, finish_reason="stop")


# --- streaming -------------------------------------------------------------------------------


def stream(text: str, chunks: list[int], s: DetectorSettings = DEFAULT_SETTINGS) -> StreamingDetector:
    pieces = split_pieces(text)
    tokens = piece_ids(pieces)
    d, n = StreamingDetector(s), 0
    for size in chunks:
        if n >= len(tokens) or d.feed(tokens[n : n + size], pieces[n : n + size]):
            break
        n += size
    return d


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["stutter", "soup"])
def test_a_stream_aborts_where_the_unshortened_reference_does_and_the_verdict_holds(kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, 5000))
    prefix = prose(int(rng.integers(0, 8)), start)
    garbled = {"stutter": doubled(prose(3, start + 10)),
               "soup": " ".join(["домain", "Fallonьx", "кодStream", "видeo"] * 10) if seed % 2 else prose(2, start + 10).replace("e", "\ufffd", 2)}[kind]
    text = prefix + garbled + prose(20, start + 20)  # a figures update comes after the garbling
    pieces = split_pieces(text)
    chunks = [int(c) for c in rng.integers(1, 161, size=len(pieces))]
    d = stream(text, chunks)
    assert d.aborted_at is not None and d.aborted_at == reference_abort(piece_ids(pieces), chunks, pieces=pieces)
    assert d.aborted_at >= len(split_pieces(prefix))
    assert d.finish("length").evidence.categories == analyze_text(text, finish_reason="length").evidence.categories == (kind,)


def test_a_text_only_stream_aborts_on_stutter_and_soup() -> None:
    """feed_text: the path of an engine that streams text and no token ids (ATOM)."""
    for text in [prose(3) + doubled(prose(12, 10)), prose(3) + "x\ufffdy " + prose(16, 10)]:
        d = StreamingDetector()
        for i in range(0, len(text), 7):
            if d.feed_text(text[i : i + 7]):
                break
        assert d.aborted_at is not None and d.aborted_at < len(split_pieces(text))
        assert d.finish("length").collapsed


@pytest.mark.parametrize("seed", range(4))
def test_an_id_stream_with_its_text_judges_stutter_and_soup_on_the_text(seed: int) -> None:
    """vLLM and SGLang stream ids and the text they decode to, in chunks whose text need not
    split where the ids do: the loop rules read the ids, stutter and soup the text's pieces, so
    the verdict is the text-only one, the abort implies the verdict on what had arrived, and the
    evidence is the text's."""
    rng = np.random.default_rng(seed)
    garbled = doubled(prose(3, 40)) if seed % 2 else prose(2, 40).replace("e", "\ufffd", 2)
    text = prose(int(rng.integers(1, 6)), 7 * seed) + garbled + prose(20, 60)
    tokens = tokenize(text)  # another tokenizer's tokens: not the detector's pieces
    ids = [token_id(t) for t in tokens]
    d, n, fed = StreamingDetector(), 0, ""
    while n < len(tokens):
        size = int(rng.integers(1, 40))
        chunk = "".join(tokens[n : n + size])
        fed += chunk
        n += size
        if d.feed(ids[n - size : n], text=chunk):
            break
    kind = "stutter" if seed % 2 else "soup"
    assert d.aborted_at is not None and d.aborted_at < len(ids)
    assert analyze(ids[:n], text=fed, finish_reason="aborted").evidence.categories == (kind,)
    whole = d.finish("length")
    assert whole.evidence == analyze(ids[:n], text=fed, finish_reason="aborted").evidence
    text_only = analyze_text(fed, finish_reason="aborted").evidence
    assert (whole.evidence.categories, whole.evidence.onset, whole.evidence.excerpt, whole.evidence.examples) == (
        text_only.categories, text_only.onset, text_only.excerpt, text_only.examples)
    assert whole.metrics.n_tokens == n and whole.metrics.doubled_rate == analyze_text(fed).metrics.doubled_rate


def test_a_stream_gives_text_with_every_chunk_or_with_none() -> None:
    d = StreamingDetector()
    d.feed([1, 2], text="a b")
    with pytest.raises(ValueError, match="text with every chunk"):
        d.feed([3])
    with pytest.raises(ValueError, match="pieces or text"):
        StreamingDetector().feed([1], ["a"], text="a")


def test_a_replacement_character_at_the_end_of_what_arrived_waits_for_the_next_piece() -> None:
    pieces = split_pieces(prose(16)) + ["caf", "\ufffd"]
    assert len(pieces) > UPDATE_EVERY  # the stutter and soup figures are updated at this check
    d = StreamingDetector(DetectorSettings(check_every=1))
    assert not d.feed(piece_ids(pieces), pieces)  # maybe a character cut in two
    more = split_pieces(" ok. " + prose(16, 20))
    assert d.feed(piece_ids(more), more)  # followed by more text: it was garbage


# --- where the verdict goes --------------------------------------------------------------------


def test_gsm8k_answers_are_scanned_for_stutter_and_soup_too() -> None:
    answers = [prose(1), doubled(prose(2, 5)), prose(1, 9) + " C\ufffdH12O6", prose(1, 12)]
    scanned = scan_texts(answers, ["stop"] * 4, RepetitionSettings())
    assert scanned["collapsed"] == 2 and scanned["collapsed_ids"] == [1, 2]


def test_the_report_names_the_kind_and_marks_the_onset_of_a_soup() -> None:
    a = analyze_text(prose(2) + "and then the formula C\ufffdH12O6 comes to mind.", finish_reason="stop")
    sample = {"id": "p1", **a.to_dict()}
    assert event_facts(sample)[:2] == ["soup", "signals invalid_chars"] and "tokens garbled" in event_facts(sample)[4]
    assert '<mark class="onset">\ufffdH12O6</mark>' in marked_excerpt(sample)
    assert event_facts({"evidence": {"signals": ["token_run"]}})[0] == "loop"  # stored before kinds were recorded
