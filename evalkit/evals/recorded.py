"""Metric specs as summary.json records them, and back: a report shows what its run measured.

`summarize` resolves the run's metrics once (its config's evals and its stored cells,
`EvalSet.metrics`) and writes them under ``metrics``: name, comparison kind, direction and
what the report shows (label, key, column, delta_label, pivot, details), and its unit by name.
Renderers, the history export and the checks read them back with `specs_of`, so a summary renders the same whatever
config a process validated before. What JSON cannot hold, the value's display (`text`) and the
repeat noise floor (`noise_floor`), comes back from the eval's own fixed spec of that name, in
the run's `EvalSet`; a metric of an eval that set lacks (a plugin this process cannot import)
keeps the rest: it is shown as recorded, its value plainly. A summary written before the field
existed falls back to the set's fixed specs; one recorded before units were, to the fixed spec's
unit (NUMBER for an eval this process lacks; a PAIRED or COUNT metric is a share whatever).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from evalkit.evals import registry
from evalkit.evals.base import Comparison, Eval, Evidence, MetricDisplay, MetricSpec
from evalkit.evals.evalset import EvalSet
from evalkit.evals.units import NUMBER, unit_named

_CALLABLES = ("text", "noise_floor")
"""Fields a summary cannot hold: taken from the eval's fixed spec of the same name."""
_CORE = tuple(f.name for f in dataclasses.fields(MetricSpec) if f.name not in ("display", *_CALLABLES))
_DISPLAY = tuple(f.name for f in dataclasses.fields(MetricDisplay) if f.name not in _CALLABLES)


def record(spec: MetricSpec) -> dict[str, Any]:
    """One spec as summary.json holds it: one flat record of its core and its display (every field
    but the callables; the kind as its word)."""
    out = {name: getattr(spec, name) for name in _CORE} | {name: getattr(spec.display, name) for name in _DISPLAY}
    out["comparison"] = spec.comparison.value
    out["unit"] = spec.unit.name
    out["details"] = spec.display.details.value if spec.display.details is not None else None
    return out


def records(specs: Iterable[MetricSpec]) -> list[dict[str, Any]]:
    return [record(spec) for spec in specs]


def _fixed(name: str, evals: EvalSet) -> MetricSpec | None:
    ev = evals.eval_of(name)
    return ev.known_spec(name) if ev is not None else None


def spec(recorded: Mapping[str, Any], evals: EvalSet) -> MetricSpec:
    """A recorded spec as a MetricSpec (fields a newer evalkit added are ignored, and so is a kind
    of evidence it added: the report shows none)."""
    fixed = _fixed(recorded["name"], evals)
    shown = {k: v for k, v in recorded.items() if k in _DISPLAY}
    if shown.get("details") not in set(Evidence):
        shown["details"] = None
    display = MetricDisplay(**shown, text=fixed.display.text if fixed is not None else None)
    core = {k: v for k, v in recorded.items() if k in _CORE}
    core["comparison"] = Comparison(core["comparison"])
    core["unit"] = unit_named(core["unit"]) if "unit" in core else (fixed.unit if fixed is not None else NUMBER)
    return MetricSpec(**core, display=display, noise_floor=fixed.noise_floor if fixed is not None else None)


def with_evals(specs: Iterable[MetricSpec], evals: EvalSet) -> list[tuple[Eval, MetricSpec]]:
    """Each spec with the eval of `evals` that reports it (a spec of an eval the set lacks is left
    out: its samples cannot be read)."""
    return [(ev, spec) for spec in specs if (ev := evals.eval_of(spec.name)) is not None]


def specs_of(summary: Mapping[str, Any], evals: EvalSet | None = None) -> list[MetricSpec]:
    """The metrics a summary's run (or a comparison) measured, in report order (`specs_from`)."""
    return specs_from(summary.get("metrics"), evals)


def specs_from(recorded: Iterable[Mapping[str, Any]] | None, evals: EvalSet | None = None) -> list[MetricSpec]:
    """Recorded ``metrics`` as specs, completed from `evals`; None: the built-ins alone (what a
    comparison or a bisect's ends, read without their runs' configs, knows). None recorded (a
    summary from before they were): the set's fixed specs, GSM8K's, the collapse check's and the
    engine's."""
    evals = evals if evals is not None else registry.builtins()
    if recorded is None:
        return evals.metrics()
    return [spec(r, evals) for r in recorded]
