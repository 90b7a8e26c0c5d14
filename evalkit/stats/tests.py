"""Statistics for comparing serving configurations ("cells") on the SAME GSM8K questions.

Why paired: every cell answers the identical question set, so the informative quantity
is which questions changed outcome (the discordant pairs), not two independent
accuracies. McNemar's exact test and Newcombe's paired interval use that pairing and
are far more sensitive than comparing two separate intervals (REFERENCE.md section 6).
Collapse rates (share of long generations that degenerate) are compared with Fisher's
exact test, because collapses are rare and the counts small.

Deciding a regression (see `is_regression`): a cell is called worse than its reference
only if BOTH (1) McNemar p < alpha, and (2) |diff| > `NoiseFloor.max_pairwise_diff`, the
largest accuracy swing seen between repeats of one unchanged cell. (2) is a practical-
magnitude guard: an engine with batch-dependent numerics flips some answers on every
rerun, and with many cells x comparisons a few p < alpha are expected by chance; a delta
no bigger than rerunning the same cell produced is not actionable. The floor is in the
same unit as `diff` (an accuracy difference between two runs on the same questions),
unlike `flip_rate`, which grows with the number of repeats and bounds the swing from
above (it would hide real regressions).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, cast

from scipy.stats import binomtest, fisher_exact

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "Equivalence",
    "FisherResult",
    "NoiseFloor",
    "Paired",
    "Proportion",
    "fisher_collapse",
    "is_regression",
    "noise_floor",
    "paired_comparison",
    "paired_equivalence",
    "proportion",
    "wilson_interval",
]


def _json_safe(value: Any) -> Any:
    """nan/inf become None so `json.dumps(..., allow_nan=False)` works on every result."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


