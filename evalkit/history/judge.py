"""Each night judged against its own series: ok, regression, intermittent, shift or insufficient.

The points of a series are judged in time order, each against the points before it
(history/reference.py): its level is the median of the last `WINDOW` *healthy* points (those not
judged broken), so a series that falls and stays down is judged against the level it fell from,
night after night, until it recovers or a person accepts the new level (history/accept.py): the
judge never re-baselines itself. Its noise is the series' excess spread across commits, read from
every earlier point (stats/noise.py: robust to the breaks, each point's own binomial error taken
out, pooled with the typical spread of its kind while short: history/spreads.py), plus the night's
own binomial error; only points measured on at least a quarter as many questions count
(`spreads.PRECISION`), so a 5-question run never moves the level, the noise, the episode or the
shift scan a 1,319-question night is judged with. `z` holds the
false-alarm rate: `rate` is what a healthy nightly pays as a whole, split over its series (Sidak:
1 - (1 - rate)^(1/N)), and within a series between the single night (`1 - SCAN_SHARE` of it) and
the shift scan (`SCAN_SHARE`, split over its windows).

A night below its floor is, in this order:
* `intermittent` when another run of its commit is above it: the same code both healthy and failing;
* `regression` otherwise; after the first night of a fall it says since which commit, how many
  nights, and the level they hold against the healthy one.
A night within its floor while the series is down (its last nights broken) stays broken (the
episode's verdict) while it is nearer the level the series fell to than the healthy one: a fallen
night inside the noise is no recovery. Otherwise it is a `shift` when it is below the level and the
mean of the last 3, 5, 8 or 13 healthy nights is below the level by more than that mean's noise
allows: a lasting change too small for one night, named at its first commit (the start that makes
the drop clearest) for `evalkit bisect`. Else `ok`.

A series with fewer than `MIN_HISTORY` healthy points, or whose floor cannot act, is judged against
its siblings (the other configurations of the same model in the same run) where it has
`MIN_SIBLINGS`; else it is `insufficient`, with the number of earlier points still needed.

Related metrics are read together (`related`): an accuracy drop beside a collapse of the same
configuration's speculative acceptance in the same run, or beside other configurations of the same
model (controls) that held in that run, says which part broke.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Sequence

from evalkit.history.accept import Acceptance, acceptances
from evalkit.history.audit import gate_audit
from evalkit.history.db import History
from evalkit.history.reference import (
    ACCEPTED,
    HISTORY,
    MEDIAN_VARIANCE,
    SIBLINGS,
    WINDOW,
    Reference,
    Shortfall,
    can_act,
    points_needed,
    sibling_reference,
)
from evalkit.history.series import ACCEPTANCE, ACCURACY, Series, all_series, from_runs
from evalkit.history.spreads import PRECISION, Spreads, kind_of
from evalkit.history.verdicts import (
    BROKEN,
    INSUFFICIENT,
    INTERMITTENT,
    OK,
    REGRESSION,
    SHIFT,
    Judged,
    Judgement,
    State,
)
from evalkit.history.words import fmt, why
from evalkit.stats.noise import binomial_var, judged_sd, quantile, satterthwaite

DEFAULT_FALSE_ALARM_RATE = 0.01
MIN_HISTORY = 5
MIN_SIBLINGS = 2
SCAN_WINDOWS = (3, 5, 8, 13)
"""The last nights whose mean the shift scan tests."""
SCAN_SHARE = 0.25
"""The share of a series' false-alarm rate the shift scan spends."""


