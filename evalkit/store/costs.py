"""What a cell cost: device-seconds (the devices it held x its wall time), split by phase.

A nightly's price is engine-hours, and most of it is start-up and waiting on the slowest long
generation rather than evaluation (issue 49). So each cell records, as cell.json `cost`, the
devices it held, its wall time, the measured span of each phase (the source's build, the engine's
start-up until it served, each eval, the engine's teardown) and the device-seconds of each, which
sum to devices x wall: time no span covers (the tree's proof, writing records) is `other`. Evals
that run at once (one wave on a live engine) share each moment's devices equally, so their
figures still add up; the time of the evals' span in which no eval ran is `evals (between)`, and
a body that timed no eval of its own (a bisect step's batches) is one phase, `evals`.
`waited_on` names the eval whose end closed the evals' span: the one the cell's clock waited for
last (with sequential evals the last one; in a wave the slowest).

Pure data, below the run that measures it: the history, the verdict and every report read it
without reaching into the run's modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

PhaseKind = Literal["setup", "startup", "evals", "eval", "teardown"]
"""`evals`: the span the body of the cell ran in (every eval, a bisect step's batches); `eval`:
one eval inside it."""
OTHER = "other"
BETWEEN = "evals (between)"
HOUR = 3600.0


class _Record(BaseModel):
    """As store/records.py's `Record` (which holds these in cell.json, so cannot be imported here):
    unknown keys kept, so a newer writer's additions survive a read."""

    model_config = ConfigDict(extra="allow")


class Span(_Record):
    """One measured phase of a cell, in seconds from the cell's start."""

    name: str
    """`setup`, `startup`, `evals`, the eval's name, `teardown`."""
    kind: PhaseKind
    start_s: float
    end_s: float

    @property
    def wall_s(self) -> float:
        return max(0.0, self.end_s - self.start_s)


class CellCost(_Record):
    """cell.json `cost`: what the cell held, for how long, and where the time went."""

    devices: int
    """Devices the cell held: those the executor gave it, else what its settings declare
    (`devices`, or tensor_parallel x data_parallel: TP8 is 8)."""
    devices_from: str
    """Where `devices` came from, in words."""
    wall_s: float
    """The cell's whole wall time (cell.json `timings.total_s`)."""
    device_s: float
    """devices x wall_s."""
    phases: dict[str, float]
    """Phase name -> device-seconds, in the order the phases began; they sum to `device_s`."""
    spans: list[Span] = []
    waited_on: str | None = None
    """The eval the cell waited for last; None when no eval span was recorded."""

    @property
    def gpu_hours(self) -> float:
        return self.device_s / HOUR


def cell_cost(devices: int, devices_from: str, wall_s: float, spans: Iterable[Span]) -> CellCost:
    """The cost of a cell that held `devices` for `wall_s` seconds, whose phases took `spans`."""
    spans = sorted(spans, key=lambda s: s.start_s)
    phases: dict[str, float] = {}
    evals = [s for s in spans if s.kind == "eval"]
    for span in spans:
        if span.kind == "evals":
            inside = [e for e in evals if e.start_s < span.end_s and e.end_s > span.start_s]
            # a body that timed no eval of its own (a bisect step's batches) is one phase: `evals`
            shares = _shared(span, inside) if inside else {span.name: span.wall_s}
            for name, seconds in shares.items():
                phases[name] = phases.get(name, 0.0) + devices * seconds
        elif span.kind != "eval":
            phases[span.name] = phases.get(span.name, 0.0) + devices * span.wall_s
    if evals and not any(s.kind == "evals" for s in spans):  # evals timed without their body's span
        for name, seconds in _shared(Span(name="evals", kind="evals", start_s=min(e.start_s for e in evals),
                                          end_s=max(e.end_s for e in evals)), evals).items():
            phases[name] = phases.get(name, 0.0) + devices * seconds
    phases = {name: round(value, 3) for name, value in phases.items() if value > 0}
    total = devices * wall_s
    phases[OTHER] = round(max(0.0, total - sum(phases.values())), 3)
    last = max(evals, key=lambda s: s.end_s, default=None)
    return CellCost(devices=devices, devices_from=devices_from, wall_s=wall_s, device_s=round(total, 3),
                    phases=phases, spans=spans, waited_on=last.name if last else None)


def _shared(body: Span, evals: list[Span]) -> dict[str, float]:
    """Seconds of `body` per eval, each moment split equally among the evals running then; the
    moments none ran are `BETWEEN`."""
    cuts = sorted({body.start_s, body.end_s, *(min(max(t, body.start_s), body.end_s)
                                               for e in evals for t in (e.start_s, e.end_s))})
    out: dict[str, float] = {e.name: 0.0 for e in evals}
    for a, b in zip(cuts, cuts[1:]):
        running = [e.name for e in evals if e.start_s <= a and e.end_s >= b]
        for name in running or [BETWEEN]:
            out[name] = out.get(name, 0.0) + (b - a) / max(1, len(running))
    return out
