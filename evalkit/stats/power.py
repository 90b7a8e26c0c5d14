"""Power: the smallest change a check could have seen (its MDE) and the n a margin needs.

A check that finds nothing is only evidence of no regression if it could have found one: each
verdict reports its minimum detectable effect (MDE), the smallest true change its test detects
with probability `power` at `alpha`, from its n and what was observed. The formulas, each
checked by simulation in tests/test_power.py:

* paired 0/1 marks (McNemar exact, two-sided, as verdict/deltas.py tests them): `mcnemar_power`,
  exact over the number of discordant questions (the model in its docstring);
* counts of rare events (Fisher exact, one-sided, a rise): `fisher_power`, exact over both
  binomial counts;
* equivalence on paired marks (two one-sided tests): `equivalence_margin` / `equivalence_n`, at a
  true difference of 0 (Connor 1987's variance, Newcombe's interval);
* TensorRT-LLM's accuracy gate (as the project's engine reference, REFERENCE.md section 11,
  records it): threshold = ref - z(alpha) sqrt(2 sigma^2 / n)
  and MDE = (z(alpha) + z(beta)) sqrt(2 sigma^2 / n), one-sided, sigma = 0.5 for 0/1 scores:
  `gate_room` / `gate_mde`. It treats two runs as independent samples, the assumption `plan`
  falls back to when nothing about the engine's discordance is known.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from scipy.special import gammaln
from scipy.stats import binom, norm

from evalkit.stats.tests import newcombe_paired

POWER = 0.8
"""Default power of every MDE (beta = 0.2, as NeMo Evaluator and TensorRT-LLM use)."""
STEP = 0.0005
"""Resolution of a searched MDE (0.05 points)."""


def mcnemar_power(n: int, discordance: float, drop: float, alpha: float) -> float:
    """P(McNemar exact p < alpha) when a true drop of `drop` adds to healthy flips, exactly.

    Model (the calibrate/plan/verdict model): between two healthy runs a share `discordance` of
    the n questions flips, half each way. A drop d makes another d n questions wrong, so the
    discordant count D ~ Binomial(n, discordance + d) and the right -> wrong count
    b | D ~ Binomial(D, (discordance / 2 + d) / (discordance + d)). D is summed over, not fixed at
    its mean: with few discordant questions (a clean engine) seeing enough of them is most of it.
    """
    share = discordance + drop
    if share <= 0 or n <= 0:
        return 0.0
    if share >= 1:
        share = 1.0
    q = min(1.0, (discordance / 2 + drop) / share)
    mean, sd = n * share, math.sqrt(n * share * (1 - share))
    ds = np.arange(max(1, int(mean - 8 * sd - 2)), min(n, int(mean + 8 * sd + 2)) + 1)
    crit = np.array([_critical_count(int(d), alpha) for d in ds], dtype=float)
    ok = ~np.isnan(crit)
    if not ok.any():
        return 0.0
    return float(np.sum(binom.pmf(ds[ok], n, share) * binom.sf(crit[ok] - 1, ds[ok], q)))


@functools.lru_cache(maxsize=8192)
def _critical_count(discordant: int, alpha: float) -> float:
    """Smallest b whose two-sided exact binomial p-value against 1/2 is below alpha (nan: none)."""
    bs = np.arange(math.ceil(discordant / 2), discordant + 1)
    below = np.nonzero(np.minimum(1.0, 2 * binom.sf(bs - 1, discordant, 0.5)) < alpha)[0]
    return float(bs[below[0]]) if len(below) else math.nan


def fisher_power(n: int, n_ref: int, base_rate: float, rise: float, alpha: float) -> float:
    """P(one-sided Fisher exact p < alpha) for k ~ Bin(n, base + rise) against k_ref ~ Bin(n_ref, base).

    Exact: the sum over both counts of the chance of each table times whether Fisher's test
    (the hypergeometric tail P(X >= k), X ~ Hypergeom(n + n_ref, k + k_ref, n)) rejects it.
    """
    rate = min(1.0, base_rate + rise)
    if n <= 0 or n_ref <= 0:
        return 0.0
    k = _likely(n, rate)[:, None]
    k_ref = _likely(n_ref, base_rate)[None, :]
    p = _fisher_tails(n, n_ref, k.ravel(), k_ref.ravel())
    weight = binom.pmf(k, n, rate) * binom.pmf(k_ref, n_ref, base_rate)
    return float(np.sum(weight * (p < alpha)))


def _fisher_tails(n: int, n_ref: int, k: np.ndarray, k_ref: np.ndarray) -> np.ndarray:
    """Fisher's one-sided p-value P(X >= k_i), X ~ Hypergeom(n + n_ref, k_i + k_ref_j, n), for
    every pair (i, j) at once. A table's p-value depends on k and the total t = k + k_ref only, so
    each total's hypergeometric pmf is computed once over its support, from one table of log
    factorials, and summed from the far tail (a cumulative sum, smallest terms first); scipy's
    `hypergeom.sf` summed each table's tail anew, 93% of `evalkit compare`'s time (issue 38).
    tests/test_power.py holds the power it gives equal to scipy's, table by table."""
    whole = n + n_ref
    log_fact = gammaln(np.arange(1, whole + 2, dtype=float))  # log_fact[m] = log(m!)
    totals = np.unique(k[:, None] + k_ref[None, :])[:, None]
    # every tail asked, to where no total's X reaches: by Chvatal's bound (Hoeffding's for the
    # hypergeometric) P(X >= mean + d) <= exp(-2 d^2 / n), under 1e-30 at d = sqrt(35 n), and
    # the largest total has the largest mean: the terms left out change no p-value by 1e-30
    reach = math.ceil(int(totals[-1, 0]) * n / whole + math.sqrt(35 * n))
    x = np.arange(int(k.min()), min(int(totals[-1, 0]), n, max(int(k.max()), reach)) + 1)[None, :]
    inside = (x <= totals) & (n - x <= whole - totals)
    t, xs = np.broadcast_arrays(totals, x)
    t, xs = np.where(inside, t, 0), np.where(inside, xs, 0)
    log_pmf = (log_fact[t] - log_fact[xs] - log_fact[t - xs]
               + log_fact[whole - t] - log_fact[n - xs] - log_fact[np.maximum(whole - t - n + xs, 0)]
               - (log_fact[whole] - log_fact[n] - log_fact[n_ref]))
    pmf = np.where(inside, np.exp(log_pmf), 0.0)
    tails = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1]  # tails[t, x - k.min()] = P(X >= x | total t)
    rows = np.searchsorted(totals[:, 0], k[:, None] + k_ref[None, :])
    p: np.ndarray = np.minimum(tails[rows, np.broadcast_to(k[:, None] - int(k.min()), rows.shape)], 1.0)
    return p


