"""How much each series of a history moves when nothing broke: the judge's noise model over a batch of series.

Per series, the differences of its points (stats/noise.Windows), indexed so that any night's window
is a slice; only points measured on at least 1/PRECISION as many questions as the night judged count
(`windows`), so a 5-question run never moves what a 1,319-question night is judged with. Each
series' own excess spread (`own_spreads`) is lent to the other series of its kind (`priors`: never
to itself, so a lone series leans on nothing); the typical spread between the configurations of
one model in one run (`sibling_priors`) is what a young series' siblings are read with.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from functools import cached_property

from evalkit.history.series import Series, SeriesPoint
from evalkit.stats.noise import Noise, Windows, binomial_var, estimate, excess_sd, own_spread, prior

NOISE_WINDOW = 100
"""Earlier points a point's noise is read from (noise moves with the fleet and the code)."""
PRECISION = 4
"""A point counts for another's reference when measured on at least 1/PRECISION as many questions."""


def kind_of(s: Series) -> tuple[str, str]:
    """What a series lends its noise to: series of the same kind and unit."""
    return s.kind, s.measure.name


class Spreads:
    """The noise model of `series` (cached per series, per n and per night)."""

    def __init__(self, series: Sequence[Series]) -> None:
        self.series = list(series)
        self._window_cache: dict[tuple[int, int | None], tuple[list[int], Windows]] = {}
        self._prior_cache: dict[int, tuple[float | None, float | None]] = {}

    def windows(self, si: int, n: int | None) -> tuple[list[int], Windows]:
        """The points of series `si` precise enough to judge a point of n questions by (their
        indices), and their differences (cached per n: a keyed series has one)."""
        key = (si, n)
        if key not in self._window_cache:
            s = self.series[si]
            kept = [i for i, p in enumerate(s.points) if not n or not p.n or p.n * PRECISION >= n]
            self._window_cache[key] = kept, Windows([(s.points[i].commit, s.points[i].value, s.points[i].n)
                                                     for i in kept])
        return self._window_cache[key]

    @cached_property
    def _own_spreads(self) -> list[tuple[float | None, float | None]]:
        """Each series' own (same-commit, across-commit) excess spread over its whole history, where
        it has enough differences to tell (what it lends the other series of its kind)."""
        out: list[tuple[float | None, float | None]] = []
        for si, s in enumerate(self.series):
            if not s.points:
                out.append((None, None))
                continue
            d = self.windows(si, None)[1].diffs(0, len(s.points), statistics.median(p.value for p in s.points))
            out.append((own_spread(d, same=True), own_spread(d, same=False)))
        return out

    def priors(self, si: int) -> tuple[float | None, float | None]:
        """The typical (same-commit, across-commit) excess spread of the other series of series
        `si`'s kind (cached per series)."""
        if si not in self._prior_cache:
            kind = kind_of(self.series[si])
            others = [spread for ti, spread in enumerate(self._own_spreads)
                      if ti != si and kind_of(self.series[ti]) == kind]
            self._prior_cache[si] = prior(s for s, _ in others), prior(a for _, a in others)
        return self._prior_cache[si]

    @cached_property
    def sibling_priors(self) -> dict[tuple[str, str], float | None]:
        """The typical spread between the configurations of one model in one run, by kind: each
        point's deviation from its run's median, over every run with three or more (stats/noise's way)."""
        devs: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        for members in self.by_run.values():
            groups: dict[tuple[str, str, tuple[str, str]], list[SeriesPoint]] = {}
            for si, pi in members:
                s = self.series[si]
                groups.setdefault((s.group, s.metric, kind_of(s)), []).append(s.points[pi])
            for (_, _, kind), points in groups.items():
                if len(points) >= 3:
                    level = statistics.median(p.value for p in points)
                    d, v = devs.setdefault(kind, ([], []))
                    d += [p.value - level for p in points]
                    v += [binomial_var(level, p.n) for p in points]
        return {kind: excess_sd(d, v, multiplier=1.0) if len(d) >= 8 else None for kind, (d, v) in devs.items()}

    def noise(self, si: int, pi: int, n: int | None, level: float) -> Noise:
        """The excess spreads of the last NOISE_WINDOW points before point `pi` of series `si` precise
        enough for a point of n questions, pooled with the prior of the series' kind."""
        kept, windows = self.windows(si, n)
        lo, hi = bisect.bisect_left(kept, pi - NOISE_WINDOW), bisect.bisect_left(kept, pi)
        return estimate(windows.diffs(lo, hi, level), *self.priors(si))

    @cached_property
    def by_run(self) -> dict[str, list[tuple[int, int]]]:
        """Run -> (series index, point index) of every point it produced."""
        out: dict[str, list[tuple[int, int]]] = {}
        for si, s in enumerate(self.series):
            for pi, p in enumerate(s.points):
                out.setdefault(p.run, []).append((si, pi))
        return out
