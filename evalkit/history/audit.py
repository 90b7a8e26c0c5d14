"""The gate audit: each series' floor (a config's `min`, ATOM's `Threshold:`) held against its noise.

How often it failed healthy nights (those the judge did not call broken), how often the noise
model says a healthy night fails it, the smallest drop it catches with `POWER`, and the floor the
chosen false-alarm rate suggests (the judge's own boundary for the next night). A floor above the
median of the recent healthy nights fails most of them; one above the suggested floor sits within
the noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist

from evalkit.history.reference import Reference
from evalkit.history.series import Series
from evalkit.history.verdicts import BROKEN, GateAudit, State
from evalkit.history.words import fmt
from evalkit.stats.noise import tail
from evalkit.stats.power import POWER


def gate_audit(s: Series, states: Sequence[State], ref: Reference | None) -> GateAudit | None:
    """Series `s`'s floor against its noise: `states` its points as judged, `ref` the next night's
    reference (None: no floor, or none can act yet)."""
    floor = s.floor
    if floor is None:
        return None
    bigger = s.bigger_is_better
    healthy = [p for p, state in zip(s.points, states) if state.verdict not in BROKEN]
    fired = sum((p.value < floor) if bigger else (p.value > floor) for p in healthy)
    if ref is None:
        return GateAudit(floor, len(healthy), fired, None, None, None, ("too few points to judge the floor",))
    sign = 1 if bigger else -1
    modelled = tail(ref.score(floor, bigger), ref.dof)  # the distribution `suggested` comes from
    drop = max(0.0, sign * (ref.level - floor) + NormalDist().inv_cdf(POWER) * ref.spread) * s.scale
    suggested = ref.floor(bigger)
    notes = []
    if sign * (floor - ref.level) >= 0:
        notes.append(f"above the median {fmt(ref.level)} of the last {ref.window} healthy nights: fails most of them")
    elif sign * (floor - suggested) > 0:
        notes.append(f"within the noise: a healthy night fails it {modelled * 100:.2g}% of the time "
                     f"({ref.rate * 100:.2g}% allowed)")
    return GateAudit(floor, len(healthy), fired, modelled, drop, suggested, tuple(notes))
