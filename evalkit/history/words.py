"""Why a night got its verdict, in words a nightly's reader acts on.

Values in the series' own units, changes and noise in its change unit (points for a share,
tokens/s for a throughput: evals/units.py), the floor with its z; a broken night since when and at
what level against the healthy one; a young night which siblings it was judged against; an
insufficient one how many more earlier points it needs and why.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from evalkit.evals.units import Unit
from evalkit.history.reference import SIBLINGS
from evalkit.history.series import Series
from evalkit.history.verdicts import INSUFFICIENT, INTERMITTENT, OK, REGRESSION, SHIFT, State


def fmt(value: float) -> str:
    return f"{value:.4g}"


def noise_said(unit: Unit, sd: float) -> str:
    """A noise in the unit's change word to two decimals (``0.41 points``, ``12.30 tokens/s``)."""
    return f"{sd * unit.change_scale:.2f} {unit.change_word}".rstrip()


def why(s: Series, pi: int, state: State, related: Sequence[str] = ()) -> str:
    """The reasons of point `pi` of series `s` as judged (`state`), with what the same run says
    beside a broken one (`related`: history/judge.py reads it)."""
    point, unit, ref = s.points[pi], s.measure, state.reference
    accepted = f" ({state.acceptance.said()})" if state.acceptance is not None else ""
    if state.verdict == INSUFFICIENT and state.shortfall is not None:
        needed = state.shortfall.needed
        more = (f"{needed} more earlier point{'s' if needed != 1 else ''} needed" if needed
                else "no number of earlier points would give a floor at this noise")
        return f"{more}: {state.shortfall.why}{accepted}"
    if ref is None:
        return f"the accepted level starts here{accepted}"
    change = unit.describe_change(point.value - ref.level)
    limit = f"noise {noise_said(unit, ref.spread)}, floor {fmt(ref.floor(s.bigger_is_better))} (z {ref.z:.2f})"
    if ref.basis == SIBLINGS:
        young = f"; its own history: {state.shortfall.why}" if state.shortfall is not None else ""
        where = (f"{fmt(point.value)} vs the median {fmt(ref.level)} of {ref.window} other configurations of {s.group} "
                 f"in the same run, {change}, {limit}{young}")
        return where if state.verdict == OK else f"below what its siblings allow: {where}"
    where = f"{fmt(point.value)} vs level {fmt(ref.level)} (median of the last {ref.window}), {change}, {limit}{accepted}"
    if state.verdict == OK:
        return where
    first = state.first if state.first is not None else pi
    episode = s.points[first:pi + 1]
    since = (f"since {episode[0].commit[:12]}, {len(episode)} nights, level {fmt(statistics.median(p.value for p in episode))} "
             f"vs healthy {fmt(ref.level)}: tonight ")
    reruns = [p for i, p in enumerate(s.points) if p.commit == point.commit and i != pi]
    words = {REGRESSION: f"below what the noise allows: {since if len(episode) > 1 else ''}{where}",
             INTERMITTENT: (f"the same commit also ran healthy ({', '.join(fmt(p.value) for p in reruns)}): {where}"),
             SHIFT: (f"a lasting level change {since.replace('since ', 'since commit ', 1)}{where} "
                     f"(bisect between {episode[0].commit[:12]} and the commit before it)")}
    return "; ".join([words[state.verdict], *related])
