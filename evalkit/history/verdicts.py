"""The judge's verdicts as typed records, and the JSON `evalkit history judge --format json` writes.

`State` is one point as the judge saw it on its night; `Judgement` that point with its reasons in
words; `Judged` one series with its noise, the reference the next night will meet (or why none can
act yet) and its gate's audit. history/judge.py builds them, render/nightly.py says them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.history.accept import Acceptance
from evalkit.history.reference import Reference, Shortfall
from evalkit.history.series import Series, SeriesPoint
from evalkit.stats.noise import Noise

OK, REGRESSION, INTERMITTENT, SHIFT, INSUFFICIENT = "ok", "regression", "intermittent", "shift", "insufficient"
BROKEN = (REGRESSION, INTERMITTENT, SHIFT)


@dataclass
class State:
    """One point as judged on its night."""

    verdict: str
    reference: Reference | None = None
    first: int | None = None
    """The first point of the broken episode a broken point belongs to (a shift's first commit)."""
    shortfall: Shortfall | None = None
    """Why the series' own history could not judge it (then its siblings did, or it is insufficient)."""
    acceptance: Acceptance | None = None
    """The accepted level the point was judged against (or starts)."""


@dataclass(frozen=True)
class Judgement:
    point: SeriesPoint
    verdict: str
    why: str
    reference: Reference | None = None
    first_bad: str | None = None
    """The commit a broken episode began at (what `evalkit bisect --bad` takes for a shift)."""
    needed: int | None = None
    """An insufficient point: earlier points still needed (None: unknown, or no number would do)."""


@dataclass(frozen=True)
class GateAudit:
    floor: float
    healthy: int
    fired: int
    """Healthy points below the floor."""
    modelled_rate: float | None
    smallest_drop: float | None
    """Change (the series' change unit: points for a share) below the level at which the floor fails a run with `POWER`."""
    suggested: float | None
    notes: tuple[str, ...]

    @property
    def realized_rate(self) -> float | None:
        return self.fired / self.healthy if self.healthy else None


@dataclass
class Judged:
    """One series with its noise, its judged points (the newest, or every one) and its gate."""

    series: Series
    noise: Noise
    reference: Reference | None
    """What the next night will be judged against (None: none can act yet, see `shortfall`)."""
    judgements: list[Judgement] = field(default_factory=list)
    audit: GateAudit | None = None
    shortfall: Shortfall | None = None
    acceptance: Acceptance | None = None
    """The accepted level the newest point sits in."""
    binomial: float = 0.0
    """The binomial sd of a night like its newest (0: n unknown)."""
    rate: float = 0.0
    """The false-alarm rate a healthy night of this series pays (its single night and its shift scan)."""

    @property
    def newest(self) -> Judgement | None:
        return self.judgements[-1] if self.judgements else None


def regressed(judged: Sequence[Judged]) -> list[Judged]:
    """The series whose newest point is not ok (what makes `evalkit history judge` exit 1)."""
    return [j for j in judged if j.newest is not None and j.newest.verdict in BROKEN]


def to_json(judged: Sequence[Judged], left_out: Sequence[Series] = ()) -> dict[str, Any]:
    """Each series: noise in its change unit (`noise.unit`: points for a share, tokens/s for a
    throughput), floors and values in its own units, commits in full (null: an installed engine's
    run), each point's run; the series another key replaced, once, under `left_out`."""
    out = []
    for j in judged:
        unit = j.series.measure
        audit = j.audit
        out.append({
            "name": j.series.name, "n": len(j.series.points), "unit": unit.name,
            "noise": {"unit": unit.change_word or unit.name, "same_commit": _scaled(j.noise.same_commit, unit.change_scale),
                      "across_commits": _scaled(j.noise.across_commits, unit.change_scale),
                      "binomial": _scaled(j.binomial or None, unit.change_scale)},
            "floor": j.series.floor,
            "floor_false_alarm_rate": audit.realized_rate if audit else None,
            "suggested_floor": round(j.reference.floor(j.series.bigger_is_better), 6) if j.reference else None,
            "needed": j.shortfall.needed if j.shortfall else None,
            "accepted": None if j.acceptance is None else {"from": j.acceptance.commit, "why": j.acceptance.why,
                                                           "at": j.acceptance.at},
            "points": [{"commit": None if jd.point.commit.startswith("run:") else jd.point.commit, "date": jd.point.date,
                        "run": jd.point.run, "value": jd.point.value, "verdict": jd.verdict, "why": jd.why}
                       for jd in j.judgements],
        })
    return {"series": out, "left_out": [{"name": s.name, "why": s.replaced} for s in left_out]}


def _scaled(sd: float | None, scale: float) -> float | None:
    return None if sd is None else round(sd * scale, 4)
