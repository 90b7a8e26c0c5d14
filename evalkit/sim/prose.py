"""Healthy long-form text: what the simulated model writes for prompts that are not GSM8K.

Evalkit's repetition check sends open-ended prompts ("Write a long story about ...") with a
large ``max_tokens`` and looks for a periodic tail. The healthy text must be long,
deterministic per (seed, prompt) (greedy decoding of one model gives the same text in every
cell) and statistically like real prose, so that a repetition detector has no reason to flag
it. It is made of real English sentences: those of the GSM8K *train* split shipped with
evalkit (about 52,000 question sentences and solution lines), drawn without replacement in a
per-prompt order and grouped into paragraphs. Measured on 4096 tokens: seq-rep-4 ~0.01 and a
zlib ratio ~2.2, in line with natural text (a hand-written grammar of a few hundred words
gave 0.11 and 3.7, which looks half-way to a loop). The train split shares no question with
the test split, so this text never contains a test question.

Every piece yielded begins with whitespace and ends without it, so the token stream of the
concatenation is the concatenation of the pieces' token streams.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from importlib import resources

from evalkit.sim.hashing import hash64
from evalkit.sim.once import BuiltOnce

_ANNOTATION = re.compile(r"<<[^>]*>>")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


@BuiltOnce
def _sentences() -> tuple[str, ...]:
    """All sentences of the train split, loaded on first use (~0.1 s) to keep start-up fast."""
    path = resources.files("evalkit") / "data" / "gsm8k" / "train.jsonl"
    found: list[str] = []
    with path.open("r", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            found.extend(_SENTENCE_END.split(" ".join(row["question"].split())))
            reasoning = _ANNOTATION.sub("", row["answer"]).split("\n")[:-1]
            found.extend(" ".join(step.split()) for step in reasoning)
    return tuple(s for s in found if s)


def pieces(seed: int, prompt: str) -> Iterator[str]:
    """An endless, deterministic stream of sentences for ``prompt``, in paragraphs of 3-7.

    Sentences are drawn without replacement (until the corpus is used up, a million tokens
    on), so the text never repeats itself the way a loop does.
    """
    corpus = _sentences()
    rng = random.Random(hash64(seed, "prose", prompt))
    used: set[int] = set()
    left_in_paragraph = rng.randrange(3, 8)
    while True:
        index = rng.randrange(len(corpus))
        if index in used:
            continue
        used.add(index)
        if len(used) == len(corpus):
            used.clear()
        if left_in_paragraph == 0:
            left_in_paragraph = rng.randrange(3, 8)
            yield "\n\n" + corpus[index]
        else:
            yield " " + corpus[index]
        left_in_paragraph -= 1
