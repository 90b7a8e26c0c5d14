"""How much one series of nightly scores moves when nothing broke, estimated so that the breaks in
the data do not inflate it, and each point's own binomial error is not counted as the series' spread.

A point of a series is `level + commit effect + run noise`: the commit effect (the small real
changes every commit brings, and the scheduling and batching of its run) has one sd for the
whole series, the *excess spread* `tau`; the run noise of a score on n questions is binomial, its
variance `p(1 - p) / n` known from the point's own n. A difference of two points then has variance
`2 tau^2 + v_a + v_b` (`v`: each point's binomial variance; 0 where n is unknown), and `tau` is read
from the differences standardized by it:

    median_k |d_k| / sqrt(2 tau^2 + v_k)  =  Phi^-1(0.75)        (`excess_sd`)

a median, so a regression, an intermittent failure or a level shift moves one or two differences
each, not the estimate, until half of them are breaks; with every `v` zero it is the plain
median-of-differences sd, `median |d| / (0.6745 sqrt 2)`. A 5-question point's differences are
divided by its own large binomial error, so it says little about `tau` instead of widening it.

Two spreads, as a nightly sees them: re-running the same commit (`same_commit`: every pair of runs
of one commit) and moving from one commit to the next (`across_commits`: every point against the
point before it when their commits differ). A short series says little about its own spread, so its
differences are pooled with the typical spread of other series of the same kind (`prior`, counted
as `PRIOR_PAIRS` differences of that size, inside the median). A point is then judged with
`sqrt(tau^2 + v)`, its own binomial variance `v` added (`judged_sd`), on a t distribution whose
degrees of freedom (`Noise.dof`, then `satterthwaite` for the binomial part, which is known, not
estimated) say how well the spread is known: `quantile` and `tail`.

Pure functions of numbers; evalkit's history (history/judge.py) decides what a series is.
"""

from __future__ import annotations

import bisect
import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Q75 = 0.6744897501960817
"""Phi^-1(0.75): the median of |Z| for a standard normal Z."""
MEDIAN_ABS_DIFF = Q75 * math.sqrt(2)
"""Median of |X - Y| for X, Y independent normal with sd 1."""
PRIOR_PAIRS = 8
"""How many differences the pooled estimate counts as, beside a series' own."""
MAD_EFFICIENCY = 0.37
"""A median-of-differences sd is worth about 37% as many points as a plain sd of normal data
(the MAD's asymptotic efficiency), so a limit from k differences is a t quantile on 0.37 k degrees
of freedom: a short history's estimate can be low by chance, and the limit widens to say so."""
PRIOR_DOF = 30
"""What a prior adds to the degrees of freedom: the median spread of a kind's series."""
MAX_DOF = 1000.0
"""Degrees of freedom past which a t quantile is the normal one (a spread that is all binomial)."""


@dataclass(frozen=True)
class Diffs:
    """A series' differences with the binomial variance of each (the two points' summed; 0: unknown):
    between re-runs of one commit, and between consecutive points of two commits."""

    same_commit: tuple[float, ...]
    across_commits: tuple[float, ...]
    same_var: tuple[float, ...] = ()
    across_var: tuple[float, ...] = ()


@dataclass(frozen=True)
class Noise:
    """One series' excess spreads in its own units (sd of one point beyond its binomial error),
    pooled with its kind's prior while short."""

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


def diffs(points: Sequence[tuple[str, float, float]]) -> Diffs:
    """`points`: (commit, value, binomial variance) in time order."""
    by_commit: dict[str, list[tuple[float, float]]] = {}
    for commit, value, var in points:
        by_commit.setdefault(commit, []).append((value, var))
    same = [(a - b, va + vb) for runs in by_commit.values() for i, (a, va) in enumerate(runs) for b, vb in runs[i + 1:]]
    across = [(value - prev, var + prev_var) for (commit, value, var), (prev_commit, prev, prev_var)
              in zip(points[1:], points) if commit != prev_commit]
    return Diffs(tuple(d for d, _ in same), tuple(d for d, _ in across),
                 tuple(v for _, v in same), tuple(v for _, v in across))


