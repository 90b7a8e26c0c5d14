"""Generate the "wild" suites of the stutter and soup rules from real text (issue 36).

    python3 tests/data/detector/wild.py [--check]

garbled.py writes its texts from the project's own material; these suites are built from text
written apart from the project, copied from a Debian machine into wild_sources.jsonl (see
wild_sources.py: licences, source files with form feeds, gettext catalogues in 48 languages,
manual pages translated into 21). The output is a pure function of that file, SEED, this file
and the detector's split_text (it counts tokens):

* wild_negatives.jsonl, healthy text as written: ``form_feed`` (GPL-1, LGPL-2 and 2.1 and
  source files with their U+000C page breaks, some with CRLF line ends), ``licence`` (other
  licences, some with CRLF line ends), ``gettext_catalogue`` (UI strings and their
  translations), ``man_page_i18n`` (prose in many languages and scripts) and ``multilingual``
  (paragraphs of manual pages and catalogues in two to four languages, one after another).
* wild_positives.jsonl, a healthy prefix of real text, then real text corrupted:
  ``tripled`` (60-100% of the words written three times in place), ``glued`` (60-100% of the
  words glued to their own copy, "thethe cat satsat") and ``word_salad`` (the words of a real
  text of one language in random order: a passage's words shuffled as they are written, with
  their punctuation, or bare words drawn from it). Each has ``loop_start``, the character
  offset where the corruption begins.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_suites as S  # puts the repository on sys.path too

from evalkit.evals.detector._text import split_pieces

N_PER_CATEGORY = 40
MAX_TOKENS = 4000
SOURCES = [json.loads(line) for line in (HERE / "wild_sources.jsonl").read_text(encoding="utf-8").split("\n")[:-1]]
SPACED = {r["lang"] for r in SOURCES if r["kind"] == "man_page"} - {"ja", "ko", "zh_CN", "zh_TW"}
"""Languages written with spaces between words, whose manual pages the corruptions are made of."""
_LETTER = re.compile(r"[^\W\d_]")


def _texts(kind: str | tuple[str, ...], lang: str | None = None) -> list[str]:
    kinds = (kind,) if isinstance(kind, str) else kind
    return [r["text"] for r in SOURCES if r["kind"] in kinds and (lang is None or r["lang"] == lang)]


def _window(rng: random.Random, text: str, tokens: int, must_hold: str = "") -> str:
    """About ``tokens`` tokens of ``text`` from the start of a random line (a line before a
    ``must_hold`` character when given, so the window holds one; else a line with at least
    half of the text or ``tokens`` after it)."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    total = S.ntok(text)
    if must_hold:
        first = text.index(must_hold)
        starts = [s for s in starts if s <= first and first - s < 2 * tokens] or [0]
    else:  # characters stand in for tokens here: about 4.5 a token in every source
        room = len(text) * min(tokens, total // 2) // max(total, 1)
        starts = [s for s in starts if len(text) - s >= room] or [0]
    return S.cut_tokens(text[rng.choice(starts):], tokens)


def _crlf(rng: random.Random, text: str) -> str:
    """A third of the texts with CRLF line ends, as a file written on Windows."""
    return text.replace("\n", "\r\n") if rng.random() < 1 / 3 else text


def neg_form_feed(rng: random.Random, tokens: int) -> str:
    text = rng.choice([t for t in _texts(("licence", "form_feed_source")) if "\f" in t])
    return _crlf(rng, _window(rng, text, tokens, must_hold="\f"))


def neg_licence(rng: random.Random, tokens: int) -> str:
    return _crlf(rng, _window(rng, rng.choice([t for t in _texts("licence") if "\f" not in t]), tokens))


def neg_gettext_catalogue(rng: random.Random, tokens: int) -> str:
    return _window(rng, rng.choice(_texts("gettext_catalogue")), tokens)


def neg_man_page_i18n(rng: random.Random, tokens: int) -> str:
    return _window(rng, rng.choice(_texts("man_page")), tokens)


def neg_multilingual(rng: random.Random, tokens: int) -> str:
    """Paragraphs in two to four languages, one after another (a page with its translations),
    none twice."""
    langs = rng.sample(sorted({r["lang"] for r in SOURCES if r["kind"] in ("man_page", "gettext_catalogue")}), rng.randint(2, 4))
    paragraphs = {lang: [p for t in _texts(("man_page", "gettext_catalogue"), lang) for p in t.split("\n\n") if _LETTER.search(p)]
                  for lang in langs}
    pools = {lang: S.Pool(rng, paras) for lang, paras in paragraphs.items()}  # none twice: a repeat is a loop
    out: list[str] = []
    while S.ntok("".join(out)) < tokens and any(pool.items for pool in pools.values()):
        pool = pools[rng.choice([lang for lang in langs if pools[lang].items])]
        out.append(pool.draw(str).strip("\n") + "\n\n")
    return S.cut_tokens("".join(out), tokens)


NEGATIVES: dict[str, Callable[[random.Random, int], str]] = {
    "form_feed": neg_form_feed,
    "licence": neg_licence,
    "gettext_catalogue": neg_gettext_catalogue,
    "man_page_i18n": neg_man_page_i18n,
    "multilingual": neg_multilingual,
}


def make_negative(rng: random.Random, category: str, index: int) -> dict[str, object]:
    text = NEGATIVES[category](rng, S.log_uniform(rng, S.MIN_TOKENS, MAX_TOKENS))
    return {"id": f"wneg-{category}-{index:03d}", "category": category, "text": text,
            "finish_reason": rng.choice(["stop", "length"]), "note": f"real {category.replace('_', ' ')}, {S.ntok(text)} tokens"}


# ---------------------------------------------------------------------------------------------
# positives


def _prose(rng: random.Random, lang: str, tokens: int) -> str:
    """Real text of ``lang`` (licences for English), about ``tokens`` tokens, from several sources."""
    texts = _texts("licence", "en") if lang == "en" else _texts("man_page", lang)
    out = []
    while S.ntok("".join(out)) < tokens:
        out.append(_window(rng, rng.choice(texts), tokens) + "\n\n")
    return S.cut_tokens("".join(out), tokens)


def repeated_words(text: str, rng: random.Random, density: float, *, copies: int, glued: bool) -> str:
    """Each word piece written ``copies`` times in place with probability ``density``: with a
    space between copies ("the the the"), or glued to its copy ("thethe")."""
    out = []
    for p in split_pieces(text):
        out.append(p)
        if _LETTER.search(p) and rng.random() < density:
            copy = p.lstrip(" ") if glued else p if p.startswith(" ") else " " + p
            out.extend([copy] * (copies - 1))
    return "".join(out)


def word_salad(rng: random.Random, text: str, tokens: int) -> str:
    """The words of ``text`` in random order: its whitespace-separated words shuffled as they
    are written (with their punctuation and case), or bare words drawn from it at random."""
    if rng.random() < 0.5:
        words = text.split()
        rng.shuffle(words)
    else:
        vocabulary = re.findall(r"[^\W\d_]+", text)
        words = [rng.choice(vocabulary) for _ in range(tokens)]
    lines, at = [], 0
    while at < len(words):  # paragraphs of 40-200 words
        size = rng.randint(40, 200)
        lines.append(" ".join(words[at : at + size]))
        at += size
    return S.cut_tokens("\n\n".join(lines), tokens)


POSITIVE_CATEGORIES = ["tripled", "glued", "word_salad"]


def make_positive(rng: random.Random, category: str, index: int) -> dict[str, object]:
    target = S.log_uniform(rng, S.MIN_TOKENS, MAX_TOKENS)
    onset = min(int(target * rng.choice([0.0, rng.uniform(0.05, 0.5), rng.uniform(0.5, 0.85)])), target - 200)
    lang = rng.choice(["en", "en", "en", *sorted(SPACED)])
    prefix = _prose(rng, lang, onset) if onset > 0 else ""
    if prefix and not prefix.endswith((" ", "\n")):
        prefix += " "
    budget = max(target - S.ntok(prefix), 200)
    source = _prose(rng, lang, budget * 2)
    if category == "word_salad":
        body, note = word_salad(rng, source, budget + 16), f"word salad ({lang})"
    else:
        density = rng.uniform(0.6, 1.0)
        body = repeated_words(source, rng, density, copies=3 if category == "tripled" else 2, glued=category == "glued")
        note = f"{category} ({lang}, {density:.0%} of words)"
    if rng.random() < 0.2:
        text, finish = S.cut_tokens(prefix + body, target).rstrip(), "stop"
    else:
        text, finish = S.cut_tokens(prefix + body, max(target, S.ntok(prefix) + 200)), "length"
    return {"id": f"wpos-{category}-{index:03d}", "category": category, "text": text, "finish_reason": finish,
            "note": f"{note} from token {S.ntok(prefix)} of {S.ntok(text)}", "loop_start": len(prefix)}


def build() -> dict[str, list[dict[str, object]]]:
    rng = random.Random(f"{S.SEED}-wild")  # a str seed is hashed with SHA-512: the same in every process
    positives = [make_positive(rng, c, i) for c in POSITIVE_CATEGORIES for i in range(N_PER_CATEGORY)]
    negatives = [make_negative(rng, c, i) for c in NEGATIVES for i in range(N_PER_CATEGORY)]
    return {"wild_positives": positives, "wild_negatives": negatives}


if __name__ == "__main__":
    S.write_or_check(build(), check=sys.argv[1:] == ["--check"], script=Path(__file__).resolve())
