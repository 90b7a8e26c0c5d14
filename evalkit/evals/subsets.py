"""Which questions `--limit N` asks: by default a seeded subset that looks like the whole set.

The first N questions of a test split are not a fair sample of it: SGLang measured the first
200 GSM8K test questions easier than the whole set (0.68 against 0.642, as issue 40 cites), and
in evalkit's copy the first 200 hold 32% two-step solutions against 25% in all 1319. So a
limited run draws its questions (`pick`):

* ``stratified`` (the default): the questions grouped by a stratum (GSM8K: the number of
  solution steps in the reference answer, a proxy of difficulty), each stratum holding its share
  of N to within one question, drawn at random inside it;
* ``random``: N drawn at random from the whole split;
* ``first``: the first N, lm-eval's own `--limit` (kept by name, for runs that must match
  an older one or another tool's prefix).

The draw depends only on the rule, the seed, N and the split: every cell and every run of a
matrix asks the same questions, so paired comparisons stay paired, and `rule` and `seed` go
into the eval's setup fingerprint. A smaller N asks a part of a larger N's questions (`order`),
so runs at two limits still pair on all the smaller one asked.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import Literal

SubsetRule = Literal["stratified", "random", "first"]
RULES: tuple[SubsetRule, ...] = ("stratified", "random", "first")


def order(strata: Sequence[Hashable], rule: SubsetRule, seed: int) -> list[int]:
    """Every document index, in the order a limited run takes them: the first N of it are the N
    asked, so a smaller subset is part of every larger one (a run at --limit 30 pairs all its
    questions with one at --limit 40 or a full run). `strata[i]` is document i's stratum.

    stratified: each stratum's documents shuffled, then position after position the stratum
    furthest below its share of the positions so far gives its next one (ties: the larger
    stratum, then the first in order), so every prefix holds each stratum's share of it to within
    one document; random: all shuffled; first: as they are."""
    size = len(strata)
    if rule == "first":
        return list(range(size))
    rng = random.Random(f"evalkit-subset:{rule}:{seed}")  # a str seed hashes the same in every process
    if rule == "random":
        return rng.sample(range(size), size)
    groups: dict[Hashable, list[int]] = {}
    for i, stratum in enumerate(strata):
        groups.setdefault(stratum, []).append(i)
    keys = sorted(groups, key=lambda key: (-len(groups[key]), str(key)))
    queues = {key: rng.sample(groups[key], len(groups[key])) for key in keys}
    taken = dict.fromkeys(keys, 0)
    out = []
    for position in range(1, size + 1):
        key = max(keys, key=lambda k: position * len(groups[k]) / size - taken[k] if taken[k] < len(groups[k]) else -size)
        out.append(queues[key][taken[key]])
        taken[key] += 1
    return out


def pick(strata: Sequence[Hashable], n: int, rule: SubsetRule, seed: int) -> list[int]:
    """Indices (sorted) of the `n` documents a limited run asks, out of ``len(strata)``: the
    first n of `order`; all of them when n covers the split."""
    return sorted(order(strata, rule, seed)[:n])