class _ToDict:
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples -> lists, nan/inf -> None)."""
        return {k: _json_safe(v) for k, v in asdict(cast("DataclassInstance", self)).items()}


_NORMAL = NormalDist()
"""The standard normal's quantiles: the standard library's (Wichura's AS241, within 4e-15 of
scipy's `norm.ppf` from 1e-15 to 0.5), 500 times faster a call than scipy's, which matters to a TOST
that inverts an interval by bisection (`_one_sided_p`: 64 quantiles a p-value)."""


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return _NORMAL.inv_cdf(1.0 - (1.0 - confidence) / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval (Wilson 1927; Newcombe 1998 single-proportion method 3).

    Chosen over Wald because it stays inside [0, 1] and keeps near-nominal coverage for
    small n and for p near 0 or 1 (e.g. collapse rates). n = 0 returns (0.0, 1.0): with
    no data every proportion is plausible, and callers need not special-case empty cells.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    z = _z(confidence)
    if n == 0:
        return (0.0, 1.0)
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


@dataclass(frozen=True)
class Proportion(_ToDict):
    """k of n correct: p = k/n, lm-eval's stderr, and a Wilson interval (low, high)."""

    k: int
    n: int
    p: float
    stderr: float
    low: float
    high: float


def proportion(successes: int, n: int, confidence: float = 0.95) -> Proportion:
    """Accuracy with the stderr lm-eval reports, so evalkit's numbers equal lm-eval's.

    lm-eval's `mean_stderr` is sample_stddev/sqrt(n) with ddof=1; for 0/1 scores that is
    exactly sqrt(p(1-p)/(n-1)) (not the textbook sqrt(p(1-p)/n)). stderr is nan for
    n < 2 (lm-eval divides by zero there); p is nan for n = 0.
    """
    low, high = wilson_interval(successes, n, confidence)
    p = successes / n if n else math.nan
    stderr = math.sqrt(p * (1 - p) / (n - 1)) if n >= 2 else math.nan
    return Proportion(successes, n, p, stderr, low, high)


@dataclass(frozen=True)
class Paired(_ToDict):
    """a (treatment/cell) vs b (reference/baseline) on the same n questions.

    2x2 table with rows = a, columns = b: `both` (textbook a), `a_only` = right in a,
    wrong in b (textbook b), `b_only` = right in b, wrong in a (textbook c), `neither`
    (textbook d). diff = acc_a - acc_b = (a_only - b_only)/n; (low, high) is Newcombe's
    method-10 interval for it; p_value is McNemar's exact test. `a_only_ids`/`b_only_ids`
    list the flipped questions when ids were given (else empty).
    """

    n: int
    acc_a: float
    acc_b: float
    diff: float
    both: int
    a_only: int
    b_only: int
    neither: int
    p_value: float
    low: float
    high: float
    confidence: float
    a_only_ids: tuple[str, ...] = ()
    b_only_ids: tuple[str, ...] = ()


def newcombe_paired(e: int, f: int, g: int, h: int, confidence: float) -> tuple[float, float]:
    """Newcombe (1998) method 10: Wilson limits for both margins combined by square-and-add
    with the continuity-corrected correlation phi*. Cells e=both, f=a_only, g=b_only,
    h=neither. Ref: Newcombe RG, "Improved confidence intervals for the difference between
    binomial proportions based on paired data", Stat Med 1998;17(22):2635-2650."""
    n = e + f + g + h
    k1, k2 = e + f, e + g
    p1, p2 = k1 / n, k2 / n
    l1, u1 = wilson_interval(k1, n, confidence)
    l2, u2 = wilson_interval(k2, n, confidence)
    denom = k1 * (n - k1) * k2 * (n - k2)
    num: float = e * h - f * g
    if num > 0:
        num = max(num - n / 2, 0.0)
    phi = num / math.sqrt(denom) if denom > 0 else 0.0  # 0 when any margin is empty
    d = p1 - p2
    dl1, du1, dl2, du2 = p1 - l1, u1 - p1, p2 - l2, u2 - p2
    low = d - math.sqrt(max(0.0, dl1 * dl1 - 2 * phi * dl1 * du2 + du2 * du2))
    high = d + math.sqrt(max(0.0, du1 * du1 - 2 * phi * du1 * dl2 + dl2 * dl2))
    return (max(-1.0, low), min(1.0, high))


def paired_comparison(
    a: Sequence[bool],
    b: Sequence[bool],
    ids: Sequence[str] | None = None,
    confidence: float = 0.95,
) -> Paired:
    """Compare per-question marks a (cell/treatment) and b (baseline/reference).

    McNemar exact: two-sided binomial test of a_only ~ Bin(a_only + b_only, 0.5); only
    discordant questions carry information, concordant ones cancel. p = 1.0 when there
    are no discordant pairs. n = 0 gives nan accuracies, p = 1.0 and the interval (-1, 1).
    Raises ValueError when a, b (and ids) differ in length.
    """
    if len(a) != len(b) or (ids is not None and len(ids) != len(a)):
        raise ValueError(f"length mismatch: a={len(a)} b={len(b)} ids={None if ids is None else len(ids)}")
    _z(confidence)  # validate confidence even when n = 0
    xs, ys = [bool(x) for x in a], [bool(y) for y in b]
    n = len(xs)
    both = sum(x and y for x, y in zip(xs, ys))
    a_only = sum(x and not y for x, y in zip(xs, ys))
    b_only = sum(y and not x for x, y in zip(xs, ys))
    neither = n - both - a_only - b_only
    disc = a_only + b_only
    p_value = float(binomtest(a_only, disc, 0.5).pvalue) if disc else 1.0
    if n:
        acc_a, acc_b = (both + a_only) / n, (both + b_only) / n
        low, high = newcombe_paired(both, a_only, b_only, neither, confidence)
    else:
        acc_a = acc_b = math.nan
        low, high = -1.0, 1.0
    a_ids = tuple(str(i) for i, x, y in zip(ids, xs, ys) if x and not y) if ids is not None else ()
    b_ids = tuple(str(i) for i, x, y in zip(ids, xs, ys) if y and not x) if ids is not None else ()
    return Paired(n, acc_a, acc_b, acc_a - acc_b, both, a_only, b_only, neither,
                  min(1.0, p_value), low, high, confidence, a_ids, b_ids)


@dataclass(frozen=True)
class FisherResult(_ToDict):
    """Collapse rate k1/n1 (cell) vs k2/n2 (baseline). odds_ratio is the sample odds ratio
    (k1*(n2-k2))/((n1-k1)*k2) as scipy reports it (inf/nan with zero cells -> None in JSON)."""

    rate1: float
    rate2: float
    diff: float
    odds_ratio: float
    p_two_sided: float
    p_greater: float


def fisher_collapse(k1: int, n1: int, k2: int, n2: int) -> FisherResult:
    """Fisher's exact test on [[k1, n1-k1], [k2, n2-k2]].

    Exact because collapses are rare (often 0-5 per cell) where chi-square is invalid.
    p_greater tests H1 "rate1 > rate2": the cell collapses more than the baseline.
    """
    if not (0 <= k1 <= n1 and 0 <= k2 <= n2):
        raise ValueError(f"need 0 <= k <= n, got {k1}/{n1} and {k2}/{n2}")
    table = [[k1, n1 - k1], [k2, n2 - k2]]
    odds, p_two = fisher_exact(table, alternative="two-sided")
    _, p_gt = fisher_exact(table, alternative="greater")
    rate1 = k1 / n1 if n1 else math.nan
    rate2 = k2 / n2 if n2 else math.nan
    return FisherResult(rate1, rate2, rate1 - rate2, float(odds), float(p_two), float(p_gt))


@dataclass(frozen=True)
class NoiseFloor(_ToDict):
    """Run-to-run noise of ONE unchanged cell. `flipping` holds the ids (or indices) of the
    questions whose mark is not the same in all repeats; flip_rate = n_flipping/n_questions;
    max_pairwise_diff = largest |acc_i - acc_j| over pairs of repeats."""

    n_questions: int
    n_repeats: int
    n_flipping: int
    flipping: tuple[str | int, ...]
    flip_rate: float
    max_pairwise_diff: float


def noise_floor(repeats: Sequence[Sequence[bool]], ids: Sequence[str] | None = None) -> NoiseFloor:
    """Measure how much an identical cell moves between repeats (same questions, same order).

    Needs >= 2 repeats of equal length (ValueError otherwise): one run says nothing about
    noise, and a silent floor of 0 would turn every significant delta into a regression.
    """
    if len(repeats) < 2:
        raise ValueError("noise_floor needs at least 2 repeats")
    runs = [[bool(x) for x in r] for r in repeats]
    n = len(runs[0])
    if any(len(r) != n for r in runs) or (ids is not None and len(ids) != n):
        raise ValueError("all repeats (and ids) must have the same length")
    flips = [i for i in range(n) if len({r[i] for r in runs}) > 1]
    labels: tuple[str | int, ...] = tuple(str(ids[i]) for i in flips) if ids is not None else tuple(flips)
    accs = [sum(r) / n if n else 0.0 for r in runs]
    max_diff = max(abs(x - y) for x, y in combinations(accs, 2))
    return NoiseFloor(n, len(runs), len(flips), labels, len(flips) / n if n else 0.0, max_diff)


def is_regression(cmp: Paired, floor: NoiseFloor | None = None, alpha: float = 0.05) -> bool:
    """True when a (cell) is worse than b (baseline): diff < 0, McNemar p < alpha, and
    |diff| > floor.max_pairwise_diff (see module docstring for why). Without a floor only
    the first two conditions apply."""
    margin = floor.max_pairwise_diff if floor is not None else 0.0
    return cmp.diff < 0 and cmp.p_value < alpha and abs(cmp.diff) > margin


def newcombe_unpaired(k1: int, n1: int, k2: int, n2: int, confidence: float = 0.95) -> tuple[float, float]:
    """Interval for k1/n1 - k2/n2 from two independent samples: Newcombe's hybrid score interval
    (Newcombe 1998, Stat. Med. 17:873, method 10), from each rate's Wilson interval. It keeps to
    [-1, 1] and behaves at 0 events, where the Wald interval collapses to a point."""
    if not n1 or not n2:
        return -1.0, 1.0
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_interval(k1, n1, confidence)
    l2, u2 = wilson_interval(k2, n2, confidence)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


@dataclass(frozen=True)
class Equivalence(_ToDict):
    """Whether a paired difference stays inside +-margin: two one-sided tests (TOST).

    p_equivalent: the larger of the two one-sided p-values of H0 "diff <= -margin" and H0 "diff
    >= +margin" (small: equivalence shown); p_outside: the smaller of the one-sided p-values of
    H0 "diff >= -margin" and H0 "diff <= +margin" (small: the difference is shown to be beyond
    the margin, on the side where it lies). (low, high): the (1 - 2 alpha) interval, which lies
    inside +-margin exactly when p_equivalent < alpha (Schuirmann DJ, "A comparison of the two
    one-sided tests procedure and the power approach for assessing the equivalence of average
    bioavailability", J Pharmacokinet Biopharm 1987;15:657-680).
    """

    margin: float
    diff: float
    p_equivalent: float
    p_outside: float
    low: float
    high: float
    confidence: float


def _one_sided_p(e: int, f: int, g: int, h: int, bound: float, side: str) -> float:
    """The one-sided p-value of "diff beyond `bound`" by inverting Newcombe's interval: the alpha
    whose one-sided (1 - alpha) limit on `side` ("low": the lower limit exceeds the bound; "high":
    the upper limit is below it) just reaches `bound`; 1.0 when the estimate itself does not."""
    n = e + f + g + h
    diff = (f - g) / n
    if (side == "low" and diff <= bound) or (side == "high" and diff >= bound):
        return 1.0
    lo, hi = 1e-15, 0.5  # one-sided alpha: the limit moves towards the estimate as alpha grows
    for _ in range(32):  # halves log(alpha)'s range of 35 each step: 1e-8 relative at the end
        mid = math.sqrt(lo * hi)
        low, high = newcombe_paired(e, f, g, h, 1 - 2 * mid)
        beyond = low > bound if side == "low" else high < bound
        if beyond:
            hi = mid
        else:
            lo = mid
    return hi


def paired_equivalence(both: int, a_only: int, b_only: int, neither: int, margin: float,
                       alpha: float) -> Equivalence:
    """TOST on paired 0/1 marks with the margin in accuracy units (0.02 = 2 points), each
    one-sided test by inverting Newcombe's method-10 interval (the interval `paired_comparison`
    reports), so the verdict and the printed interval always agree."""
    if margin <= 0 or not 0 < alpha < 0.5:
        raise ValueError(f"need margin > 0 and 0 < alpha < 0.5, got {margin}, {alpha}")
    n = both + a_only + b_only + neither
    if n == 0:
        return Equivalence(margin, math.nan, 1.0, 1.0, -1.0, 1.0, 1 - 2 * alpha)
    args = (both, a_only, b_only, neither)
    p_equivalent = max(_one_sided_p(*args, -margin, "low"), _one_sided_p(*args, margin, "high"))
    p_outside = min(_one_sided_p(*args, margin, "low"), _one_sided_p(*args, -margin, "high"))
    low, high = newcombe_paired(*args, 1 - 2 * alpha)
    return Equivalence(margin, (a_only - b_only) / n, p_equivalent, p_outside, low, high, 1 - 2 * alpha)