class Judge:
    """Every series of a history, judged: `judge()` -> one `Judged` per series."""

    def __init__(self, series: Sequence[Series], rate: float = DEFAULT_FALSE_ALARM_RATE,
                 accepted: Iterable[Acceptance] = ()) -> None:
        self.series = list(series)
        self.nightly_rate = rate
        self.rate = 1 - (1 - rate) ** (1 / max(1, len(self.series)))
        """Per series and night: `rate` split over the series (Sidak), so a healthy nightly as a whole alarms at `rate`."""
        self.point_rate = self.rate * (1 - SCAN_SHARE)
        self.scan_rate = self.rate * SCAN_SHARE / len(SCAN_WINDOWS)
        self.accepted: dict[str, list[Acceptance]] = {}
        for a in accepted:
            self.accepted.setdefault(a.series, []).append(a)
        self._states: dict[int, list[State]] = {}
        self.spreads = Spreads(self.series)
        self._healthy: dict[int, list[bool]] = {}

    # -- references ---------------------------------------------------------------------------

    def _epoch(self, s: Series, pi: int) -> tuple[int, Acceptance | None]:
        """The first point of the level point `pi` is judged in, and the acceptance that began it."""
        start, found = 0, None
        for a in self.accepted.get(s.name, []):
            first = next((i for i, p in enumerate(s.points) if p.commit == a.commit), None)
            if first is not None and first <= pi and first >= start:
                start, found = first, a
        return start, found

    def _reference(self, si: int, pi: int, healthy: Sequence[bool]) -> Reference | Shortfall:
        """Point `pi`'s own reference (`pi` = len(points): the next night's), or why it has none."""
        s = self.series[si]
        n = s.points[pi].n if pi < len(s.points) else s.points[-1].n if s.points else None
        epoch, acceptance = self._epoch(s, min(pi, len(s.points) - 1))

        kept = self.spreads.windows(si, n)[0]
        recent = []
        for i in reversed(kept[bisect.bisect_left(kept, epoch):bisect.bisect_left(kept, pi)]):
            if healthy[i]:
                recent.append(s.points[i])
                if len(recent) == WINDOW:
                    break
        least = MIN_HISTORY if acceptance is None else 1
        if len(recent) < least:
            return Shortfall(f"{len(recent)} earlier healthy points; {least} needed to know the series' level",
                             least - len(recent))
        level = statistics.median(p.value for p in recent)
        noise = self.spreads.noise(si, pi, n, level)
        variance = binomial_var(level, n)
        sd = judged_sd(noise, variance)
        if sd is None:
            return Shortfall("no noise known: one commit so far, no kind of series like it, no number of questions",
                             None)
        tau = noise.across_commits or 0.0
        dof = satterthwaite(tau, noise.dof, variance)
        ref = Reference(level, sd, len(recent), self.point_rate, quantile(self.point_rate, round(dof, 1)), dof,
                        tau, variance ** 0.5, HISTORY if acceptance is None else ACCEPTED)
        reason = can_act(ref, s.bigger_is_better, s.measure)
        if reason is None:
            return ref
        return Shortfall(reason, points_needed(ref, s.bigger_is_better, s.measure, noise.dof))

    def _siblings(self, si: int, pi: int) -> Reference | None:
        """A young night's reference from the other configurations of its model in its run (None: too few,
        or their floor cannot act)."""
        s, point = self.series[si], self.series[si].points[pi]
        values = []
        for ti, tpi in self.spreads.by_run.get(point.run, []):
            t = self.series[ti]
            if ti != si and t.group == s.group and t.metric == s.metric and t.configuration != s.configuration \
                    and kind_of(t) == kind_of(s):
                values.append(t.points[tpi])
        if len(values) < MIN_SIBLINGS:
            return None
        level = statistics.median(p.value for p in values)
        ref = sibling_reference([(p.value, binomial_var(level, p.n)) for p in values],
                                self.spreads.sibling_priors.get(kind_of(s)), binomial_var(level, point.n), self.point_rate)
        return ref if ref is not None and can_act(ref, s.bigger_is_better, s.measure) is None else None

    # -- verdicts -----------------------------------------------------------------------------

    def states(self, si: int) -> list[State]:
        """Every point of series `si` as judged on its night, in order (cached)."""
        if si not in self._states:
            self._judge_series(si)
        return self._states[si]

    def classify(self, si: int, pi: int) -> tuple[str, Reference | None, int | None]:
        """(verdict, reference, first point of its broken episode) of point `pi` of series `si`."""
        state = self.states(si)[pi]
        return state.verdict, state.reference, state.first

    def _judge_series(self, si: int) -> None:
        s = self.series[si]
        states: list[State] = []
        healthy: list[bool] = []
        self._states[si], self._healthy[si] = states, healthy
        for pi, point in enumerate(s.points):
            epoch, acceptance = self._epoch(s, pi)
            if acceptance is not None and pi == epoch:
                states.append(State(OK, acceptance=acceptance))
                healthy.append(True)
                continue
            own = self._reference(si, pi, healthy)
            if isinstance(own, Shortfall):
                sibling = self._siblings(si, pi)
                if sibling is None:
                    states.append(State(INSUFFICIENT, shortfall=own, acceptance=acceptance))
                    healthy.append(True)
                else:
                    low = sibling.score(point.value, s.bigger_is_better) < -sibling.z
                    states.append(State(REGRESSION if low else OK, sibling, pi if low else None, own, acceptance))
                    healthy.append(not low)
                continue
            states.append(self._verdict(si, pi, own, epoch, acceptance))
            healthy.append(states[-1].verdict not in BROKEN)

    def _precise_before(self, si: int, pi: int, epoch: int) -> list[int]:
        """The nights of the epoch before `pi` precise enough to judge it by (`spreads.PRECISION`),
        oldest first: a night's episode, shift and re-runs are read among these only."""
        kept = self.spreads.windows(si, self.series[si].points[pi].n)[0]
        return kept[bisect.bisect_left(kept, epoch):bisect.bisect_left(kept, pi)]

    def _verdict(self, si: int, pi: int, ref: Reference, epoch: int, acceptance: Acceptance | None) -> State:
        s, healthy, states = self.series[si], self._healthy[si], self._states[si]
        point, bigger = s.points[pi], s.bigger_is_better
        before = self._precise_before(si, pi, epoch)
        down = []  # the nights of the broken episode `pi` may continue, newest first
        for i in reversed(before):
            if healthy[i]:
                break
            down.append(i)
        episode = down[-1] if down else pi
        lasting = [states[i].verdict for i in reversed(down) if states[i].verdict in (REGRESSION, SHIFT)]
        if ref.score(point.value, bigger) < -ref.z:
            reruns = [s.points[i] for i in self.spreads.windows(si, point.n)[0] if s.points[i].commit == point.commit and i != pi]
            if not lasting and any(ref.score(p.value, bigger) >= -ref.z for p in reruns):
                return State(INTERMITTENT, ref, pi, acceptance=acceptance)
            if not lasting:  # a fall that begins tonight may have begun a night or two before, within the floor
                episode = self._unhealthy_from(si, pi, self._change_point(si, pi, ref, before))
            return State(REGRESSION, ref, episode, acceptance=acceptance)
        if lasting:
            # Within its floor, but the series is down: still broken unless it is nearer the healthy
            # level than the level it fell to (a fallen night within the floor is no recovery).
            fallen = statistics.median(s.points[i].value for i in down)
            if (point.value - (ref.level + fallen) / 2) * (1 if bigger else -1) < 0:
                return State(lasting[-1], ref, episode, acceptance=acceptance)
            return State(OK, ref, acceptance=acceptance)
        start = self._shift(si, pi, ref, before) if ref.score(point.value, bigger) < 0 else None
        if start is None:
            return State(OK, ref, acceptance=acceptance)
        return State(SHIFT, ref, self._unhealthy_from(si, pi, min(start, episode)), acceptance=acceptance)

    def _unhealthy_from(self, si: int, pi: int, first: int) -> int:
        """Nights `first`..`pi` - 1 no longer make the level (a fall began at `first`): those night `pi`
        may speak for (a 5-question night's fall says nothing of the 1,319-question nights among it)."""
        s, healthy = self.series[si], self._healthy[si]
        n = s.points[pi].n
        for i in range(first, pi):
            other = s.points[i].n
            if not n or not other or n * PRECISION >= other:
                healthy[i] = False
        return first

    def _scanned(self, si: int, pi: int, before: Sequence[int], healthy_only: bool = True) -> list[int]:
        """The nights the shift scan reads back from `pi` among `before` (its precise nights of the
        epoch), newest first: those past the epoch's first MIN_HISTORY judged against the series' own
        history, and (`healthy_only`, to detect a shift) still counted healthy: a night already broken
        is no evidence of a new shift, though it may be where one began (where the scan looks for its
        first commit)."""
        states, healthy = self._states[si], self._healthy[si]
        out = [pi]
        for i in reversed(before[MIN_HISTORY:]):
            if len(out) == SCAN_WINDOWS[-1]:
                break
            ref = states[i].reference
            if (healthy[i] or not healthy_only) and ref is not None and ref.basis != SIBLINGS:
                out.append(i)
        return out

    def _window_score(self, si: int, window: Sequence[int], ref: Reference) -> float:
        """The mean of `window`'s nights against the level its oldest night was judged with, in sds of that mean."""
        s, states = self.series[si], self._states[si]
        base = states[window[-1]].reference if window[-1] < len(states) else None
        base = base or ref
        k = len(window)
        values = [s.points[i].value for i in window]
        per_commit: dict[str, int] = {}
        for i in window:
            per_commit[s.points[i].commit] = per_commit.get(s.points[i].commit, 0) + 1
        var = (ref.tau ** 2 * sum(m * m for m in per_commit.values()) + k * ref.binomial ** 2) / k ** 2
        var += base.sd ** 2 * MEDIAN_VARIANCE / base.window
        if var <= 0:
            return 0.0
        sign = 1 if s.bigger_is_better else -1
        return sign * (statistics.fmean(values) - base.level) / var ** 0.5

    def _shift(self, si: int, pi: int, ref: Reference, before: Sequence[int]) -> int | None:
        """The first point of a lasting shift that `pi` ends (None: the scan sees none)."""
        scanned = self._scanned(si, pi, before)
        z = quantile(self.scan_rate, round(ref.dof, 1))
        if not any(len(scanned) >= k and self._window_score(si, scanned[:k], ref) < -z for k in SCAN_WINDOWS):
            return None
        return self._change_point(si, pi, ref, before, healthy_only=False)

    def _change_point(self, si: int, pi: int, ref: Reference, before: Sequence[int], healthy_only: bool = True) -> int:
        """Where a drop that `pi` ends began: the start among the nights back from it (`_scanned`) whose
        mean through `pi` lies furthest below the level in sds of that mean (one night when the nights
        before it are at the level)."""
        around = self._scanned(si, pi, before, healthy_only)
        return min((self._window_score(si, around[:k], ref), around[k - 1]) for k in range(1, len(around) + 1))[1]

    # -- the judged series ---------------------------------------------------------------------

    def judge(self, every: bool = False, only: Iterable[int] | None = None) -> list[Judged]:
        """Every series not replaced by a later key (`only`: those at these indices) with its newest
        point judged (`every`: each of its points)."""
        out = []
        chosen = [i for i, s in enumerate(self.series) if s.replaced is None] if only is None else only
        for si in chosen:
            s = self.series[si]
            states = self.states(si)
            indices = range(len(s.points)) if every else range(len(s.points) - 1, len(s.points))
            judgements = [self._judgement(si, pi) for pi in indices]
            nxt = self._reference(si, len(s.points), self._healthy[si])
            level = nxt.level if isinstance(nxt, Reference) else None
            newest = s.points[-1]
            ref = nxt if isinstance(nxt, Reference) else None
            newest_level = level if level is not None else statistics.median(p.value for p in s.points[-WINDOW:])
            out.append(Judged(s, self.spreads.noise(si, len(s.points), s.points[-1].n, newest_level), ref, judgements,
                              gate_audit(s, states, ref), nxt if isinstance(nxt, Shortfall) else None,
                              states[-1].acceptance if states else None,
                              binomial_var(level if level is not None else newest.value, newest.n) ** 0.5, self.rate))
        return out

    def healthy(self, si: int) -> list[bool]:
        """Whether each point of series `si` counts as healthy for the nights after it."""
        self.states(si)
        return self._healthy[si]

    def _judgement(self, si: int, pi: int) -> Judgement:
        s, state = self.series[si], self.states(si)[pi]
        first = None if state.first is None or state.verdict == INTERMITTENT else s.points[state.first].commit
        related = self.related(si, pi, state.verdict) if state.verdict in BROKEN and state.reference is not None \
            and state.reference.basis != SIBLINGS else []
        return Judgement(s.points[pi], state.verdict, why(s, pi, state, related), state.reference, first,
                         state.shortfall.needed if state.shortfall and state.verdict == INSUFFICIENT else None)

    def related(self, si: int, pi: int, verdict: str) -> list[str]:
        """What the same run says beside a failing point: its acceptance, and its controls (whether
        they fell too only beside a new failure: a shift began runs ago)."""
        s, run = self.series[si], self.series[si].points[pi].run
        said = []
        if s.kind == ACCURACY:
            for ti, tpi in self.spreads.by_run.get(run, []):
                t = self.series[ti]
                if t.kind == ACCEPTANCE and t.configuration == s.configuration:
                    other, ref, _ = self.classify(ti, tpi)
                    was = f" (level {fmt(ref.level)})" if ref else ""
                    fell = "collapsed" if other in BROKEN else "held"
                    said.append(f"speculative acceptance {fell} in the same run: {fmt(t.points[tpi].value)}{was}")
        controls = [(self.series[ci], self.series[ci].points[cpi], self.states(ci)[cpi], cpi)
                    for ci, cpi in self.spreads.by_run.get(run, [])
                    if ci != si and self.series[ci].group == s.group and self.series[ci].metric == s.metric
                    and self.series[ci].configuration != s.configuration]
        held = [(c, p) for c, p, state, _ in controls if state.verdict == OK]
        fallen = [cpi for _, _, state, cpi in controls if state.verdict in (REGRESSION, INTERMITTENT) and state.first == cpi]
        if held:
            named = ", ".join(f"{c.configuration} {fmt(p.value)}" for c, p in held[:3])
            said.append(f"{len(held)} of {len(controls)} other configurations of {s.group} held in the same run "
                        f"({named}{', ...' if len(held) > 3 else ''})")
        elif self.states(si)[pi].first == pi and controls and len(fallen) == len(controls):
            said.append(f"every other configuration of {s.group} fell in the same run too: the run, not the configuration")
        return said


