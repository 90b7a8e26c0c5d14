"""What the buggy cell writes when its long generations collapse into something other than a loop.

Issue 30 quotes the shapes public reports show (``--sim-collapse-kind``):

* **stutter**: every word written twice in place, "The capital capital of of France France is
  is Paris Paris." (ik_llama.cpp #2006): the healthy text goes on, each word token doubled
  (punctuation is not, so the streamed tokens are the tokens of the joined text);
* **soup**: fluent-looking subwords of several scripts run together, "Demp
  Schul.scalablytyped373ьallis gutterぼdiaeftry" (sglang #2354);
* **latin-soup**: the same of Latin subwords only ("diaeftry Sransself"), which nothing in the
  text alone tells from rare words: only a healthy model finds it unlikely.

A soup word is one simulator token (a leading space and two or three syllables of ``SYLLABLES``,
one ``\\w+`` run), drawn per (seed, prompt, cell, position). The simulated model never saw such
a word in its text (``evalkit.sim.logprobs``: what the model knows), so it finds it as unlikely as a
real model finds random vocabulary pieces, without being told which tokens are soup.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from evalkit.sim.hashing import between

LATIN_SYLLABLES = ("Demp", "Schul", "scal", "ably", "diaeft", "ry", "Sran", "sself", "recl", "ess", "gutt",
                   "Fal", "lonn", "zv", "xq", "typd")
"""Latin subwords that make no English word two or three at a time."""
OTHER_SYLLABLES = ("ьall", "Консу", "льта", "ぼ", "スの", "373", "572", "ξερ")
"""Subwords of other scripts (and digits), which a soup of several scripts mixes in."""


def soup(count: int, latin_only: bool, *key: object) -> list[str]:
    """``count`` soup words, each drawn from (``key``, its position)."""
    syllables = LATIN_SYLLABLES if latin_only else LATIN_SYLLABLES + OTHER_SYLLABLES
    top = len(syllables) - 1
    return [" " + "".join(syllables[between(0, top, *key, i, j)] for j in range(between(2, 3, *key, i)))
            for i in range(count)]


def stutter(tokens: Iterable[str]) -> Iterator[str]:
    """``tokens`` with every word token written twice in a row (punctuation once)."""
    for token in tokens:
        yield token
        if token.strip().isalnum() and token[:1].isspace():
            yield token
