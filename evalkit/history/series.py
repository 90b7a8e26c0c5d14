"""Series: one metric of one (model, configuration) over time, from evalkit's runs and from imported dashboards.

A nightly is judged series by series, and a series' points are read beside the other series of
the same run: the speculative acceptance of the same configuration, and the other configurations
of the same model (its controls). So each series knows its configuration, its model (`group`),
its metric and what kind of metric it is, and each point its run.

Dashboard benches are named freely; ATOM's read `<backend>::<model name> accuracy (GSM8K)` and
`<backend>::<model name> MTP acceptance (%)`, the model name holding the configuration's words
(`DeepSeek-V4-Pro DSpark`), and the acceptance bench carries the accuracy bench's `extra`, its
`Threshold:` included (ROCm/ATOM at ffdf3bb5, .github/scripts/accuracy_to_dashboard.py). `split_name` takes the metric off the end of such a name by the patterns in `KINDS`, so an
accuracy and an acceptance of one configuration share their configuration; a name no pattern
matches is a configuration of its own. evalkit's own series are a model's cell and a registered
metric, its model the group, and one comparability key (history/keys.py): a cell whose key changed
(another question set, eval set-up, engine arguments or environment, devices) starts another
series, named with its key's digest (`sim/deepseek-v4 tp8-fixon gsm8k.flexible #1a2b3c4d`; the first keeps
the plain name), and a series another key has since replaced is left out of the judging
(`Series.replaced` says why, once).

Each series knows its unit (evals/units.py): a registered metric's own, a dashboard's `%` a
percentage, a dashboard's values all in [0, 1] a share; noise and floors are said in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from evalkit.evals import registry
from evalkit.evals.base import Comparison
from evalkit.evals.units import NUMBER, SHARE, Unit, unit_of
from evalkit.history.db import History, Point
from evalkit.history.imports import DashboardPoint, stored_dashboard_points
from evalkit.history.keys import digest, key_differences, row_key
from evalkit.store.comparability import ComparabilityKey

ACCURACY, ACCEPTANCE, OTHER = "accuracy", "acceptance", "other"
KINDS = ((ACCEPTANCE, re.compile(r"^(?P<config>.+?) (?P<metric>(?:MTP |draft )?acceptance(?: rate)? \(%\))$", re.I)),
         (ACCURACY, re.compile(r"^(?P<config>.+?) (?P<metric>accuracy(?: \([^)]*\))?)$", re.I)))
"""A bench name's trailing metric, tried in order: (kind, pattern with `config` and `metric`)."""
PERCENT = Unit("%", "a percentage", 0.0, 100.0, change_word="points", digits=2)
"""A dashboard's `%` bench (an MTP acceptance): a share written 0-100, its changes in points."""


@dataclass(frozen=True)
class SeriesPoint:
    """One night of one series."""

    commit: str
    """The engine commit (full SHA); a run with no known commit stands for one of its own (`run:<id>`)."""
    date: str
    value: float
    run: str
    """The run link (a dashboard's `Run:` URL) or evalkit run id: points of one run are read together."""
    floor: float | None = None
    """The gate the run applied to this series (ATOM's `Threshold:`, a config's `min`)."""
    n: int | None = None
    """Questions behind the value, when known (evalkit's runs)."""


@dataclass
class Series:
    name: str
    configuration: str
    group: str
    """The model: configurations of one group in one run are each other's controls."""
    metric: str
    kind: str
    unit: str
    bigger_is_better: bool
    points: list[SeriesPoint] = field(default_factory=list)
    key: ComparabilityKey | None = None
    """What decides its figures, builds aside (evalkit's series; None: a dashboard's bench)."""
    replaced: str | None = None
    """Why the series is no longer judged: a later key of the same cell and metric replaced it."""

    @cached_property
    def measure(self) -> Unit:
        """The series' unit (read once, when the series is complete): a registered metric's own; a
        dashboard's `%` a percentage, its values all in [0, 1] a share, else a plain number."""
        if self.key is not None:
            return unit_of(self.metric)
        if self.unit == "%":
            return PERCENT
        if all(0 <= p.value <= 1 for p in self.points):
            return SHARE
        return NUMBER if not self.unit else Unit(self.unit, change_word=self.unit, change_digits=2)

    @property
    def scale(self) -> float:
        """A change's multiplier as a reader reads it: 100 for a share (points), else 1."""
        return self.measure.change_scale

    @property
    def floor(self) -> float | None:
        """The newest gate on the series (a gate moves when a team resets it)."""
        return next((p.floor for p in reversed(self.points) if p.floor is not None), None)


