"""Each night judged against its own series: ok, regression, intermittent, shift or insufficient.

A point is judged against the points before it (and the re-runs of its own commit): their level
is the median of the last `WINDOW` of them, so a past failure does not drag it; its noise is the
series' across-commit spread (history/noise.py, robust to the breaks in the data, pooled with its
neighbours while short, never below the binomial error where the questions are known). Below
`level - z * sd` it is not ok. `z` holds the false-alarm rate: `rate` is what a healthy nightly
pays as a whole (`DEFAULT_FALSE_ALARM_RATE`, one-sided), split over its series (Sidak: each pays
1 - (1 - rate)^(1/N)), read as a t quantile that widens while the history is short
(noise.quantile); the level's own uncertainty widens sd a little (a median of w points has sd
~ 1.25 sd / sqrt(w)). That boundary is the suggested floor (`Reference.floor`), so `evalkit
calibrate --from-history` and this judgement never disagree.

A point below it is, in this order:
* `intermittent` when another run of its commit is above it: the same code both healthy and
  failing (a race, a bad node, a bug one run in four shows);
* `shift` when it ends a run of at least `SHIFT_POINTS` low points over two or more commits (each
  below `level - LOW_Z * sd`): a lasting level change, the first commit of the run named for
  `evalkit bisect --good <the commit before> --bad <it>`;
* `regression` otherwise.
Fewer than `MIN_HISTORY` earlier points: `insufficient`. A shift the series keeps for `WINDOW / 2`
nights becomes its level: the nightly stops alarming on a change the team accepted (or missed).

The priors that short series lean on are the typical spreads of every series' whole history: with
`--all` a point's noise may borrow a little from its neighbours' later nights (its own series'
noise and level never look ahead).

Related metrics are read together (`related`): an accuracy drop beside a collapse of the same
configuration's speculative acceptance in the same run, or beside other configurations of the
same model (controls) that held in that run, says which part broke.

The gate audit (`audit`) holds each series' floor (a config's `min`, ATOM's `Threshold:`)
against the same model: how often it failed healthy nights, the smallest drop it catches with
`POWER`, and the floor the chosen false-alarm rate suggests.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from statistics import NormalDist
from typing import Any

from evalkit.history.noise import Diffs, Noise, binomial_sd, diffs, estimate, judged_sd, prior, quantile, tail
from evalkit.history.series import ACCEPTANCE, ACCURACY, Series, SeriesPoint
from evalkit.stats.power import POWER

DEFAULT_FALSE_ALARM_RATE = 0.01
MIN_HISTORY = 5
WINDOW = 20
"""Earlier points whose median is the level."""
NOISE_WINDOW = 100
"""Earlier points a point's noise is read from (noise moves with the fleet and the code)."""
SHIFT_POINTS = 3
LOW_Z = NormalDist().inv_cdf(0.9)
"""A member of a shift's low run is below level - 1.28 sd (a healthy point is, one night in ten)."""
OK, REGRESSION, INTERMITTENT, SHIFT, INSUFFICIENT = "ok", "regression", "intermittent", "shift", "insufficient"
BROKEN = (REGRESSION, INTERMITTENT, SHIFT)


@dataclass(frozen=True)
class Reference:
    """What the next point of a series is judged against."""

    level: float
    sd: float
    window: int
    rate: float
    z: float
    """The one-sided limit in sds (noise.quantile: a t quantile, wider for a short history)."""
    dof: float
    """The t distribution's degrees of freedom behind `z`."""

    @property
    def spread(self) -> float:
        """sd of (point - level): the point's noise and the median's uncertainty."""
        spread: float = self.sd * (1 + 1.57 / self.window) ** 0.5  # float ** float is Any to mypy
        return spread

    def floor(self, bigger: bool) -> float:
        """The value a healthy point passes with probability 1 - rate: the suggested floor."""
        return self.level - self.z * self.spread if bigger else self.level + self.z * self.spread

    def score(self, value: float, bigger: bool) -> float:
        """Standardized distance from the level, negative when worse (infinite off a level that never moved)."""
        diff = (value - self.level) * (1 if bigger else -1)
        if not self.spread:
            return 0.0 if not diff else math.copysign(math.inf, diff)
        return diff / self.spread


