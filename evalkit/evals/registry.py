"""Where evals come from: the built-ins (GSM8K, the collapse check) and any other registered, a
plain table filled as their modules are imported, and those a config names as `module.path:ATTR`
(`evals.plugins`), loaded and registered nowhere.

    from evalkit.evals import registry
    registry.register(MyEval())      # its module defines MyEval(Eval); see evals/base.py

Nothing here answers "which evals exist" for a run: a config resolves its own `EvalSet`
(`resolve`: the registered evals, then its plugins; evals/evalset.py), carried as
``config.evals.evalset`` to the run, the verdict and the report, and a stored run resolves it
from what it recorded (`recorded`). So validating a config that names a plugin changes which
evals any other config has in no way, and no command enters a scope for its report to see them.
Registration order is run order: an eval sees the results of those before it.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from evalkit.errors import ConfigError
from evalkit.evals.base import Eval
from evalkit.evals.evalset import EvalSet
from evalkit.user_code import load

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


def builtins() -> EvalSet:
    """The registered evals alone: the set of a config that names no plugin, and what reads a
    stored cell with no config (the history) knows."""
    return EvalSet(tuple(registered()))


def resolve(evals_config: Any | None) -> EvalSet:
    """A config's evals: the registered ones, then those its `evals.plugins` names (ConfigError
    for one that cannot load). A config carries it as ``config.evals.evalset``."""
    return EvalSet(tuple(registered()) + plugins(getattr(evals_config, "plugins", None) or ()))


def recorded(*runs: Mapping[str, Any]) -> EvalSet:
    """The evals of stored runs (their run.json): the registered ones and the plugins their
    configs named, like `resolve`, but a plugin this process cannot load is named in `missing`
    rather than raised, so a report still shows what the run recorded and says what it lacks."""
    refs = dict.fromkeys(ref for run in runs for ref in ((run.get("config") or {}).get("evals") or {}).get("plugins") or [])
    found: list[Eval] = []
    missing: list[str] = []
    for i, ref in enumerate(refs):
        try:
            ev = plugin(ref, f"evals.plugins[{i}]")
        except ConfigError as e:
            missing.append(str(e))
            continue
        if all(ev.name != known.name for known in found):
            found.append(ev)
    return EvalSet(tuple(registered()) + tuple(found), tuple(missing))