def judge_history(store: History, rate: float = DEFAULT_FALSE_ALARM_RATE) -> Judge:
    """Every series of the history at `store` with the levels people accepted there, ready to judge
    (`evalkit history judge`, `audit`, `calibrate --from-history`)."""
    return Judge(all_series(store), rate, acceptances(store.db))


def model_floors(store: History, model: str, cell: str | None = None,
                 rate: float = DEFAULT_FALSE_ALARM_RATE) -> tuple[Judge, list[Judged]]:
    """What `calibrate --from-history` reads: the judge of every series of the history (its noise
    priors, its accepted levels) and the judged series of `model`'s cells (`cell`: one), their current
    comparability keys only. A series' `reference.floor` is the judge's own boundary for its next
    night; None where no floor can act yet (`shortfall` says why and how many nights it needs)."""
    judge = judge_history(store, rate)
    wanted = {s.name for s in from_runs(store.trend(model, [cell] if cell else []))}
    return judge, judge.judge(only=[i for i, s in enumerate(judge.series) if s.name in wanted and s.replaced is None])


__all__ = ["BROKEN", "DEFAULT_FALSE_ALARM_RATE", "INSUFFICIENT", "INTERMITTENT", "OK", "REGRESSION", "SHIFT",
           "Judge", "Judged", "Judgement", "judge_history", "model_floors"]
