"""How much one series moves when nothing broke, estimated so that the breaks do not inflate it.

Two spreads, as a nightly sees them: re-running the same commit (scheduling, batching, sampling
noise) and moving from one commit to the next (that plus the small real changes every commit
brings). A plain standard deviation of a series that holds a regression counts the regression as
noise and then excuses the next one, so both are read from differences, scaled by their median:

* same commit: every pair of runs of one commit, |a - b|;
* across commits: every point against the point before it when their commits differ.

For normal noise of sd s a difference has sd s*sqrt(2), so its absolute value has median
0.6745 * s * sqrt(2) (`MEDIAN_ABS_DIFF`). A regression, an intermittent failure or a level shift
changes one or two differences each, not their median, until half the differences are breaks.

A short series says little about its own noise, so its differences are pooled with the typical
spread of the other series of the same kind (`prior`, counted as `PRIOR_PAIRS` differences of
that size, inside the median, so a broken night in a short series cannot blow it up): a series
with five points leans on its neighbours, one with two hundred on itself. Where the number of questions is
known, the binomial error of one run is a floor: a deterministic engine that repeats its score
to the digit still has a test set that would move by that much under any real change.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MEDIAN_ABS_DIFF = 0.6744897501960817 * math.sqrt(2)
"""Median of |X - Y| for X, Y independent normal with sd 1: Phi^-1(0.75) * sqrt(2)."""
PRIOR_PAIRS = 8
"""How many differences the pooled estimate counts as, beside a series' own."""


@dataclass(frozen=True)
class Diffs:
    """A series' differences: between re-runs of one commit, and between consecutive points of two commits."""

    same_commit: tuple[float, ...]
    across_commits: tuple[float, ...]


@dataclass(frozen=True)
class Noise:
    """One series' spreads in its own units (sd of one point), pooled with its kind's prior while short."""

    same_commit: float | None
    """Sd of one re-run of a commit; None: no commit was run twice, here or in the prior."""
    across_commits: float | None
    """Sd of one point from commit to commit; None: fewer than two commits, here or in the prior."""
    across_pairs: int = 0
    """The series' own differences behind `across_commits`."""
    pooled: bool = False
    """Whether a prior from other series went into `across_commits`."""

    @property
    def dof(self) -> float:
        """Degrees of freedom of `across_commits`: MAD_EFFICIENCY of its own differences, plus
        PRIOR_DOF for a prior (the typical spread of many series is itself well measured)."""
        return max(1.0, MAD_EFFICIENCY * self.across_pairs + (PRIOR_DOF if self.pooled else 0))


def diffs(points: Sequence[tuple[str, float]]) -> Diffs:
    """`points`: (commit, value) in time order."""
    by_commit: dict[str, list[float]] = {}
    for commit, value in points:
        by_commit.setdefault(commit, []).append(value)
    same = tuple(a - b for values in by_commit.values() for i, a in enumerate(values) for b in values[i + 1:])
    across = tuple(value - prev for (commit, value), (prev_commit, prev) in zip(points[1:], points)
                   if commit != prev_commit)
    return Diffs(same, across)


def robust_sd(differences: Iterable[float], prior: float | None = None) -> float | None:
    """The sd of one point from differences between two points: median |d| / (0.6745 sqrt 2), with
    `prior` (an sd) counted as `PRIOR_PAIRS` differences of its typical size."""
    values = [abs(d) for d in differences] + ([prior * MEDIAN_ABS_DIFF] * PRIOR_PAIRS if prior is not None else [])
    return statistics.median(values) / MEDIAN_ABS_DIFF if values else None


def prior(many: Iterable[Diffs], same: bool) -> float | None:
    """The spread of a typical series among `many` (their own estimates, from those with at least
    `PRIOR_PAIRS` differences: the median; none: None)."""
    values = [robust_sd(d.same_commit if same else d.across_commits) for d in many
              if len(d.same_commit if same else d.across_commits) >= PRIOR_PAIRS]
    return statistics.median(v for v in values if v is not None) if values else None


def estimate(d: Diffs, prior_same: float | None, prior_across: float | None) -> Noise:
    return Noise(robust_sd(d.same_commit, prior_same), robust_sd(d.across_commits, prior_across),
                 len(d.across_commits), prior_across is not None)


MAD_EFFICIENCY = 0.37
"""A median-of-differences sd is worth about 37% as many points as a plain sd of normal data
(the MAD's asymptotic efficiency), so a limit from k differences is a t quantile on 0.37 k degrees
of freedom: a short history's estimate can be low by chance, and the limit widens to say so."""
PRIOR_DOF = 30
"""What a prior adds to the degrees of freedom: the median spread of a kind's series."""


@functools.lru_cache(maxsize=4096)
def quantile(rate: float, dof: float) -> float:
    """The one-sided limit (in sds) a healthy point passes with probability 1 - rate: t(1 - rate, dof)."""
    from scipy.stats import t

    return float(t.ppf(1 - rate, dof))


def tail(score: float, dof: float) -> float:
    """How often a healthy point lands `score` sds or further below its level: the t distribution
    `quantile` reads its limit from, so a floor at the suggested one fails exactly `rate` of nights."""
    from scipy.stats import t

    return float(t.cdf(score, dof))


def judged_sd(noise: Noise, floor: float = 0.0) -> float | None:
    """The sd a point is judged with: the across-commit spread (a nightly's next point is mostly a
    new commit), never below `floor` (the binomial error of one run, when known); None: unknown.
    0 is a series that never moved: any move away from its level is then beyond its noise."""
    if noise.across_commits is None and not floor:
        return None
    return max(noise.across_commits or 0.0, floor)


def binomial_sd(share: float, n: int | None) -> float:
    """The binomial error of a share measured on n questions (0 when n is unknown); a share of 0 or 1
    counts as one event's worth (1/n), so a series that never collapsed still has a noise."""
    if not n or not 0 <= share <= 1:
        return 0.0
    p = min(max(share, 1 / n), 1 - 1 / n)
    return math.sqrt(p * (1 - p) / n)