@dataclass(frozen=True)
class Judgement:
    point: SeriesPoint
    verdict: str
    why: str
    reference: Reference | None = None
    first_bad: str | None = None
    """A shift's first commit (what `evalkit bisect --bad` takes)."""


@dataclass
class Judged:
    """One series with its noise, its judged points (the newest, or every one) and its gate."""

    series: Series
    noise: Noise
    reference: Reference | None
    """What the next night will be judged against (None: too few points)."""
    judgements: list[Judgement] = field(default_factory=list)
    audit: GateAudit | None = None

    @property
    def newest(self) -> Judgement | None:
        return self.judgements[-1] if self.judgements else None


@dataclass(frozen=True)
class GateAudit:
    floor: float
    healthy: int
    fired: int
    """Healthy points below the floor."""
    modelled_rate: float | None
    smallest_drop: float | None
    """Points (the series' scale) below the level at which the floor fails a run with `POWER`."""
    suggested: float | None
    notes: tuple[str, ...]

    @property
    def realized_rate(self) -> float | None:
        return self.fired / self.healthy if self.healthy else None


class Judge:
    """Every series of a history, judged: `judge(all_points)` -> one `Judged` per series."""

    def __init__(self, series: Sequence[Series], rate: float = DEFAULT_FALSE_ALARM_RATE) -> None:
        self.series = list(series)
        self.nightly_rate = rate
        self.rate = 1 - (1 - rate) ** (1 / max(1, len(self.series)))
        """Per series and night: `rate` split over the series (Sidak), so a healthy nightly as a whole alarms at `rate`."""
        self._cache: dict[tuple[int, int], tuple[str, Reference | None, int | None]] = {}

    @cached_property
    def priors(self) -> dict[tuple[str, str, float], tuple[float | None, float | None]]:
        """The typical (same-commit, across-commit) sd of each (kind, unit, scale) of series, from
        their whole histories (history/noise.py)."""
        groups: dict[tuple[str, str, float], list[Diffs]] = {}
        for s in self.series:
            groups.setdefault(self._kind(s), []).append(diffs([(p.commit, p.value) for p in s.points]))
        return {key: (prior(many, same=True), prior(many, same=False)) for key, many in groups.items()}

    def noise(self, s: Series, points: Sequence[SeriesPoint]) -> Noise:
        """`points`' spreads, pooled with the prior of the series' kind."""
        return estimate(diffs([(p.commit, p.value) for p in points]), *self.priors[self._kind(s)])

    @staticmethod
    def _kind(s: Series) -> tuple[str, str, float]:
        return s.kind, s.unit, s.scale

    @cached_property
    def _by_run(self) -> dict[str, list[tuple[int, int]]]:
        """Run -> (series index, point index) of every point it produced."""
        out: dict[str, list[tuple[int, int]]] = {}
        for si, s in enumerate(self.series):
            for pi, p in enumerate(s.points):
                out.setdefault(p.run, []).append((si, pi))
        return out

    def reference(self, s: Series, before: Sequence[SeriesPoint]) -> Reference | None:
        """The level and sd a point after `before` is judged with (None: fewer than MIN_HISTORY)."""
        if len(before) < MIN_HISTORY:
            return None
        recent = before[-WINDOW:]
        level = statistics.median(p.value for p in recent)
        noisy = before[-NOISE_WINDOW:]
        n = next((p.n for p in reversed(recent) if p.n), None)
        noise = self.noise(s, noisy)
        sd = judged_sd(noise, binomial_sd(level, n))
        return None if sd is None else Reference(level, sd, len(recent), self.rate, quantile(self.rate, dof := round(noise.dof, 1)), dof)

    def classify(self, si: int, pi: int) -> tuple[str, Reference | None, int | None]:
        """(verdict, reference, a shift's first point) of point `pi` of series `si`, cached."""
        key = (si, pi)
        if key not in self._cache:
            self._cache[key] = self._classify(self.series[si], pi)
        return self._cache[key]

    def _classify(self, s: Series, pi: int) -> tuple[str, Reference | None, int | None]:
        ref = self.reference(s, s.points[:pi])
        if ref is None:
            return INSUFFICIENT, None, None
        point, bigger = s.points[pi], s.bigger_is_better
        if ref.score(point.value, bigger) >= -ref.z:
            return OK, ref, None
        reruns = [p for i, p in enumerate(s.points) if p.commit == point.commit and i != pi]
        if any(ref.score(p.value, bigger) >= -ref.z for p in reruns):
            return INTERMITTENT, ref, None
        low = pi
        while low > 0 and ref.score(s.points[low - 1].value, bigger) < -LOW_Z:
            low -= 1
        run = s.points[low:pi + 1]
        if len(run) >= SHIFT_POINTS and len({p.commit for p in run}) >= 2:
            return SHIFT, ref, low
        return REGRESSION, ref, None

    def judge(self, every: bool = False, only: Iterable[int] | None = None) -> list[Judged]:
        """Every series (`only`: those at these indices) with its newest point judged (`every`: each of its points)."""
        out = []
        for si in range(len(self.series)) if only is None else only:
            s = self.series[si]
            indices = range(len(s.points)) if every else range(len(s.points) - 1, len(s.points))
            judgements = [self._judgement(si, pi) for pi in indices]
            out.append(Judged(s, self.noise(s, s.points[-NOISE_WINDOW:]),
                              self.reference(s, s.points), judgements, self.audit(si)))
        return out

    def _judgement(self, si: int, pi: int) -> Judgement:
        s = self.series[si]
        verdict, ref, first = self.classify(si, pi)
        return Judgement(s.points[pi], verdict, self._why(si, pi, verdict, ref, first), ref,
                         None if first is None else s.points[first].commit)

    def _why(self, si: int, pi: int, verdict: str, ref: Reference | None, first: int | None) -> str:
        s, point = self.series[si], self.series[si].points[pi]
        if ref is None:
            if pi < MIN_HISTORY:
                return f"{pi} earlier points; {MIN_HISTORY} needed to know the series' level and noise"
            return "no noise known: one commit so far, no kind of series like it, no number of questions"
        pts = s.scale
        where = (f"{_fmt(point.value)} vs level {_fmt(ref.level)} (median of the last {ref.window}), "
                 f"{(point.value - ref.level) * pts:+.1f} points, noise {ref.spread * pts:.2f} points, "
                 f"floor {_fmt(ref.floor(s.bigger_is_better))} (z {ref.z:.2f})")
        if verdict == OK:
            return where
        reruns = [p for i, p in enumerate(s.points) if p.commit == point.commit and i != pi]
        words = {REGRESSION: f"below what the noise allows: {where}",
                 INTERMITTENT: (f"the same commit also ran healthy ({', '.join(_fmt(p.value) for p in reruns)}): "
                                f"{where}"),
                 SHIFT: (f"a lasting level change over the last {pi + 1 - (first or 0)} points, first seen at commit "
                         f"{s.points[first or 0].commit} (bisect between it and the commit before): {where}")}
        return "; ".join([words[verdict], *self.related(si, pi, verdict)])

    def related(self, si: int, pi: int, verdict: str) -> list[str]:
        """What the same run says beside a failing point: its acceptance, and its controls (whether
        they fell too only beside a new failure: a shift began runs ago)."""
        s, run = self.series[si], self.series[si].points[pi].run
        said = []
        if s.kind == ACCURACY:
            for ti, tpi in self._by_run.get(run, []):
                t = self.series[ti]
                if t.kind == ACCEPTANCE and t.configuration == s.configuration:
                    verdict, ref, _ = self.classify(ti, tpi)
                    was = f" (level {_fmt(ref.level)})" if ref else ""
                    fell = "collapsed" if verdict in BROKEN else "held"
                    said.append(f"speculative acceptance {fell} in the same run: {_fmt(t.points[tpi].value)}{was}")
        controls = [(self.series[ci], self.series[ci].points[cpi], self.classify(ci, cpi)[0])
                    for ci, cpi in self._by_run.get(run, [])
                    if ci != si and self.series[ci].group == s.group and self.series[ci].metric == s.metric
                    and self.series[ci].configuration != s.configuration]
        held = [(c, p) for c, p, v in controls if v == OK]
        if held:
            named = ", ".join(f"{c.configuration} {_fmt(p.value)}" for c, p in held[:3])
            said.append(f"{len(held)} of {len(controls)} other configurations of {s.group} held in the same run "
                        f"({named}{', ...' if len(held) > 3 else ''})")
        elif verdict != SHIFT and controls and all(v in (REGRESSION, INTERMITTENT) for _, _, v in controls):
            said.append(f"every other configuration of {s.group} in the same run fell too: the run, not the configuration")
        return said

    def audit(self, si: int) -> GateAudit | None:
        """The series' floor against its noise (None: no floor)."""
        s = self.series[si]
        floor = s.floor
        if floor is None:
            return None
        bigger, pts = s.bigger_is_better, s.scale
        ref = self.reference(s, s.points)
        healthy = [p for pi, p in enumerate(s.points) if self.classify(si, pi)[0] not in BROKEN]
        fired = sum((p.value < floor) if bigger else (p.value > floor) for p in healthy)
        if ref is None:
            return GateAudit(floor, len(healthy), fired, None, None, None, ("too few points to judge the floor",))
        sign = 1 if bigger else -1
        modelled = tail(ref.score(floor, bigger), ref.dof)  # the distribution `suggested` comes from
        drop = max(0.0, sign * (ref.level - floor) + NormalDist().inv_cdf(POWER) * ref.spread) * pts
        suggested = ref.floor(bigger)
        notes = []
        if sign * (floor - ref.level) >= 0:
            notes.append(f"above the median {_fmt(ref.level)} of the last {ref.window} nights: fails most healthy nights")
        elif sign * (floor - suggested) > 0:
            notes.append(f"within the noise: a healthy night fails it {modelled * 100:.2g}% of the time "
                         f"({ref.rate * 100:.2g}% allowed)")
        return GateAudit(floor, len(healthy), fired, modelled, drop, suggested, tuple(notes))


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def regressed(judged: Sequence[Judged]) -> list[Judged]:
    """The series whose newest point is not ok (what makes `evalkit history judge` exit 1)."""
    return [j for j in judged if j.newest is not None and j.newest.verdict in BROKEN]


def to_json(judged: Sequence[Judged]) -> dict[str, list[dict[str, Any]]]:
    """The issue-39 JSON: noise in points, floors and values in the series' units, commits in full."""
    out = []
    for j in judged:
        pts = j.series.scale
        audit = j.audit
        out.append({
            "name": j.series.name, "n": len(j.series.points),
            "noise": {"same_commit": _points(j.noise.same_commit, pts), "across_commits": _points(j.noise.across_commits, pts)},
            "floor": j.series.floor,
            "floor_false_alarm_rate": audit.realized_rate if audit else None,
            "suggested_floor": round(j.reference.floor(j.series.bigger_is_better), 6) if j.reference else None,
            "points": [{"commit": None if jd.point.commit.startswith("run:") else jd.point.commit, "date": jd.point.date,
                        "value": jd.point.value, "verdict": jd.verdict, "why": jd.why} for jd in j.judgements],
        })
    return {"series": out}


def _points(sd: float | None, scale: float) -> float | None:
    return None if sd is None else round(sd * scale, 4)
