"""Robustness check, not run by CI: the suites tokenized by real byte-level BPE tokenizers.

The suites and thresholds are written in split_text pieces (about one per word). A server that
returns token ids gives the detector its own tokenizer's ids instead, so this script trains
byte-level BPE tokenizers with a Llama-3 / cl100k style pre-tokenizer (digit groups of at most
three, every 1-3 digit group in the vocabulary as in real vocabularies) on GSM8K train and
material.py, tokenizes every suite text, and reports recall, false positives and early aborts
of healthy texts from the ids alone (no pieces).

    pip install tokenizers && python3 tests/data/detector/check_tokenizers.py [--vocab 2048 32000]

Measured with the default settings (split_text gives 0.26-0.32 pieces per character): vocab
32000 (0.35-0.51 tokens per character): recall 440/440; false positives 36/665 and 36 healthy
texts aborted while streaming, every one a matrix, grid or dump whose rows are wider than
max_run (96) tokens: this pre-tokenizer, like cl100k's and Llama 3's, makes the space before a
number a token of its own, so ", 0" is three tokens and a 40-column row of zeros is 120
(split_text keeps " 0" one piece); none of the 455 texts of the other categories. Vocab 2048
(0.44-0.61, finer than any production tokenizer; the tiny test model of REFERENCE.md uses one):
recall 427/440 (counters whose number takes a varying number of tokens), false positives 47/665
and 48 aborted while streaming, again only rows wider than max_run. For such tokenizers raise
max_run with the row widths you expect, and for tokenizers much finer than words the other
token thresholds (min_loop_tokens, min_near_loop_tokens, min_recurrent_tokens) accordingly.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import material as M
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from evalkit.evals.detector import StreamingDetector, analyze

PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def train(vocab: int) -> Tokenizer:
    rows = [json.loads(line) for line in (ROOT / "evalkit" / "data" / "gsm8k" / "train.jsonl").read_text().splitlines()]
    corpus = [f"{r['question']}\n{r['answer']}" for r in rows]
    corpus += [p for paragraphs in M.EXPLANATIONS.values() for p in paragraphs]
    corpus += [" ".join(str(i) for i in range(1000))] * 5
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer)
    return tokenizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000])
    for vocab in parser.parse_args().vocab:
        tokenizer = train(vocab)
        print(f"vocab {vocab}")
        for name in ("positives", "negatives"):
            rows = [json.loads(line) for line in (HERE / f"{name}.jsonl").read_text(encoding="utf-8").split("\n")[:-1]]
            flagged: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            aborted, density = [], []
            for row in rows:
                ids = tokenizer.encode(row["text"]).ids
                density.append(len(ids) / len(row["text"]))
                flagged[row["category"]][0] += analyze(ids, finish_reason=row["finish_reason"]).collapsed
                flagged[row["category"]][1] += 1
                detector = StreamingDetector()
                if any(detector.feed(ids[i : i + 16]) for i in range(0, len(ids), 16)) and name == "negatives":
                    aborted.append(row["id"])
            hits = sum(h for h, _ in flagged.values())
            print(f"  {name}: {hits}/{len(rows)} flagged, {sum(density) / len(density):.2f} tokens per character")
            for category, (h, total) in flagged.items():
                print(f"    {category:18s} {h}/{total}")
            if name == "negatives":
                print(f"  healthy texts aborted while streaming: {len(aborted)} {aborted[:10]}")


if __name__ == "__main__":
    main()
