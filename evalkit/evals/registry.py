"""The one place evals are known: built-ins (GSM8K, the collapse check), any other registered, and
those a config names as `module.path:ATTR` (`evals.plugins`).

Everything generic asks here: the config schema (each eval's settings under its name), the
threshold check (known metric names), the cell lifecycle (which evals a cell runs, in order), verdicts,
the report and the history (each metric's comparison kind and columns). Which metrics exist is a
pure function, `metrics(config.evals, stored cells)`: nothing a process validated or read before
changes it (summary.json records a run's, evals/recorded.py). Registration order is
run order: an eval sees the results of those before it (the collapse check scans GSM8K's answers).

    from evalkit.evals import registry
    registry.register(MyEval())      # its module defines MyEval(Eval); see evals/base.py

An eval outside evalkit needs neither: a config names it (``evals: {plugins: [mypkg.evals:EVAL]}``)
and validating that config loads it (`plugin`) without registering it, so which evals exist for
any other config stays the same. Its functions below see it when given that config; what reads
stored cells without one (verdicts, reports) sees it while a command acts on the config
(`using`: a run, a bisect, a report) and not after.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from evalkit.errors import ConfigError
from evalkit.evals.base import Eval, EvalSettings, MetricSpec
from evalkit.evals.capabilities import Checks, LifecycleRecorded, Prepares
from evalkit.user_code import load

BUILTINS = ("evalkit.evals.gsm8k", "evalkit.evals.repetition", "evalkit.evals.lm_eval_tasks",
            "evalkit.evals.divergence", "evalkit.evals.consistency", "evalkit.evals.engine_figures")
"""Modules whose import registers the built-in evals (each calls `register` once)."""

_EVALS: dict[str, Eval] = {}
_LOCK = threading.RLock()
_generation = 0
_builtins_loaded = False
_IN_USE: list[Eval] = []
"""Evals named by the configs commands act on now (`using`), in the order they were named."""


def _load_builtins() -> None:
    global _builtins_loaded
    with _LOCK:
        if _builtins_loaded:
            return
        _builtins_loaded = True
        for module in BUILTINS:
            importlib.import_module(module)


def _unprefixed(ev: Eval) -> str | None:
    """A metric of `ev` not named `<eval name>.<...>`: every metric's eval is its prefix (`eval_of`)."""
    return next((spec.name for spec in ev.metrics if not spec.name.startswith(ev.name + ".")), None)


def register(ev: Eval) -> Eval:
    """Add an eval (returns it, so a module can write ``EVAL = register(MyEval())``)."""
    global _generation
    with _LOCK:
        known = _EVALS.get(ev.name)
        if known is not None and type(known) is not type(ev):
            raise ValueError(f"eval {ev.name!r} is registered already (by {type(known).__module__})")
        if (metric := _unprefixed(ev)) is not None:
            raise ValueError(f"eval {ev.name!r}: metric {metric!r} must start with {ev.name + '.'!r}")
        _EVALS[ev.name] = ev
        _generation += 1
    return ev


@functools.lru_cache(maxsize=64)
def plugin(ref: str, where: str) -> Eval:
    """The eval a config names as `module.path:ATTR` (an `Eval`, or a zero-argument callable
    returning one), loaded once per process and registered nowhere; bad input is a one-line
    ConfigError starting with `where` (``evals.plugins[0]``)."""
    ev = load(ref, where, Eval)
    _load_builtins()
    with _LOCK:
        known = _EVALS.get(ev.name)
    if known is not None and known is not ev:
        raise ConfigError(f"{where}: {ref!r}: its name {ev.name!r} is taken by {type(known).__module__}")
    if (metric := _unprefixed(ev)) is not None:
        raise ConfigError(f"{where}: {ref!r}: metric {metric!r} must start with {ev.name + '.'!r}")
    return ev


