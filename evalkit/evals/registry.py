"""The one place evals are registered: built-ins (GSM8K, the collapse check) and any other.

Everything generic asks here: the config schema (each eval's settings under its name), the
threshold check (known metric names), the cell lifecycle (which evals a cell runs, in order), verdicts,
the report and the history (each metric's comparison kind and columns). Which metrics exist is a
pure function, `metrics(config.evals, stored cells)`: nothing a process validated or read before
changes it (summary.json records a run's, evals/recorded.py). Registration order is
run order: an eval sees the results of those before it (the collapse check scans GSM8K's answers).

    from evalkit.evals import registry
    registry.register(MyEval())      # its module defines MyEval(Eval); see evals/base.py
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from evalkit.evals.base import Eval, EvalSettings, MetricSpec

BUILTINS = ("evalkit.evals.gsm8k", "evalkit.evals.repetition", "evalkit.evals.lm_eval_tasks",
            "evalkit.evals.divergence", "evalkit.evals.consistency", "evalkit.evals.engine_figures")
"""Modules whose import registers the built-in evals (each calls `register` once)."""

_EVALS: dict[str, Eval] = {}
_LOCK = threading.RLock()
_generation = 0
_builtins_loaded = False


def _load_builtins() -> None:
    global _builtins_loaded
    with _LOCK:
        if _builtins_loaded:
            return
        _builtins_loaded = True
        for module in BUILTINS:
            importlib.import_module(module)


def register(ev: Eval) -> Eval:
    """Add an eval (returns it, so a module can write ``EVAL = register(MyEval())``)."""
    global _generation
    with _LOCK:
        known = _EVALS.get(ev.name)
        if known is not None and type(known) is not type(ev):
            raise ValueError(f"eval {ev.name!r} is registered already (by {type(known).__module__})")
        for spec in ev.metrics:
            if not spec.name.startswith(ev.name + "."):
                raise ValueError(f"eval {ev.name!r}: metric {spec.name!r} must start with {ev.name + '.'!r}")
        _EVALS[ev.name] = ev
        _generation += 1
    return ev


def unregister(name: str) -> None:
    """Remove an eval (tests that register a toy one clean up with this)."""
    global _generation
    with _LOCK:
        _EVALS.pop(name, None)
        _generation += 1


def generation() -> int:
    """Changes whenever the set of evals does: caches of derived schemas key on it."""
    _load_builtins()
    return _generation


def _rank(ev: Eval) -> int:
    module = type(ev).__module__
    return BUILTINS.index(module) if module in BUILTINS else len(BUILTINS)


def evals() -> list[Eval]:
    """Every registered eval, in run order: the built-ins in BUILTINS order, then the others in
    the order they were registered (whichever module happened to be imported first)."""
    _load_builtins()
    with _LOCK:
        return sorted(_EVALS.values(), key=_rank)


def get(name: str) -> Eval | None:
    _load_builtins()
    return _EVALS.get(name)


def metrics(evals_config: Any | None = None, records: Iterable[Mapping[str, Any]] = ()) -> list[MetricSpec]:
    """The metrics a config's evals report (`Eval.metrics_for` each section; None: no config, each
    eval's fixed metrics) and those stored cells hold (`Eval.metrics_in`), in eval order then
    declaration order, each name once. Pure: nothing a process validated or read before counts."""
    cells = list(records)
    out: dict[str, MetricSpec] = {}
    for ev in evals():
        found = [*ev.metrics_for(getattr(evals_config, ev.name, None))]
        found += [spec for cell in cells if (raw := ev.raw(cell)) for spec in ev.metrics_in(raw)]
        for spec in found:
            out.setdefault(spec.name, spec)
    return list(out.values())


def metric(name: str, specs: Iterable[MetricSpec] | None = None) -> MetricSpec | None:
    """The spec named `name` among `specs` (default: `metrics()`, the evals' fixed ones)."""
    return next((spec for spec in (metrics() if specs is None else specs) if spec.name == name), None)


def eval_of(metric_name: str) -> Eval | None:
    """The eval that reports `metric_name`: the one whose name is its prefix (`register` holds
    every eval to that)."""
    return next((ev for ev in evals() if metric_name.startswith(ev.name + ".")), None)


def enabled(evals_config: Any) -> list[tuple[Eval, EvalSettings]]:
    """The evals a cell runs, in order, with their settings (`config.evals`); pseudo-evals whose
    figures the lifecycle records (`Eval.runs` False) are not among them."""
    out = []
    for ev in evals():
        settings = getattr(evals_config, ev.name, None)
        if settings is not None and settings.enabled and ev.runs:
            out.append((ev, settings))
    return out
