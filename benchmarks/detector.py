"""Throughput of the repeated-token collapse detector on one core.

Prints tokens analysed per second for 16k-token streams, healthy (GSM8K text split with
``split_text``), collapsed (the same text falling into a 7-token loop at token 2,000) and
stuttering (every word of the text written twice from token 2,000 on):

* ``analyze`` on the ids (what a caller with server token ids pays: the loop rules only), and
  with the pieces (the stutter and soup rules read the text, and it is compressed too);
* ``StreamingDetector`` fed in 16-token chunks, ids only, ids with their pieces (a text-only
  engine's path: every check also updates the stutter and soup figures) and ids with their text
  (an id-streaming engine's path in the repetition eval: the text is split as it comes and the
  stutter and soup figures read its pieces), then ``finish``: all
  16k tokens for the healthy stream; for the others, up to the early abort (its position is
  printed); and how much of that time ``finish`` takes (one whole-text ``analyze``);
* ``split_text``, for servers that give text only.

Goal (docs/costs.md): a healthy stream at >= 1 M tokens/s on one core,
with pieces too; a whole text with its pieces at >= 2 M tokens/s (issue 36).

Best of ``--repeats`` runs, pinned to one CPU, in CPU time (``time.process_time``): on a
shared machine wall time counts the other processes' work too. ``--analyze-only`` leaves
out streaming and ``split_text`` (a quick A/B of the whole-text path).

    python benchmarks/detector.py [--repeats 7] [--analyze-only]
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
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def _fed(tokens: np.ndarray, pieces: list[str] | None = None, text: bool = False) -> StreamingDetector:
    """A detector fed 16 tokens at a time: ids, and their pieces, or the pieces' text with ``text``."""
    detector = StreamingDetector()
    for i in range(0, len(tokens), 16):
        chunk = None if pieces is None else pieces[i : i + 16]
        fed = detector.feed(tokens[i : i + 16], text="".join(chunk)) if text and chunk else detector.feed(tokens[i : i + 16], chunk)
        if fed:
            break
    return detector


def _stream(tokens: np.ndarray, pieces: list[str] | None = None, text: bool = False) -> int:
    detector = _fed(tokens, pieces, text)
    detector.finish("length")
    return detector.n_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--analyze-only", action="store_true", help="whole-text analyze only: no streaming, no split_text")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    text = _text()
    pieces = split_pieces(text)[:N]
    healthy = piece_ids(pieces)
    loop_pieces = pieces[:ONSET] + (pieces[ONSET - 7 : ONSET] * (N // 7 + 1))[: N - ONSET]
    collapsed = piece_ids(loop_pieces)
    stutter_pieces = pieces[:ONSET] + [p for piece in pieces[ONSET:] for p in (piece, piece)][: N - ONSET]
    stutter = piece_ids(stutter_pieces)
    assert not analyze(healthy, finish_reason="length", pieces=pieces).collapsed
    assert analyze(collapsed, finish_reason="length").collapsed
    assert analyze(stutter, finish_reason="length", pieces=stutter_pieces).evidence.categories == ("stutter",)

    print(f"detector throughput, one core, CPU time, {N} tokens per stream (best of {args.repeats})")
    for name, tokens, toks in (("healthy", healthy, pieces), ("collapsed", collapsed, loop_pieces), ("stutter", stutter, stutter_pieces)):
        t = _best(args.repeats, partial(analyze, tokens, finish_reason="length"))
        print(f"  analyze(ids)            {name:9s} {N / t / 1e6:6.2f} M tokens/s  ({t * 1e3:.1f} ms)")
        t = _best(args.repeats, partial(analyze, tokens, finish_reason="length", pieces=toks))
        print(f"  analyze(ids, pieces)    {name:9s} {N / t / 1e6:6.2f} M tokens/s  ({t * 1e3:.1f} ms)")
        if args.analyze_only:
            continue
        for label, given, text in (("ids", None, False), ("ids+pieces", toks, False), ("ids+text", toks, True)):
            fed = _stream(tokens, given, text)
            t = _best(args.repeats, partial(_stream, tokens, given, text))
            finish = _best(args.repeats, partial(_fed(tokens, given, text).finish, "length"))
            where = "all tokens" if fed == N else f"aborted at token {fed}, from {ONSET}"
            print(f"  streaming {label:10s}     {name:9s} {fed / t / 1e6:6.2f} M tokens/s  ({t * 1e3:.1f} ms, {where}; "
                  f"finish {finish * 1e3:.1f} ms of it)")
    if args.analyze_only:
        return
    chars = len("".join(pieces))
    t = _best(args.repeats, partial(split_text, "".join(pieces)))
    print(f"  split_text                        {N / t / 1e6:6.2f} M tokens/s  ({chars / t / 1e6:.1f} M chars/s)")


if __name__ == "__main__":
    main()
