"""The held-out corpus of the stutter and soup rules (issue 48): real text, split by document.

    python3 tests/data/detector/corpus.py [--half tuning|heldout] [--write DIR]

The suites of garbled.py and wild.py are what the rules were tuned on until they passed, so
they measure no error rate. This corpus is built from other real documents
(corpus_sources.jsonl, see corpus_sources.py: catalogues and UI strings in 166 languages,
manual pages in 21, READMEs, changelogs, Python, C, shell, Perl and JavaScript source,
tables, logs, JSON) and GSM8K's test solutions as reasoning traces. Every document is put ONCE
into one of two halves by a keyed hash of its name (``half_of``: the seed fixes it, no line of
a document can land in the other half), and each half's texts are made of its own documents
only. Rules and thresholds are chosen on the ``tuning`` half; the ``heldout`` half is only
measured (``rates.py --corpus heldout``).

Healthy texts (``label`` healthy): windows of each document as written (category = its text
type), and hard negatives made of a half's documents: ``multilingual`` (paragraphs of two to
four languages one after another), ``list`` (translated UI strings as a bulleted or numbered
list), ``refrain`` (lines of a document as verses with a refrain line after every two to four).

Degenerate texts, a healthy opening of the same document, then from ``loop_start`` on:

* stutter: ``stutter_doubled`` / ``stutter_tripled`` (words written two or three times in
  place), ``stutter_glued`` (glued to their copy), ``stutter_phrase`` (runs of two to four
  words written two or three times), ``stutter_lines`` (lines written two or three times);
* soup: ``soup_shuffled`` (the text's own pieces in random order), ``soup_salad`` (its words
  shuffled with their punctuation, or bare words drawn from it: wild.py's), ``soup_code``
  (a source file's opening, then its pieces in random order), ``soup_mixed_script`` (pieces of
  documents in two to four scripts drawn at random), ``soup_unigram`` (pieces sampled from the
  document's own piece frequencies);
* loop: ``loop_line`` (a line of the document repeated to the end), ``loop_block`` (two to
  eight lines repeated).

The procedures are deliberately not the ones the rules were designed around: shuffled pieces,
unigram samples and code salad have no script switch and may keep their punctuation. Every
row: id, half, doc, kind (the text type), lang, category, group (healthy, stutter, soup, loop),
finish_reason, text, loop_start (characters; positives). Everything is a pure function of the
sources, the GSM8K file, SEED and the detector's split_pieces.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_suites as S  # puts the repository on sys.path too
import wild as W

from evalkit.evals.detector._chars import codepoints
from evalkit.evals.detector._text import split_pieces

SEED = f"{S.SEED}-corpus"
HALVES = ("tuning", "heldout")
MIN_TOKENS, MAX_TOKENS = 200, 3000
NEGATIVE_WINDOWS = 3
"""Healthy windows per document."""
POSITIVES_PER_CATEGORY = 120
"""Degenerate texts per category and half."""
COMPOSITES_PER_CATEGORY = 60
"""Hard negatives per composite category and half."""
STUTTER = ("stutter_doubled", "stutter_tripled", "stutter_glued", "stutter_phrase", "stutter_lines")
SOUP = ("soup_shuffled", "soup_salad", "soup_code", "soup_mixed_script", "soup_unigram")
LOOP = ("loop_line", "loop_block")
PROSE = ("gettext_catalogue", "ui_strings", "man_page", "doc", "reasoning")
"""Text types whose words the stutter and soup procedures rearrange (code has soup_code)."""


def load_documents() -> list[dict[str, str]]:
    """corpus_sources.jsonl's documents and GSM8K test solutions, 20 problems a document."""
    docs = [json.loads(line) for line in (HERE / "corpus_sources.jsonl").read_text(encoding="utf-8").split("\n")[:-1]]
    rows = [json.loads(line) for line in (S.ROOT / "evalkit/data/gsm8k/test.jsonl").read_text().splitlines()]
    for k in range(0, len(rows) - 19, 20):
        parts = []
        for row in rows[k : k + 20]:
            question, steps, final = S.GSM.solution(row)
            parts.append(f"Question: {question}\nLet's think step by step.\n" + "\n".join(steps) + f"\nThe answer is {final}.\n")
        docs.append({"doc": f"reasoning:en:gsm8k-test-{k}", "kind": "reasoning", "lang": "en",
                     "source": f"evalkit/data/gsm8k/test.jsonl lines {k + 1}-{k + 20}", "text": "\n".join(parts)})
    return docs


def half_of(doc: str) -> str:
    """The half a document belongs to: a keyed hash of its name (stable across machines)."""
    digest = hashlib.blake2b(doc.encode("utf-8"), key=SEED.encode(), digest_size=8).digest()
    return HALVES[digest[0] & 1]