def _likely(n: int, rate: float) -> np.ndarray:
    """The counts of Bin(n, rate) within 8 standard deviations of its mean (the rest weighs < 1e-15)."""
    mean, sd = n * rate, math.sqrt(n * rate * (1 - rate))
    return np.arange(max(0, int(mean - 8 * sd - 2)), min(n, int(mean + 8 * sd + 2)) + 1)


def _smallest(detects: Callable[[float], bool], top: float) -> float | None:
    """The smallest STEP multiple in (0, top] at which `detects(x)` holds (monotone), else None."""
    low, high = 0, int(top / STEP)
    if high < 1 or not detects(high * STEP):
        return None
    while high - low > 1:
        middle = (low + high) // 2
        if detects(middle * STEP):
            high = middle
        else:
            low = middle
    return round(high * STEP, 4)


@functools.lru_cache(maxsize=4096)
def mcnemar_mde(n: int, discordance: float, alpha: float, power: float = POWER) -> float | None:
    """Smallest drop `mcnemar_power` detects with probability >= power; None: none up to all n."""
    if n <= 0:
        return None
    return _smallest(lambda d: mcnemar_power(n, discordance, d, alpha) >= power, 1 - discordance)


@functools.lru_cache(maxsize=4096)
def fisher_mde(n: int, n_ref: int, base_rate: float, alpha: float, power: float = POWER) -> float | None:
    """Smallest rise of a rate `fisher_power` detects with probability >= power; None: none."""
    if n <= 0 or n_ref <= 0:
        return None
    return _smallest(lambda r: fisher_power(n, n_ref, base_rate, r, alpha) >= power, 1 - base_rate)


