"""Throughput of the repeated-token collapse detector on one core.

Prints tokens analysed per second for 16k-token streams, healthy (GSM8K text split with
``split_text``) and collapsed (the same text falling into a 7-token loop at token 2,000):

* ``analyze`` on the ids (what a caller with server token ids pays), and with the pieces
  (the text is then compressed too);
* ``StreamingDetector`` fed in 16-token chunks, then ``finish``: all 16k tokens for the healthy
  stream; for the collapsed one, up to the early abort (its position is printed); and how much
  of that time ``finish`` takes (one whole-text ``analyze`` of what was received);
* ``split_text``, for servers that give text only.

Best of ``--repeats`` runs, pinned to one CPU.

    python benchmarks/detector.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from functools import partial
from importlib import resources

import numpy as np

from evalkit.evals.detector import StreamingDetector, analyze, split_text
from evalkit.evals.detector._text import piece_ids, split_pieces

N = 16_384
ONSET = 2_000


def _text() -> str:
    path = resources.files("evalkit").joinpath("data", "gsm8k", "train.jsonl")
    with path.open("r", encoding="utf-8") as lines:
        rows = [json.loads(line) for _, line in zip(range(600), lines)]
    return "\n\n".join(f"{r['question']}\n{r['answer']}" for r in rows)


def _best(repeats: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _fed(tokens: np.ndarray) -> StreamingDetector:
    detector = StreamingDetector()
    for i in range(0, len(tokens), 16):
        if detector.feed(tokens[i : i + 16]):
            break
    return detector


def _stream(tokens: np.ndarray) -> int:
    detector = _fed(tokens)
    detector.finish("length")
    return detector.n_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    text = _text()
    pieces = split_pieces(text)[:N]
    healthy = piece_ids(pieces)
    loop_pieces = pieces[:ONSET] + (pieces[ONSET - 7 : ONSET] * (N // 7 + 1))[: N - ONSET]
    collapsed = piece_ids(loop_pieces)
    assert not analyze(healthy, finish_reason="length").collapsed
    assert analyze(collapsed, finish_reason="length").collapsed

    print(f"detector throughput, one core, {N} tokens per stream (best of {args.repeats})")
    for name, tokens, toks in (("healthy", healthy, pieces), ("collapsed", collapsed, loop_pieces)):
        t = _best(args.repeats, partial(analyze, tokens, finish_reason="length"))
        print(f"  analyze(ids)            {name:9s} {N / t / 1e6:6.2f} M tokens/s  ({t * 1e3:.1f} ms)")
        t = _best(args.repeats, partial(analyze, tokens, finish_reason="length", pieces=toks))
        print(f"  analyze(ids, pieces)    {name:9s} {N / t / 1e6:6.2f} M tokens/s  ({t * 1e3:.1f} ms)")
        fed = _stream(tokens)
        t = _best(args.repeats, partial(_stream, tokens))
        finish = _best(args.repeats, partial(_fed(tokens).finish, "length"))
        where = "all tokens" if fed == N else f"aborted at token {fed}, loop from {ONSET}"
        print(f"  streaming, 16-token feed {name:9s} {fed / t / 1e6:6.2f} M tokens/s  ({t * 1e3:.1f} ms, {where}; "
              f"finish {finish * 1e3:.1f} ms of it)")
    chars = len("".join(pieces))
    t = _best(args.repeats, partial(split_text, "".join(pieces)))
    print(f"  split_text                        {N / t / 1e6:6.2f} M tokens/s  ({chars / t / 1e6:.1f} M chars/s)")


if __name__ == "__main__":
    main()