class Windows:
    """A series' differences indexed by their points, so the `Diffs` of any window of consecutive
    points (a night's last NOISE_WINDOW) is a slice, not a pass over the series: `points` are
    (commit, value, n) in time order, n None where unknown."""

    def __init__(self, points: Sequence[tuple[str, float, int | None]]) -> None:
        self.n = [n for _, _, n in points]
        self.across = [(i, value - points[i - 1][1]) for i, (commit, value, _) in enumerate(points)
                       if i and commit != points[i - 1][0]]
        """(later point, difference) of consecutive points of two commits, by later point."""
        firsts: dict[str, list[int]] = {}
        self.same: list[tuple[int, int, float]] = []
        """(later point, earlier point, difference) of every pair of runs of one commit, by later point."""
        for j, (commit, value, _) in enumerate(points):
            runs = firsts.setdefault(commit, [])
            self.same += [(j, i, value - points[i][1]) for i in runs]
            runs.append(j)
        self._across_at = [i for i, _ in self.across]
        self._same_at = [j for j, _, _ in self.same]

    def diffs(self, lo: int, hi: int, level: float) -> Diffs:
        """The differences among points lo..hi-1, each with the binomial variance of its two points
        at `level` (the series' level: under health every point's share)."""
        across = self.across[bisect.bisect_right(self._across_at, lo):bisect.bisect_left(self._across_at, hi)]
        same = [pair for pair in self.same[bisect.bisect_left(self._same_at, lo):bisect.bisect_left(self._same_at, hi)]
                if pair[1] >= lo]
        if not any(self.n[lo:hi]):
            return Diffs(tuple(d for _, _, d in same), tuple(d for _, d in across))
        var = [binomial_var(level, n) for n in self.n[lo:hi]]
        return Diffs(tuple(d for _, _, d in same), tuple(d for _, d in across),
                     tuple(var[j - lo] + var[i - lo] for j, i, _ in same),
                     tuple(var[i - lo] + var[i - 1 - lo] for i, _ in across))


def excess_sd(differences: Sequence[float], variances: Sequence[float] = (), prior: float | None = None,
              multiplier: float = 2.0) -> float | None:
    """The sd `tau` of one point beyond its binomial error, from `differences` whose variance is
    `multiplier * tau^2 + variances[k]` (2: a difference of two points; 1: a point against a known
    level): the `tau` at which half the standardized differences |d_k| / sqrt(m tau^2 + v_k) exceed
    Phi^-1(0.75), that is `tau^2 = median_k ((d_k / 0.6745)^2 - v_k) / m`, at least 0. `prior` (a tau)
    counts as `PRIOR_PAIRS` differences of its typical size. None: nothing to read it from.
    `variances` shorter than `differences` are 0 (no n known). With every variance 0 it is the plain
    median-of-differences sd, median |d| / (0.6745 sqrt m)."""
    var = [*variances[:len(differences)], *[0.0] * (len(differences) - len(variances))]
    excess = [((d / Q75) ** 2 - v) / multiplier for d, v in zip(differences, var)]
    if prior is not None:
        excess += [prior * prior] * PRIOR_PAIRS
    if not excess:
        return None
    if not any(var):
        return float(statistics.median(abs(x) ** 0.5 for x in excess))
    return math.sqrt(max(0.0, statistics.median(excess)))


def own_spread(d: Diffs, same: bool) -> float | None:
    """A series' own excess spread (re-runs of a commit when `same`, else across commits) where it
    has at least `PRIOR_PAIRS` such differences to tell it: what it adds to its kind's prior."""
    values, variances = (d.same_commit, d.same_var) if same else (d.across_commits, d.across_var)
    return excess_sd(values, variances) if len(values) >= PRIOR_PAIRS else None


def prior(spreads: Iterable[float | None]) -> float | None:
    """The spread of a typical series: the median of other series' own spreads (`own_spread`; a
    series is never its own prior, so a lone series leans on nothing); none known: None."""
    known = [v for v in spreads if v is not None]
    return statistics.median(known) if known else None


def estimate(d: Diffs, prior_same: float | None, prior_across: float | None) -> Noise:
    """A series' `Noise` from its differences, each spread pooled with its prior."""
    return Noise(excess_sd(d.same_commit, d.same_var, prior_same), excess_sd(d.across_commits, d.across_var, prior_across),
                 len(d.across_commits), prior_across is not None)


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


def judged_sd(noise: Noise, variance: float = 0.0) -> float | None:
    """The sd a point is judged with: the across-commit excess spread (a nightly's next point is
    mostly a new commit) and the point's own binomial variance, `sqrt(tau^2 + v)`; None: neither
    known. 0 is a series that never moved with no n known: any move away from its level is then
    beyond its noise."""
    if noise.across_commits is None and not variance:
        return None
    return math.sqrt((noise.across_commits or 0.0) ** 2 + variance)


def satterthwaite(tau: float, dof: float, variance: float) -> float:
    """Degrees of freedom of `tau^2 + variance` where `tau^2` is estimated on `dof` and `variance`
    (binomial) is known: (tau^2 + v)^2 / (tau^4 / dof) (Welch-Satterthwaite), at most MAX_DOF. A
    spread that is mostly binomial is well known however short the history."""
    if not variance:
        return dof
    if not tau:
        return MAX_DOF
    return min(MAX_DOF, (tau * tau + variance) ** 2 / (tau ** 4 / dof))


def binomial_var(share: float, n: int | None) -> float:
    """The binomial variance of a share measured on n questions (0 when n is unknown or the value is
    no share); a share of 0 or 1 counts as one event's worth (1/n), so a series that never collapsed
    still has a noise."""
    if not n or not 0 <= share <= 1:
        return 0.0
    p = min(max(share, 1 / n), 1 - 1 / n)
    return p * (1 - p) / n
