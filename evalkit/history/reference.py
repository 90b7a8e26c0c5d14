"""What one night of a series is judged against, and whether that judgement can act at all.

A `Reference` is a level, the sd of one healthy point around it (the series' excess spread across
commits and the point's own binomial error, stats/noise.py) and the one-sided limit `z` the
false-alarm rate asks, a t quantile on the degrees of freedom the spread is known to. Its floor,
`level - z * spread` (above the level for a metric that improves as it shrinks), is what the night
must pass, and what `evalkit calibrate --from-history` suggests.

A floor is reported only where it can act (`can_act`): inside the metric's range (a share's floor
below 0 never fails) and no further below the level than twice what a well-known noise would put
it (`MAX_WIDENING`: a t quantile on one or two degrees of freedom says more about the missing
history than about the series). Otherwise the night is `insufficient`, with the number of earlier
points that would make the floor act (`points_needed`), or none where no number would (the noise
leaves no floor inside the range).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from evalkit.evals.units import Unit
from evalkit.stats.noise import MAD_EFFICIENCY, excess_sd, quantile, satterthwaite

HISTORY, SIBLINGS, ACCEPTED = "history", "siblings", "accepted"
"""What a reference's level is read from: the series' own healthy points, the other configurations
of the same model in the same run (a young series), or the points since an accepted level."""
MAX_WIDENING = 2.0
"""A floor acts when its t limit is at most this many times the normal one at the same rate."""
MOST_NEEDED = 500
"""Earlier points `points_needed` looks ahead; past it the floor would never act at this noise."""
MEDIAN_VARIANCE = 1.57
"""Var(median of w points) ~ 1.57 sd^2 / w: the level's own uncertainty widens the spread."""
WINDOW = 20
"""Earlier healthy points whose median is a series' level."""


@dataclass(frozen=True)
class Reference:
    """What a point is judged against: `level`, the point's sd `sd` = sqrt(tau^2 + binomial^2), and
    the limit `z` (in spreads) that a healthy point passes with probability 1 - `rate`."""

    level: float
    sd: float
    window: int
    """Points the level is the median of."""
    rate: float
    z: float
    """The one-sided limit in spreads (noise.quantile: a t quantile, wider while the spread is short of evidence)."""
    dof: float
    """The t distribution's degrees of freedom behind `z`."""
    tau: float = 0.0
    """The excess spread (across commits, or across configurations for `SIBLINGS`) within `sd`."""
    binomial: float = 0.0
    """The point's own binomial sd within `sd` (0: its n is not known)."""
    basis: str = HISTORY

    @property
    def spread(self) -> float:
        """sd of (point - level): the point's noise and the median's uncertainty."""
        spread: float = self.sd * (1 + MEDIAN_VARIANCE / self.window) ** 0.5  # float ** float is Any to mypy
        return spread

    def floor(self, bigger: bool) -> float:
        """The value a healthy point passes with probability 1 - rate: the suggested floor."""
        return self.level - self.z * self.spread if bigger else self.level + self.z * self.spread

    def score(self, value: float, bigger: bool) -> float:
        """Standardized distance from the level, negative when worse (infinite off a level that never moved)."""
        diff = (value - self.level) * (1 if bigger else -1)
        if not self.spread:
            return 0.0 if not diff else (float("inf") if diff > 0 else float("-inf"))
        return diff / self.spread


@dataclass(frozen=True)
class Shortfall:
    """Why a point has no reference that can act, and how many more earlier points would give it one."""

    why: str
    needed: int | None
    """Earlier points still needed (None: no number of points would: the noise leaves no floor in range)."""


def normal_limit(rate: float) -> float:
    return NormalDist().inv_cdf(1 - rate)


def can_act(ref: Reference, bigger: bool, unit: Unit) -> str | None:
    """None when `ref`'s floor can act; else why not, in words."""
    floor = ref.floor(bigger)
    if ref.z > MAX_WIDENING * normal_limit(ref.rate):
        return (f"the noise is known to {ref.dof:.1f} degrees of freedom: its limit (z {ref.z:.1f}) is more than "
                f"{MAX_WIDENING:g} times a well-measured one ({normal_limit(ref.rate):.2f})")
    bound = unit.low if bigger else unit.high
    if bound is not None and (floor <= bound if bigger else floor >= bound):
        return f"its floor {floor:.4g} is outside the metric's range ({unit.said}): it could never fail"
    return None


def widened(ref: Reference, more: int, pairs_dof: float) -> Reference:
    """`ref` as it would be with `more` earlier points of the same spread: more degrees of freedom
    for its excess spread (`pairs_dof`: those it has), a longer window for its level."""
    dof = satterthwaite(ref.tau, max(1.0, pairs_dof + MAD_EFFICIENCY * more), ref.binomial ** 2)
    return Reference(ref.level, ref.sd, min(ref.window + more, WINDOW),
                     ref.rate, quantile(ref.rate, round(dof, 1)), dof, ref.tau, ref.binomial, ref.basis)


def points_needed(ref: Reference, bigger: bool, unit: Unit, pairs_dof: float) -> int | None:
    """The fewest more earlier points (up to MOST_NEEDED) after which `ref`'s floor would act, the
    spread staying what it is; None: none would."""
    for more in range(1, MOST_NEEDED + 1):
        if can_act(widened(ref, more, pairs_dof), bigger, unit) is None:
            return more
    return None


def sibling_reference(values: Sequence[tuple[float, float]], prior: float | None, variance: float,
                      rate: float) -> Reference | None:
    """A young series' night against the other configurations of its model in the same run:
    `values` their (value, binomial variance), `prior` the typical spread between configurations
    over the history (stats/noise.prior's way), `variance` the night's own binomial variance. The
    level is their median; the excess spread between configurations is read from their deviations
    from it (a configuration that legitimately sits a little apart is within it): the larger of their
    own and of it pooled with the prior, so siblings that differ more than configurations usually do
    (other models under one name) widen the floor instead of being outvoted by the prior. The prior
    adds no degrees of freedom: a configuration's legitimate offset from the others is not known
    from other models' runs, so siblings judge where the spread is mostly the nights' own binomial
    error (evalkit's runs, which know their n) or where there are many of them. None: no siblings."""
    if not values:
        return None
    level = statistics.median(v for v, _ in values)
    deviations, variances = [v - level for v, _ in values], [var for _, var in values]
    own = excess_sd(deviations, variances, None, multiplier=1.0) or 0.0
    tau = max(own, excess_sd(deviations, variances, prior, multiplier=1.0) or 0.0)
    dof = satterthwaite(tau, max(1.0, MAD_EFFICIENCY * len(values)), variance)
    sd = (tau * tau + variance) ** 0.5
    return Reference(level, sd, len(values), rate, quantile(rate, round(dof, 1)), dof, tau, variance ** 0.5, SIBLINGS)
