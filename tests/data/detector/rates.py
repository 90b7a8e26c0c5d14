"""Recall and false positives of the collapse detector per suite category, as a table.

    python3 tests/data/detector/rates.py [--signals] [--stream] [--suites DIR] [--set NAME=VALUE ...]
    python3 tests/data/detector/rates.py --corpus tuning|heldout [--every K] [--signals] [--set ...]

Judges every text of each suite file in DIR (positives, negatives, garbled_positives,
garbled_negatives, requested: those present) with ``analyze`` (the pieces given, as
tests/test_detector_suites.py does) and prints, per category, how many were flagged and which
kinds of degenerate output fired on them (loop, stutter, soup: the evidence's categories).
``--signals`` adds which rules fired on each flagged negative and missed positive;
``--stream`` feeds every sample in seeded random chunks of 1-160 tokens (the suite test's
schedule) and adds the healthy texts aborted while streaming and the early-abort savings.
The detector is the one ``import evalkit`` finds: put another checkout first on PYTHONPATH
to measure it on the same suites (a detector without the stutter and soup rules shows no
kinds). ``--set`` overrides a DetectorSettings field.

``--corpus HALF`` measures one half of the held-out corpus instead (corpus.py, issue 48):
recall per degenerate category and false positives per healthy category, then both per
language and per text type (``--every K``: every K-th text only, a quick look). Tune on
``tuning``; ``heldout`` is for reporting.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from evalkit.evals.detector import DetectorSettings, StreamingDetector, analyze
from evalkit.evals.detector._text import piece_ids, split_pieces

HERE = Path(__file__).resolve().parent
SUITES = ("positives", "negatives", "garbled_positives", "garbled_negatives", "requested", "wild_positives", "wild_negatives")


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n")[:-1]]  # texts hold U+2028


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", type=Path, default=HERE)
    parser.add_argument("--signals", action="store_true")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE")
    parser.add_argument("--corpus", choices=("tuning", "heldout"))
    parser.add_argument("--every", type=int, default=1)
    args = parser.parse_args()
    settings = DetectorSettings(**dict(item.split("=", 1) for item in args.set))
    if args.corpus:
        import corpus

        print(corpus_figures(corpus.build((args.corpus,))[args.corpus][:: args.every], settings, signals=args.signals))
        return
    rng = np.random.default_rng(1596)
    saved: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name in SUITES:
        if not (args.suites / f"{name}.jsonl").exists():
            continue
        positive = name.endswith("positives")
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        kinds: dict[str, Counter[str]] = defaultdict(Counter)
        notes = []
        for row in load(args.suites / f"{name}.jsonl"):
            pieces = split_pieces(row["text"])
            tokens = piece_ids(pieces)
            a = analyze(tokens, finish_reason=row["finish_reason"], pieces=pieces, settings=settings)
            c = counts[row["category"]]
            c[0] += a.collapsed
            c[1] += 1
            kinds[row["category"]].update(getattr(a.evidence, "categories", ()))
            if args.signals and a.collapsed != positive:
                notes.append(f"    {row['id']:34s} {row['finish_reason']:6s} {len(tokens):5d} tokens {','.join(a.evidence.signals)}")
            if args.stream:
                d, i = StreamingDetector(settings), 0
                while i < len(tokens) and not d.feed(tokens[i : i + (size := int(rng.integers(1, 161)))], pieces[i : i + size]):
                    i += size
                c[2] += d.aborted_at is not None
                if args.signals and not positive and d.aborted_at is not None:
                    notes.append(f"    {row['id']:34s} aborted at token {d.aborted_at}")
                if positive and row["finish_reason"] == "length":
                    onset = len(split_pieces(row["text"][: row["loop_start"]]))
                    stop = d.aborted_at if d.aborted_at is not None else len(tokens)
                    saved[row["category"]][0] += len(tokens) - stop
                    saved[row["category"]][1] += len(tokens) - onset
        label = "recall" if positive else "flagged"
        print(f"{name}: {label} per category (kinds that fired)" + ("  (aborted while streaming)" if args.stream else ""))
        for category, (hits, total, aborted) in counts.items():
            fired = ", ".join(f"{k} {v}" for k, v in kinds[category].most_common())
            print(f"  {category:22s} {hits:3d}/{total:<3d} {hits / total:6.1%}" + (f"  ({aborted})" if args.stream else "")
                  + (f"  [{fired}]" if fired else ""))
        hits, total = sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())
        print(f"  {'all':22s} {hits:3d}/{total:<3d} {hits / total:6.1%}" + (f"  ({sum(c[2] for c in counts.values())})" if args.stream else ""))
        print("\n".join(notes))
    if args.stream:
        print("early-abort savings (tokens after the abort / tokens after the onset, positives cut at max_tokens):")
        for category, (kept, spent) in saved.items():
            print(f"  {category:22s} {kept / spent:6.1%}")
        print(f"  {'all':22s} {sum(k for k, _ in saved.values()) / sum(s for _, s in saved.values()):6.1%}")


def corpus_figures(rows: list[dict], settings: DetectorSettings, *, signals: bool = False) -> str:
    """Markdown tables of recall (degenerate texts) and false positives (healthy texts) per
    category, then per language and per text type, over corpus rows; with ``signals``, the
    rules that fired on each false positive and the missed texts' ids."""
    tallies: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    notes = []
    for row in rows:
        pieces = split_pieces(row["text"])
        a = analyze(piece_ids(pieces), finish_reason=row["finish_reason"], pieces=pieces, settings=settings)
        positive = row["group"] != "healthy"
        if positive:  # long enough for a block of soup_block pieces, or not
            stretch = len(split_pieces(row["text"][row["loop_start"] :]))
            block = getattr(settings, "soup_block", 512)  # a detector from before issue 48 has none
            t = tallies[("length", f"{row['group']}: {'>=' if stretch >= block else '<'} {block} pieces")]
            t[0] += a.collapsed
            t[1] += 1
        for axis in ("category", "lang", "kind"):
            key = row[axis] if axis == "category" else f"{'recall' if positive else 'flagged'}: {row[axis]}"
            if axis != "category" and row[axis].count("+"):
                key = f"{key.split(':')[0]}: multilingual"
            t = tallies[(axis, key)]
            t[0] += a.collapsed
            t[1] += 1
        if signals and a.collapsed != positive:
            notes.append(f"    {row['id']:30s} {row['lang']:10s} {len(pieces):5d} {','.join(a.evidence.signals) or 'missed'}")
    out = []
    for axis, title in (("category", "category"), ("length", "degenerate stretch"), ("lang", "language"), ("kind", "text type")):
        out += [f"| {title} | flagged | rate |", "|---|---:|---:|"]
        for (a, key), (hits, total) in sorted(tallies.items()):
            if a == axis:
                out.append(f"| {key} | {hits}/{total} | {hits / total:.1%} |")
        out.append("")
    return "\n".join(out + notes)


if __name__ == "__main__":
    main()