def plugins(refs: Iterable[str]) -> tuple[Eval, ...]:
    """The evals `evals.plugins` names, in its order (two of one name are bad input)."""
    out: dict[str, Eval] = {}
    for i, ref in enumerate(refs):
        ev = plugin(ref, f"evals.plugins[{i}]")
        if out.get(ev.name, ev) is not ev:
            raise ConfigError(f"evals.plugins[{i}]: {ref!r}: its name {ev.name!r} is an earlier plugin's")
        out[ev.name] = ev
    return tuple(out.values())


def _named_by(evals_config: Any | None) -> tuple[Eval, ...]:
    return plugins(getattr(evals_config, "plugins", None) or ())


@contextlib.contextmanager
def using(evals_config: Any) -> Iterator[None]:
    """While a command acts on a config (runs it, bisects it, reports a run of it), the evals it
    names are known to every function here, in every thread, also without that config; after,
    they are not."""
    named = _named_by(evals_config)
    with _LOCK:
        _IN_USE.extend(named)
    try:
        yield
    finally:
        with _LOCK:
            for ev in named:  # one entry each: nested or side-by-side uses of a config keep it to the last
                _IN_USE.remove(ev)


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


def registered() -> list[Eval]:
    """The registered evals, in run order: the built-ins in BUILTINS order, then the others in the
    order they were registered (whichever module happened to be imported first)."""
    _load_builtins()
    with _LOCK:
        return sorted(_EVALS.values(), key=_rank)


def evals(evals_config: Any | None = None) -> list[Eval]:
    """Every known eval, in run order: the registered ones, then those in use (`using`) and those
    `evals_config` names (`evals.plugins`)."""
    with _LOCK:
        out = registered() + [ev for ev in dict.fromkeys(_IN_USE) if ev.name not in _EVALS]
    return out + [ev for ev in _named_by(evals_config) if ev not in out]


def get(name: str) -> Eval | None:
    return next((ev for ev in evals() if ev.name == name), None)


def metrics(evals_config: Any | None = None, records: Iterable[Mapping[str, Any]] = ()) -> list[MetricSpec]:
    """The metrics a config's evals report (`Eval.metrics_for` each section; None: no config, each
    eval's fixed metrics) and those stored cells hold (`Eval.metrics_in`), in eval order then
    declaration order, each name once. Pure: nothing a process validated or read before counts."""
    cells = list(records)
    out: dict[str, MetricSpec] = {}
    for ev in evals(evals_config):
        found = [*ev.metrics_for(getattr(evals_config, ev.name, None))]
        found += [spec for cell in cells if (found_raw := raw(ev, cell)) for spec in ev.metrics_in(found_raw)]
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


def raw(ev: Eval, record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """An eval's raw metrics in a cell record (what its `flat` reads): stored under its name
    (``cell.json`` ``metrics.<name>``), or, for figures the lifecycle records, where its `raw` says;
    None: the cell has none."""
    if isinstance(ev, LifecycleRecorded):
        return ev.raw(record)
    found: Mapping[str, Any] | None = (record.get("metrics") or {}).get(ev.name)
    return found


def enabled(evals_config: Any) -> list[tuple[Eval, EvalSettings]]:
    """The evals a cell runs, in order, with their settings (`config.evals`); pseudo-evals whose
    figures the lifecycle records (`LifecycleRecorded`) are not among them."""
    out = []
    for ev in evals(evals_config):
        settings = getattr(evals_config, ev.name, None)
        if settings is not None and settings.enabled and not isinstance(ev, LifecycleRecorded):
            out.append((ev, settings))
    return out


def check(planned: Iterable[tuple[Eval, EvalSettings]]) -> None:
    """Before a run or bisect starts: each eval that `Checks` raises for what would fail every cell."""
    for ev, settings in planned:
        if isinstance(ev, Checks):
            ev.check(settings)


def prepare(planned: Iterable[tuple[Eval, EvalSettings]], run_dir: Path) -> None:
    """Once the run's folder exists, before any cell: each eval that `Prepares` writes its shared files."""
    for ev, settings in planned:
        if isinstance(ev, Prepares):
            ev.prepare(run_dir, settings)
