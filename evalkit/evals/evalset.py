"""The evals one run has, as a value: the built-ins plus what its config's `evals.plugins` names.

Which evals exist used to be process state (a registry a command entered a scope of, so a
plugin's report fell back to defaults outside it). Now a config resolves its `EvalSet` once
(`registry.resolve`, carried as ``config.evals.evalset``), and everything that runs, summarises,
judges or renders a run takes that value: lookup by name, the eval of a metric, the metrics
(a pure function of the config and stored cells), the evals a cell runs, in run order. A
stored run resolves the same set from what it recorded (`registry.recorded`); a plugin that
cannot be imported there is named in `missing`, so a report says what it falls back to.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.evals.base import Eval, EvalSettings, MetricSpec
from evalkit.evals.capabilities import Checks, LifecycleRecorded, Prepares


def eval_name(metric: str) -> str:
    """The name of the eval reporting `metric`: its prefix (``gsm8k.flexible`` -> ``gsm8k``), a fact
    of the name alone (`registry.register` and plugin loading hold every eval to it), so a report
    groups a run's metrics by eval also when it lacks the eval's code."""
    return metric.split(".", 1)[0]


def spec_named(name: str, specs: Iterable[MetricSpec]) -> MetricSpec | None:
    """The spec named `name` among `specs` (None: not one of them)."""
    return next((spec for spec in specs if spec.name == name), None)


@dataclass(frozen=True)
class EvalSet:
    """A run's evals in run order (an eval sees the results of those before it: the collapse check
    scans GSM8K's answers). Immutable: two reports of one run given one set say the same."""

    evals: tuple[Eval, ...]
    missing: tuple[str, ...] = ()
    """Plugins the run recorded that this process cannot import, one line each (`ref: why`):
    their metrics show as recorded, without their eval's code (display, samples, noise floor)."""

    def __iter__(self) -> Iterator[Eval]:
        return iter(self.evals)

    def get(self, name: str) -> Eval | None:
        return next((ev for ev in self.evals if ev.name == name), None)

    def eval_of(self, metric: str) -> Eval | None:
        """The eval that reports `metric`: the one whose name is its prefix; None: none of this set's."""
        return next((ev for ev in self.evals if metric.startswith(ev.name + ".")), None)

    def metrics(self, evals_config: Any | None = None, records: Iterable[Mapping[str, Any]] = ()) -> list[MetricSpec]:
        """The metrics a config's evals report (`Eval.metrics_for` each section; None: no config,
        each eval's fixed metrics) and those stored cells hold (`Eval.metrics_in`), in eval order
        then declaration order, each name once."""
        cells = list(records)
        out: dict[str, MetricSpec] = {}
        for ev in self.evals:
            found = [*ev.metrics_for(getattr(evals_config, ev.name, None))]
            found += [spec for cell in cells if (found_raw := raw(ev, cell)) for spec in ev.metrics_in(found_raw)]
            for spec in found:
                out.setdefault(spec.name, spec)
        return list(out.values())

    def enabled(self, evals_config: Any) -> list[tuple[Eval, EvalSettings]]:
        """The evals a cell runs, in order, with their settings (`config.evals`); pseudo-evals whose
        figures the lifecycle records (`LifecycleRecorded`) are not among them."""
        out = []
        for ev in self.evals:
            settings = getattr(evals_config, ev.name, None)
            if settings is not None and settings.enabled and not isinstance(ev, LifecycleRecorded):
                out.append((ev, settings))
        return out


def raw(ev: Eval, record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """An eval's raw metrics in a cell record (what its `flat` reads): stored under its name
    (``cell.json`` ``metrics.<name>``), or, for figures the lifecycle records, where its `raw` says;
    None: the cell has none."""
    if isinstance(ev, LifecycleRecorded):
        return ev.raw(record)
    found: Mapping[str, Any] | None = (record.get("metrics") or {}).get(ev.name)
    return found


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
