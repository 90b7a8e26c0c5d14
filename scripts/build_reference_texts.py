#!/usr/bin/env python3
"""Build the divergence eval's reference text set from the GSM8K train split evalkit ships.

    python scripts/build_reference_texts.py            # rewrites evalkit/evals/prompts/reference_texts_v1.jsonl
    python scripts/build_reference_texts.py --check    # exit 1 if the shipped file differs from a rebuild

The set is reproducible from the package alone (no download, no seed): 56 short texts, each one
train problem with its worked solution, taken every 131st row so they span the split, and 8 long
passages, each a run of consecutive solutions (from row 1, 901, 1801, ..., skipping the rows a
short text uses) concatenated up to
LONG_CHARS characters, about 1000 tokens for common tokenizers, so the long-context positions of
a prefill are scored too. The calculator annotations (`<<48/2=24>>`) are dropped: they are
GSM8K's markup, not text a model reads. Short and long texts are interleaved so the first N of
the set (`count`, `--limit`) mix both.

A changed set is a new file (`reference_texts_v2.jsonl`): runs are compared only on the same
bytes (the set's version is their SHA-256).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "evalkit" / "data" / "gsm8k" / "train.jsonl"
OUT = ROOT / "evalkit" / "evals" / "prompts" / "reference_texts_v1.jsonl"
SHORT, LONG, STRIDE, LONG_CHARS, LONG_SPACING = 56, 8, 131, 4200, 900
ANNOTATION = re.compile(r"<<[^>]*>>")


def _solution(row: dict[str, str]) -> str:
    return ANNOTATION.sub("", row["answer"]).replace("\n#### ", "\nThe answer is ") + "."


def build() -> str:
    """The set's JSONL text: one {"id", "kind", "prompt"} per line (the prompt-set format)."""
    rows = [json.loads(line) for line in TRAIN.read_text(encoding="utf-8").splitlines() if line.strip()]
    short = [{"id": f"gsm8k-train-{i}", "kind": "solution",
              "prompt": f"Question: {rows[i]['question']}\nAnswer: {_solution(rows[i])}"}
             for i in range(0, SHORT * STRIDE, STRIDE)]
    used, long = {int(t["id"].rsplit("-", 1)[1]) for t in short}, []
    for n in range(LONG):
        parts, i = [], 1 + n * LONG_SPACING
        while sum(len(p) + 2 for p in parts) < LONG_CHARS:
            if i not in used:
                parts.append(_solution(rows[i]))
            i += 1
        long.append({"id": f"long-{n + 1}", "kind": "passage", "prompt": "\n\n".join(parts)[:LONG_CHARS]})
    every = SHORT // LONG
    texts = [t for k in range(LONG) for t in (*short[k * every:(k + 1) * every], long[k])]
    return "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing")
    text = build()
    if parser.parse_args().check:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.name}: {'matches' if same else 'differs from'} a rebuild")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text.splitlines())} texts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
