"""A threshold checked on every cell of a matrix is a family of tests: adjust its p-values.

A nightly over 12 cells runs each threshold's test 11 or 12 times; at alpha 0.01 each, a healthy
matrix raises a false alarm in about one night of ten (benchmarks/verdict_power.py measures it).
verdict/deltas.py adjusts the p-values of one threshold across the cells it was tested on and compares
the adjusted p-value with the threshold's alpha:

* "holm" (the default): Holm's step-down procedure (Holm S, "A simple sequentially rejective
  multiple test procedure", Scand J Statist 1979;6:65-70) keeps the chance of ANY false alarm in
  the family at or under alpha, whatever the dependence between the tests (all cells share the
  reference), and rejects at least what Bonferroni rejects;
* "bh": Benjamini & Hochberg's step-up procedure (J R Statist Soc B 1995;57:289-300) keeps the
  expected share of false alarms among the alarms at or under alpha, for independent or
  positively dependent tests: more power, weaker promise;
* "none": each test at alpha alone (the rate of any false alarm grows with the cells).

Adjusted p-values (Wright SP, "Adjusted P-values for simultaneous inference", Biometrics
1992;48:1005-1013): a test is rejected by the procedure at level alpha exactly when its adjusted
p-value is below alpha, so every report can print one number per test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Method = Literal["holm", "bh", "none"]
METHODS: tuple[Method, ...] = ("holm", "bh", "none")
METHOD_WORDS = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no correction"}


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values: sorted ascending, p_(i) (m - i + 1), made non-decreasing, at most 1."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """BH's adjusted p-values: sorted ascending, p_(i) m / i, made non-decreasing from the top."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 1.0
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, m * pvalues[i] / (rank + 1))
        out[i] = min(1.0, running)
    return out


def adjust(pvalues: Sequence[float], method: Method) -> list[float]:
    """The family's adjusted p-values, in the order given."""
    if method == "holm":
        return holm(pvalues)
    if method == "bh":
        return benjamini_hochberg(pvalues)
    return [min(1.0, p) for p in pvalues]