def script_of(text: str) -> str:
    """The script most letters of ``text`` are written in (a coarse label for the figures)."""
    points = codepoints(text).astype("int64")
    letters = points[(points > 0x40)]
    bounds = [("latin", 0x250), ("greek", 0x400), ("cyrillic", 0x530), ("armenian", 0x590), ("hebrew", 0x600),
              ("arabic", 0x900), ("indic", 0xE00), ("thai_lao", 0xF00), ("other", 0x10A0), ("georgian", 0x1100),
              ("other", 0x3040), ("cjk", 0xA000), ("other", 0xAC00), ("hangul", 0xD7B0), ("other", 0x110000)]
    counts = {}
    lo = 0x40
    for name, hi in bounds:
        counts[name] = counts.get(name, 0) + int(((letters >= lo) & (letters < hi)).sum())
        lo = hi
    return max(counts, key=lambda k: counts[k])


# ---------------------------------------------------------------------------------------------
# healthy


def window(rng: random.Random, text: str, tokens: int) -> list[str]:
    """About ``tokens`` pieces of ``text`` from the start of a random line."""
    pieces = split_pieces(text)
    starts = [0] + [i + 1 for i, p in enumerate(pieces) if "\n" in p and i + 1 < len(pieces) - min(tokens, len(pieces) // 2)]
    at = rng.choice(starts)
    return pieces[at : at + tokens]


class Half:
    """The documents of one half, and the texts built from them."""

    def __init__(self, name: str, docs: list[dict[str, str]], *, positives: int = POSITIVES_PER_CATEGORY,
                 composites: int = COMPOSITES_PER_CATEGORY) -> None:
        self.name = name
        self.docs = [d for d in docs if half_of(d["doc"]) == name]
        self.rng = random.Random(f"{SEED}-{name}")
        self.per_category, self.composites = positives, composites

    def of(self, kinds: tuple[str, ...], lang: str | None = None) -> list[dict[str, str]]:
        return [d for d in self.docs if d["kind"] in kinds and (lang is None or d["lang"] == lang)]

    def row(self, category: str, group: str, doc: dict[str, str], text: str, index: int, **extra: object) -> dict[str, object]:
        finish = extra.pop("finish_reason", None) or self.rng.choice(["stop", "length"])
        return {"id": f"{self.name}-{category}-{index:04d}", "half": self.name, "doc": doc["doc"], "kind": doc["kind"],
                "lang": doc["lang"], "category": category, "group": group, "finish_reason": finish, "text": text, **extra}

    def negatives(self) -> list[dict[str, object]]:
        rng, out = self.rng, []
        for d in self.docs:
            for _ in range(NEGATIVE_WINDOWS):
                text = "".join(window(rng, d["text"], S.log_uniform(rng, MIN_TOKENS, MAX_TOKENS)))
                out.append(self.row(d["kind"], "healthy", d, text, len(out)))
        for category, make in (("multilingual", self.multilingual), ("list", self.ui_list), ("refrain", self.refrain)):
            for _ in range(self.composites):
                doc, text = make(rng)
                out.append(self.row(category, "healthy", doc, text, len(out)))
        return out

    def multilingual(self, rng: random.Random) -> tuple[dict[str, str], str]:
        docs = self.of(("man_page", "gettext_catalogue", "doc"))
        langs = rng.sample(sorted({d["lang"] for d in docs}), rng.randint(2, 4))
        out: list[str] = []
        target = S.log_uniform(rng, MIN_TOKENS, MAX_TOKENS)
        first = None
        while sum(map(len, out)) < target:
            lang = rng.choice(langs)
            d = rng.choice([d for d in docs if d["lang"] == lang])
            first = first or d
            out.append(window(rng, d["text"], rng.randint(40, 200)))
            out[-1] = split_pieces("".join(out[-1]).strip("\n") + "\n\n")
        return {**first, "lang": "+".join(sorted(langs))}, "".join(p for chunk in out for p in chunk)  # type: ignore[dict-item]

    def ui_list(self, rng: random.Random) -> tuple[dict[str, str], str]:
        d = rng.choice(self.of(("ui_strings",)))
        lines = [line for line in d["text"].splitlines() if line.strip()]
        start = rng.randrange(max(1, len(lines) - 20))
        numbered = rng.random() < 0.5
        items = lines[start : start + rng.randint(20, 120)]
        return d, "".join(f"{i + 1}. {s}\n" if numbered else f"- {s}\n" for i, s in enumerate(items))

    def refrain(self, rng: random.Random) -> tuple[dict[str, str], str]:
        d = rng.choice(self.of(("ui_strings", "man_page", "doc")))
        lines = [line.strip() for line in d["text"].splitlines() if 20 < len(line.strip()) < 90]
        start = rng.randrange(max(1, len(lines) - 60))
        verses, chorus = lines[start : start + 60], rng.sample(lines, min(2, len(lines)))
        out, every = [], rng.randint(2, 4)
        for i, line in enumerate(verses):
            out.append(line)
            if i % every == every - 1:
                out.extend(chorus)
                out.append("")
        return d, "\n".join(out) + "\n"

    # -----------------------------------------------------------------------------------------
    # degenerate

    def positives(self) -> list[dict[str, object]]:
        out = []
        for category in (*STUTTER, *SOUP, *LOOP):
            group = category.split("_")[0]
            for _ in range(self.per_category):
                rng = self.rng
                kinds = ("code",) if category == "soup_code" else PROSE
                d = rng.choice(self.of(kinds))
                target = S.log_uniform(rng, MIN_TOKENS + 100, MAX_TOKENS)
                pieces = split_pieces(d["text"])
                onset = min(int(target * rng.choice([0.0, rng.uniform(0.05, 0.5), rng.uniform(0.5, 0.8)])), target - 150,
                            len(pieces) // 3)
                if category == "soup_code":
                    onset = max(onset, 40)
                prefix = "".join(pieces[:onset])
                if prefix and not prefix.endswith((" ", "\n")):
                    prefix += "\n" if category in ("stutter_lines", "loop_line", "loop_block") else " "
                body, note = self.degenerate(rng, category, d, pieces[onset:], target - onset)
                text = "".join(split_pieces(prefix + body)[:target])
                finish = "length" if rng.random() < 0.8 else "stop"
                out.append(self.row(category, group, d, text, len(out), finish_reason=finish, loop_start=len(prefix),
                                    note=note))
        return out

    def degenerate(self, rng: random.Random, category: str, d: dict[str, str], rest: list[str], tokens: int) -> tuple[str, str]:
        """The degenerate body of ``category`` made of ``rest`` (the document after the opening)."""
        source = "".join(rest) if len(rest) > tokens else "".join(rest) + "\n" + d["text"]
        density = rng.uniform(0.6, 1.0)
        if category in ("stutter_doubled", "stutter_tripled", "stutter_glued"):
            copies = 3 if category == "stutter_tripled" else 2
            body = W.repeated_words(source, rng, density, copies=copies, glued=category == "stutter_glued")
            return body, f"{density:.0%} of words"
        if category == "stutter_phrase":
            return phrase_stutter(rng, source, density), f"{density:.0%} of phrases"
        if category == "stutter_lines":
            lines = source.split("\n")
            return "\n".join(x for line in lines for x in [line] * (rng.choice([2, 3]) if line.strip() and rng.random() < density else 1)), \
                f"{density:.0%} of lines"
        if category == "soup_shuffled" or category == "soup_code":
            pieces = split_pieces(source)[: tokens + 50]
            rng.shuffle(pieces)
            return "".join(pieces), "pieces shuffled"
        if category == "soup_salad":
            return W.word_salad(rng, source, tokens + 16), "words shuffled"
        if category == "soup_unigram":
            pieces = split_pieces(d["text"])
            return "".join(rng.choices(pieces, k=tokens + 50)), "unigram sample"
        if category == "soup_mixed_script":
            scripts: dict[str, list[dict[str, str]]] = {}
            for other in self.of(PROSE):
                scripts.setdefault(script_of(other["text"][:400]), []).append(other)
            chosen = rng.sample(sorted(scripts), rng.randint(2, min(4, len(scripts))))
            pools = [split_pieces(rng.choice(scripts[c])["text"]) for c in chosen]
            return "".join(rng.choice(rng.choice(pools)) for _ in range(tokens + 50)), "+".join(chosen)
        lines = [line for line in source.split("\n") if line.strip()]
        size = 1 if category == "loop_line" else rng.randint(2, 8)
        at = rng.randrange(max(1, len(lines) - size))
        unit = "\n".join(lines[at : at + size]) + "\n"
        return unit * (tokens // max(1, len(split_pieces(unit))) + 2), f"{size} lines"


def phrase_stutter(rng: random.Random, text: str, density: float) -> str:
    """Runs of two to four words, each with what follows it up to the next word, written two or
    three times in place with probability ``density``."""
    words = re.split(r"(?<=\S)(?=\s)", text)
    out, i = [], 0
    while i < len(words):
        size = rng.randint(2, 4)
        phrase = "".join(words[i : i + size])
        if rng.random() < density and "\n" not in phrase:
            copy = phrase if phrase.startswith(" ") else " " + phrase
            out.append(phrase + copy * (rng.choice([2, 3]) - 1))
        else:
            out.append(phrase)
        i += size
    return "".join(out)


def build(halves: tuple[str, ...] = HALVES) -> dict[str, list[dict[str, object]]]:
    """Every half's texts, healthy and degenerate, keyed ``<half>``."""
    docs = load_documents()
    return {name: (h := Half(name, docs)).negatives() + h.positives() for name in halves}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--half", choices=HALVES, action="append")
    parser.add_argument("--write", type=Path, help="write <half>.jsonl files there (to read them; nothing reads them)")
    args = parser.parse_args()
    built = build(tuple(args.half or HALVES))
    for name, rows in built.items():
        groups: dict[str, int] = {}
        for r in rows:
            groups[str(r["group"])] = groups.get(str(r["group"]), 0) + 1
        print(f"{name}: {len({r['doc'] for r in rows})} documents, {len(rows)} texts {groups}")
        if args.write:
            (args.write / f"corpus_{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                                             encoding="utf-8")