def split_name(name: str) -> tuple[str, str, str]:
    """A bench name -> (configuration, metric, kind)."""
    for kind, pattern in KINDS:
        match = pattern.match(name)
        if match:
            return match["config"], match["metric"], kind
    return name, "", OTHER


def from_dashboard(points: Iterable[DashboardPoint]) -> list[Series]:
    """One series per (source, suite, bench name), points in time order."""
    out: dict[tuple[str, str, str], Series] = {}
    for p in sorted(points, key=lambda p: (p.source, p.suite, p.name, p.date)):
        series = out.get((p.source, p.suite, p.name))
        if series is None:
            config, metric, kind = split_name(p.name)
            series = out[(p.source, p.suite, p.name)] = Series(p.name, config, config.split(" ")[0], metric, kind,
                                                                p.unit, p.bigger_is_better)
        floor = p.floor if series.kind != ACCEPTANCE else None  # the accuracy's gate, copied (see above)
        series.points.append(SeriesPoint(p.commit, p.date, p.value, p.run_url or f"{p.suite} {p.date}", floor))
    return list(out.values())


def from_runs(points: Iterable[Point]) -> list[Series]:
    """One series per (model, cell, metric, comparability key) of evalkit's recorded cells, for every
    registered metric with a direction; the floor is the `min` its run checked, the n its eval's `.n`
    metric. A point joins the series of its cell and metric whose newest key it agrees with
    (builds aside; a part either side does not know agrees), the one extended last first; else it
    starts a series of its own."""
    out: dict[tuple[str, str, str], list[Series]] = {}
    known = {spec.name: spec for spec in registry.builtins().metrics()}  # the history keys numbers, not their evals
    for p in sorted(points, key=lambda p: (p.started_at or "", p.run_id)):
        floors = {c.get("metric"): c.get("margin") for c in p.checks or [] if c.get("check") == "min"}
        for metric, value in p.metrics.items():
            spec = known.get(metric)
            if spec is None:
                continue
            eval_name = metric.split(".")[0]
            key = row_key(p.key, eval_name, p.setups, p.metrics, p.model, p.engine)
            same = out.setdefault((p.model, p.cell_id, metric), [])
            series = _series_of(same, key)
            if series is None:
                kind = (ACCEPTANCE if "acceptance" in metric else
                        ACCURACY if spec.comparison is Comparison.PAIRED else OTHER)
                name = f"{p.model} {p.cell_id} {metric}" + (f" #{digest(key)[:8]}" if same else "")
                series = Series(name, f"{p.model} {p.cell_id}", p.model, metric, kind, "", spec.higher_is_better,
                                key=key)
                same.append(series)
            series.key = key  # the newest: the most a later point is compared with
            n = p.metrics.get(f"{eval_name}.n")
            series.points.append(SeriesPoint(p.source_sha or f"run:{p.run_id}", p.started_at or "", value, p.run_id,
                                             floors.get(metric), int(n) if n else None))
    for same in out.values():
        _mark_replaced(same)
    return [s for same in out.values() for s in same]


def _series_of(same: list[Series], key: ComparabilityKey) -> Series | None:
    """The series among `same` (one cell's metric) whose newest key agrees with `key`, the one
    extended last first; None: none does."""
    for series in sorted(same, key=lambda s: s.points[-1].date, reverse=True):
        if series.key is not None and not key_differences(series.key, key):
            return series
    return None


def _mark_replaced(same: list[Series]) -> None:
    """Each series of one cell's metric that another key ran after: left out of the judging, with
    what differs and since which run."""
    newest = max(same, key=lambda s: (s.points[-1].date, s.points[-1].run))
    for series in same:
        if series is not newest and series.key is not None and newest.key is not None:
            first = next((p.run for p in newest.points if p.date > series.points[-1].date), newest.points[0].run)
            series.replaced = (f"replaced by {newest.name} from run {first} on: "
                               + "; ".join(key_differences(series.key, newest.key)))


def all_series(store: History) -> list[Series]:
    """Every series the history holds: each recorded model's cells, then each imported dashboard's benches."""
    runs = [point for model in sorted({m for m, _, _ in store.models()}) for point in store.trend(model)]
    return from_runs(runs) + from_dashboard(stored_dashboard_points(store.db))
