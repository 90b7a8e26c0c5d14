"""Which questions `--limit N` asks: by default a seeded subset that looks like the whole set.

The first N questions of a test split are not a fair sample of it: SGLang measured the first
200 GSM8K test questions easier than the whole set (0.68 against 0.642, as issue 40 cites), and
in evalkit's copy the first 200 hold 32% two-step solutions against 25% in all 1319. So a
limited run draws its questions (`pick`):

* ``stratified`` (the default): the questions grouped by a stratum (GSM8K: the number of
  solution steps in the reference answer, a proxy of difficulty), each stratum given its share
  of N (largest remainders), then drawn at random inside it;
* ``random``: N drawn at random from the whole split;
* ``first``: the first N, lm-eval's own `--limit` (kept by name, for runs that must match
  an older one or another tool's prefix).

The draw depends only on the rule, the seed, N and the split: every cell and every run of a
matrix asks the same questions, so paired comparisons stay paired, and `rule` and `seed` go
into the eval's setup fingerprint.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import Literal

SubsetRule = Literal["stratified", "random", "first"]
RULES: tuple[SubsetRule, ...] = ("stratified", "random", "first")


def pick(strata: Sequence[Hashable], n: int, rule: SubsetRule, seed: int) -> list[int]:
    """Indices (sorted) of the `n` documents a limited run asks, out of ``len(strata)``;
    `strata[i]` is document i's stratum (ignored unless `rule` is stratified). All of them when
    n covers the split."""
    size = len(strata)
    if n >= size:
        return list(range(size))
    if rule == "first":
        return list(range(n))
    rng = random.Random(f"evalkit-subset:{rule}:{seed}")  # a str seed hashes the same in every process
    if rule == "random":
        return sorted(rng.sample(range(size), n))
    groups: dict[Hashable, list[int]] = {}
    for i, stratum in enumerate(strata):
        groups.setdefault(stratum, []).append(i)
    order = sorted(groups, key=str)
    quotas = {key: n * len(groups[key]) / size for key in order}
    taken = {key: int(quotas[key]) for key in order}
    by_remainder = sorted(order, key=lambda key: (-(quotas[key] - taken[key]), -len(groups[key]), str(key)))
    for key in by_remainder[: n - sum(taken.values())]:
        taken[key] += 1
    return sorted(i for key in order for i in rng.sample(groups[key], taken[key]))
