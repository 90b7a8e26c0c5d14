"""What a metric's numbers mean: each metric's unit and range, declared once, read by everyone.

A threshold of ``min: 90`` on GSM8K accuracy (a share, at most 1) can never pass; a history floor
of -19.35 on it can never fail; a throughput noise said in "points" reads as nonsense. All three
come from code that did not know what the metric's numbers are. Here each metric declares it once
(`MetricSpec.unit`, evals/base.py) and config load, `plan`, the history judge and calibrate ask:

* `Unit`: a frozen value: `name` ("share", "tokens/s", ...), the range `low`..`high` (None: open
  on that side), and how a difference is said to a reader (`change_word` after scaling by
  `change_scale`: a share's change in points, x100).
* `Unit.check(value) -> str | None`: None when a value of the metric can be `value`, else why not
  in words (a share of 90 reads as a percentage: "0.90?").
* `Unit.check_change(margin) -> str | None`: the same for a difference (a `max_drop_*` margin, a
  noise): a share's change is at most 1; 2 reads as points.
* `Unit.clamp(value)`: the value brought inside the range (a suggested floor never below 0).
* `Unit.describe(value)` (``0.942``, ``1234 tokens/s``) and `Unit.describe_change(delta)`
  (``-7.1 points``, ``-120 tokens/s``, ``+3.0 ms``): how reports say them.
* `unit_of(name, specs=())`: the unit of the metric called `name` among `specs`, else among the
  built-in evals' metrics, else `NUMBER` (nothing known: no range, plain changes). History series
  of imported dashboards and stored runs ask here by name.

`Unit` and the constants live in evals/unit_kinds.py (no evalkit imports: evals/base.py holds a
spec's unit) and are read from here. Constants: `SHARE` (accuracy, rates: [0, 1], changes in points), `TOKENS_PER_S`, `SECONDS` (shown
in ms), `NATS` (a divergence: at least 0), `NATS_CHANGE` (a signed change of nats per token),
`TOKENS` (a count or position of tokens), `COUNT` (events), `NUMBER`. `UNITS` holds them by name:
summary.json records a spec's unit by its name and a report reads it back there.

A metric compared per question (PAIRED) or as k of n (COUNT) is a share by construction: its spec
gets `SHARE` whatever it leaves at the default, and declaring another unit is an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from evalkit.evals.unit_kinds import (
    COUNT,
    NATS,
    NATS_CHANGE,
    NUMBER,
    SECONDS,
    SHARE,
    TOKENS,
    TOKENS_PER_S,
    UNITS,
    Unit,
    unit_named,
)

if TYPE_CHECKING:
    from evalkit.evals.base import MetricSpec

__all__ = ["COUNT", "NATS", "NATS_CHANGE", "NUMBER", "SECONDS", "SHARE", "TOKENS", "TOKENS_PER_S", "UNITS", "Unit",
           "unit_named", "unit_of"]


def unit_of(name: str, specs: Iterable[MetricSpec] = ()) -> Unit:
    """The unit of the metric called `name`: its spec's among `specs` (a run's, a config's), else
    that of the built-in eval reporting it (`Eval.known_spec`: a history series, an imported
    dashboard, a run read without its config), else NUMBER."""
    for spec in specs:
        if spec.name == name:
            return spec.unit
    from evalkit.evals import registry

    ev = registry.builtins().eval_of(name)
    known = ev.known_spec(name) if ev is not None else None
    return known.unit if known is not None else NUMBER
