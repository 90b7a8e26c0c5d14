"""A share against a fixed limit (a `min` or `max` threshold): exact binomial tests, the bounds
they invert to, and how often a cell at a given true share comes out each way.

A floor judged on the point estimate alone is a coin toss for a cell near it: GSM8K at 0.936 on
1,319 questions against `min: 0.94` FAILs, 0.945 passes, and the two differ by six questions,
well inside the sampling noise (about 0.65 points of standard error). Judged like every other
check, a floor needs evidence either way:

* `bound_test(k, n, limit)`: the exact one-sided binomial p-values of k successes in n against a
  true share equal to `limit`: `p_below` = P(X <= k) (small: the share is shown below the limit),
  `p_above` = P(X >= k) (small: shown above it). A `min` FAILs when `p_below` < alpha and PASSes
  when `p_above` < alpha; a `max` the other way round (verdict/checks.py, with the family
  adjustment across cells every check has); in between the run could not tell.
* `clopper_pearson(k, n, alpha)`: the exact bounds those tests invert to (one-sided alpha each):
  a `min` is undecided exactly when it lies between them.
* `gate_chances(...)`: the chance that a cell whose true share is `level`, scored on n, FAILs,
  PASSes or stays undecided against the limit, by the noise rule or by the point estimate
  (`gate: point`): what `evalkit plan` says of each floor.
* `floor_for(k, n, alpha)` / `ceiling_for`: the lowest `min` (highest `max`) a share k of n still
  PASSes at one-sided alpha, on a grid step: what `evalkit calibrate` suggests.

Pure functions of counts (scipy's binomial distribution), no evalkit imports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom, binomtest

STEP = 0.005
"""A suggested limit's grid: half a point."""


@dataclass(frozen=True)
class BoundTest:
    """k successes in n tested against a true share equal to `limit`, one-sided each way."""

    k: int
    n: int
    limit: float
    p_below: float
    """P(X <= k | n, limit): small when the true share is shown below the limit."""
    p_above: float
    """P(X >= k | n, limit): small when the true share is shown above it."""

    def beyond(self, floor: bool) -> float:
        """The p-value of "beyond the limit": below a `min` (floor), above a `max`."""
        return self.p_below if floor else self.p_above

    def inside(self, floor: bool) -> float:
        """The p-value of "inside the limit": above a `min`, below a `max`."""
        return self.p_above if floor else self.p_below


def bound_test(k: int, n: int, limit: float) -> BoundTest:
    """Exact one-sided binomial tests of k of n against `limit` (0 <= k <= n, n > 0, limit in [0, 1])."""
    if n <= 0 or not 0 <= k <= n or not 0 <= limit <= 1:
        raise ValueError(f"bound_test: need 0 <= k <= n, n > 0 and a limit in [0, 1] (k {k}, n {n}, limit {limit})")
    return BoundTest(k, n, limit, float(binom.cdf(k, n, limit)), float(binom.sf(k - 1, n, limit)))


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The exact (Clopper-Pearson) bounds of a share k of n, one-sided `alpha` each (a 1 - 2 alpha
    interval): the limits a `bound_test` at alpha cannot tell apart from the share."""
    ci = binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Chances:
    """How a cell at a true share comes out against one limit, each outcome's probability."""

    fail: float
    undecided: float
    passed: float


def gate_chances(limit: float, n: int, level: float, alpha: float, floor: bool = True,
                 point: bool = False) -> Chances:
    """The chances that a cell whose true share is `level`, scored on n, FAILs, stays undecided
    or PASSes a `min` (`floor`) or `max` at `limit`: by the noise rule at one-sided `alpha`
    (`bound_test`), or by the point estimate (`point`: FAIL strictly beyond, else PASS), exactly
    over the binomial distribution of its successes."""
    xs = np.arange(n + 1)
    pmf = binom.pmf(xs, n, level)
    if point:
        beyond = xs / n < limit if floor else xs / n > limit
        fail = float(pmf[beyond].sum())
        return Chances(fail, 0.0, max(0.0, 1.0 - fail))
    below, above = binom.cdf(xs, n, limit), binom.sf(xs - 1, n, limit)
    fails, passes = (below < alpha, above < alpha) if floor else (above < alpha, below < alpha)
    fail, passed = float(pmf[fails].sum()), float(pmf[passes].sum())
    return Chances(fail, max(0.0, 1.0 - fail - passed), passed)


def floor_for(k: int, n: int, alpha: float, step: float = STEP) -> float:
    """The highest `min` on the `step` grid that a share k of n PASSes at one-sided `alpha`:
    strictly below its Clopper-Pearson lower bound. 0 when no positive floor passes (a floor of 0
    cannot fail: the caller says so rather than suggest it)."""
    low, _ = clopper_pearson(k, n, alpha)
    limit = math.floor(low / step + 1e-9) * step
    while limit > 0 and bound_test(k, n, limit).p_above >= alpha:
        limit -= step
    return max(0.0, round(limit, 6))


def ceiling_for(k: int, n: int, alpha: float, step: float = STEP) -> float:
    """The lowest `max` on the `step` grid that a share k of n PASSes at one-sided `alpha`:
    strictly above its Clopper-Pearson upper bound. 1 when no ceiling below 1 passes."""
    return round(1.0 - floor_for(n - k, n, alpha, step), 6)


def decision_band(limit: float, n: int, alpha: float, floor: bool = True) -> tuple[float | None, float | None]:
    """(pass_at, fail_at): the share of n from which on a cell PASSes a `min` (`floor`) or `max` at
    `limit` by the noise rule at one-sided `alpha`, and the share from which on it FAILs (a `min`:
    at or above `pass_at`, at or below `fail_at`); None where no share of n does."""
    xs = np.arange(n + 1)
    below, above = binom.cdf(xs, n, limit) < alpha, binom.sf(xs - 1, n, limit) < alpha
    inside, beyond = (above, below) if floor else (below, above)
    pick_inside, pick_beyond = (np.min, np.max) if floor else (np.max, np.min)
    pass_at = float(pick_inside(xs[inside])) / n if inside.any() else None
    fail_at = float(pick_beyond(xs[beyond])) / n if beyond.any() else None
    return pass_at, fail_at