def _smallest_n(detects: Callable[[int], bool], most: int) -> int | None:
    """The smallest n in [1, most] at which `detects(n)` holds (`most`: a normal approximation's n, times a safety factor), by bisection (power grows with n
    up to the sawtooth of exact tests, a question or two wide); None when out of reach."""
    if not detects(most):
        return None
    low, high = 0, 1
    while not detects(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if detects(middle):
            high = middle
        else:
            low = middle
    return min(high, most)


@functools.lru_cache(maxsize=4096)
def mcnemar_n(margin: float, discordance: float, alpha: float, power: float = POWER) -> int | None:
    """Questions needed for a drop of `margin` to be detected with probability >= power."""
    if margin <= 0 or discordance + margin > 1:
        return None
    # Connor (1987)'s normal approximation bounds the exact search: [z(1-a/2) sqrt(s) + z(power)
    # sqrt(s - d^2)]^2 / d^2, s = discordance + d the discordant share under the drop.
    s = discordance + margin
    guess = (norm.ppf(1 - alpha / 2) * math.sqrt(s) + norm.ppf(power) * math.sqrt(s - margin * margin)) ** 2 / margin**2
    return _smallest_n(lambda n: mcnemar_power(n, discordance, margin, alpha) >= power, most=int(4 * guess) + 100)


@functools.lru_cache(maxsize=4096)
def fisher_n(margin: float, base_rate: float, alpha: float, power: float = POWER) -> int | None:
    """Samples per side (cell and reference alike) for a rise of `margin` to be detected."""
    if margin <= 0 or base_rate + margin > 1:
        return None
    # The two-proportion normal approximation (Fleiss, Statistical Methods for Rates and
    # Proportions, 1981, eq. 3.14, uncorrected) bounds the exact search.
    p1, mean = base_rate + margin, base_rate + margin / 2
    guess = (norm.ppf(1 - alpha) * math.sqrt(2 * mean * (1 - mean))
             + norm.ppf(power) * math.sqrt(p1 * (1 - p1) + base_rate * (1 - base_rate))) ** 2 / margin**2
    return _smallest_n(lambda n: fisher_power(n, n, base_rate, margin, alpha) >= power, most=int(3 * guess) + 100)


def _tost_power_terms(n: int, discordance: float, alpha: float) -> tuple[float, float]:
    """(half-width, sd) at a true difference of 0: the half-width of the (1 - 2 alpha) Newcombe
    interval TOST uses (stats.paired_equivalence), at the expected counts (half the discordant
    questions each way, every concordant one right: the widest), and the standard deviation
    sqrt(discordance / n) of the observed difference (Connor 1987)."""
    spread = max(discordance, 1 / n)  # a deterministic engine: one question's worth
    flips = round(n * spread / 2)
    low, high = newcombe_paired(n - 2 * flips, flips, flips, 0, 1 - 2 * alpha)
    return (high - low) / 2, math.sqrt(spread / n)


def equivalence_margin(n: int, discordance: float, alpha: float, power: float = POWER) -> float | None:
    """The smallest margin two one-sided tests at alpha show with probability >= power when the
    truth is no change: the interval's half-width plus z(1 - beta/2) sd of the observed difference
    (both bounds must land inside: beta/2 per side, Chow, Shao & Wang, "Sample Size Calculations
    in Clinical Research", 2nd ed. 2008, the TOST sample size at a true difference of 0). With
    the Wald interval this is Connor (1987)'s (z(1 - alpha) + z(1 - beta/2)) sqrt(discordance / n);
    Newcombe's interval is a little wider at small counts, and the simulation in
    tests/test_power.py holds the power it promises."""
    if n <= 0:
        return None
    half, sd = _tost_power_terms(n, discordance, alpha)
    return float(half + norm.ppf(1 - (1 - power) / 2) * sd)


@functools.lru_cache(maxsize=4096)
def equivalence_n(margin: float, discordance: float, alpha: float, power: float = POWER) -> int | None:
    """Questions two one-sided tests need to show equivalence within `margin` (`equivalence_margin`
    solved for n, bounded by Connor's normal approximation times four)."""
    if margin <= 0:
        return None
    z = norm.ppf(1 - alpha) + norm.ppf(1 - (1 - power) / 2)
    guess = z * z * max(discordance, margin) / (margin * margin)
    return _smallest_n(lambda n: (m := equivalence_margin(n, discordance, alpha, power)) is not None and m <= margin,
                       most=int(4 * guess) + 100)


def gate_mde(n: int, alpha: float = 0.05, power: float = POWER, sigma: float = 0.5) -> float:
    """TensorRT-LLM's MDE, (z(alpha) + z(beta)) sqrt(2 sigma^2 / n), one-sided; GSM8K n 1319 at
    alpha 0.05, beta 0.2, sigma 0.5: 0.0484."""
    return float((norm.ppf(1 - alpha) + norm.ppf(power)) * math.sqrt(2 * sigma * sigma / n))


def gate_room(n: int, alpha: float = 0.05, sigma: float = 0.5) -> float:
    """TensorRT-LLM's distance from the reference to the threshold, z(alpha) sqrt(2 sigma^2 / n):
    the sampling noise of a run of n 0/1 scores against a reference of n (GSM8K 1319: 0.0320)."""
    return float(norm.ppf(1 - alpha) * math.sqrt(2 * sigma * sigma / n))


def catch_probability(failure_rate: float, repeats: int) -> float:
    """The chance that `repeats` independent runs show at least once a failure that shows in a
    share `failure_rate` of runs: 1 - (1 - p)^k."""
    return 1.0 - (1.0 - failure_rate) ** repeats


def repeats_needed(failure_rate: float, catch: float = 0.9) -> int:
    """The fewest independent runs that show, with probability `catch`, a failure that shows in a
    share `failure_rate` of runs: the smallest k with 1 - (1 - p)^k >= catch (1 in 4 at 90%: 8).
    An intermittent bug (ATOM's DP-attention + PIECEWISE + speculative entry failed one run in
    four, issue 39) passes a single nightly run most nights."""
    if not 0 < failure_rate <= 1 or not 0 < catch < 1:
        raise ValueError("failure_rate must be in (0, 1] and catch in (0, 1)")
    if failure_rate == 1:
        return 1
    return max(1, math.ceil(math.log(1 - catch) / math.log(1 - failure_rate) - 1e-12))
