"""How long a config's cells took in earlier runs: what `evalkit plan` estimates a run's wall time from.

A cell's time is its engine's start-up (until ready and warmed up: `engine_ready_s`), each eval's
time (`<eval>_s`) and what is left of `total_s` (the stop, the GPU release, the records). An
eval's time is read against its samples times its repeats (`<eval>.n`, `<eval>.repeats` of the
same record), so an estimate for another `--limit` or another number of repeats scales it: a
straight line through the runs when they scored two or more sample counts (its intercept is the
eval's set-up: lm-eval's, the first cell's imports), else through zero, which overstates an
estimate far above the n measured by that set-up times the ratio. Start-up and the rest depend
on neither, and are medians over the cell's latest finished runs (`LATEST`), as is the
per-sample time through zero: one slow night (a cold cache, a busy box) does not move them.

A cell recorded with its cost (cell.json `cost`, store/costs.py) is read from its spans instead:
its start-up is the engine's launch until it served (its tree's proof and version check
included), and its evals ran one after another or at once (a wave): then the cell waits on the
slowest, so its evals take the longest one's time rather than their sum, and the newest run says
which the next night does.

Only cells that finished (`status = 'ok'`) of runs of the same config name count: a cell that
failed stopped early, and another config's engine is another engine.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from evalkit.history.db import History

LATEST = 20
"""Finished runs of a cell, newest first, its medians are taken over."""


@dataclass(frozen=True)
class CellTime:
    """A cell's measured time: medians over its `runs` latest finished runs."""

    runs: int
    startup_s: float
    """Engine start until ready and warmed up."""
    other_s: float
    """The rest of the cell's total: stop, GPU release, records."""
    per_sample_s: dict[str, float] = field(default_factory=dict)
    """Per eval, seconds per sample per repeat (where the record says how many samples)."""
    fixed_s: dict[str, float] = field(default_factory=dict)
    """Per eval of `per_sample_s`, its seconds whatever the samples (0 unless two sample counts
    were measured)."""
    samples: dict[str, float] = field(default_factory=dict)
    """Per eval of `per_sample_s`, the samples it scored (median): an estimate's n where the
    plan cannot know it (a prompt set of its own length)."""
    eval_s: dict[str, float] = field(default_factory=dict)
    """Per eval whose sample count is not recorded, its seconds as measured."""
    wave: bool = False
    """The newest run's evals ran at once (their spans overlapped): the cell waits on the slowest."""

    def estimate(self, samples: dict[str, int | None], repeats: dict[str, int]) -> tuple[float, dict[str, float]]:
        """The cell's seconds, and each eval's, when each eval scores `samples[name]` samples
        `repeats[name]` times (an eval missing from `samples` did not run then and is left out)."""
        evals = {}
        for name, n in samples.items():
            if name in self.per_sample_s:
                evals[name] = (self.fixed_s.get(name, 0.0)
                               + self.per_sample_s[name] * (n or self.samples[name]) * repeats.get(name, 1))
            elif name in self.eval_s:
                evals[name] = self.eval_s[name]
        return self.startup_s + _together(evals.values(), self.wave) + self.other_s, evals


def _together(seconds: Iterable[float], wave: bool) -> float:
    """The evals' time: their sum one after another, the slowest's in a wave."""
    return max(seconds, default=0.0) if wave else sum(seconds)


Figures = tuple[float, float, dict[str, tuple[float, float, float]], dict[str, float], bool]
"""One finished cell's start-up and rest seconds, per eval (seconds, samples, repeats), the
seconds of evals without a sample count, and whether its evals ran in a wave."""


def _wave(cost: dict[str, Any]) -> bool:
    """Whether two of the cost's eval spans overlapped."""
    spans = sorted((s["start_s"], s["end_s"]) for s in cost.get("spans", []) if s.get("kind") == "eval")
    return any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))


def _figures(timings: dict[str, Any], metrics: dict[str, Any], cost: dict[str, Any] | None = None) -> Figures | None:
    """One finished cell's figures; None without a total."""
    total = timings.get("total_s")
    if not isinstance(total, (int, float)):
        return None
    startup = float(timings.get("engine_ready_s") or timings.get("engine_start_s") or 0.0)
    if cost and (launches := [s["end_s"] - s["start_s"] for s in cost.get("spans", []) if s.get("kind") == "startup"]):
        startup = float(sum(launches))
    per_sample: dict[str, tuple[float, float, float]] = {}
    plain: dict[str, float] = {}
    for key, value in timings.items():
        if not key.endswith("_s") or key.startswith(("engine_", "gpu_", "total")) or not isinstance(value, (int, float)):
            continue
        name = key.removesuffix("_s")
        n, runs = metrics.get(f"{name}.n"), metrics.get(f"{name}.repeats") or 1
        if isinstance(n, (int, float)) and n > 0:
            per_sample[name] = (float(value), float(n), float(runs))
        else:
            plain[name] = float(value)
    wave = _wave(cost or {})
    evals = _together((float(timings[f"{name}_s"]) for name in (*per_sample, *plain)), wave)
    return startup, max(0.0, float(total) - startup - evals), per_sample, plain, wave


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _line(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(seconds whatever the samples, seconds per sample and repeat) of one eval's runs
    (seconds, samples, repeats): a least-squares line over two or more sample counts (its
    intercept kept between 0 and the fastest run), else the median ratio through zero."""
    xs, ys = [n * k for _, n, k in points], [seconds for seconds, _, _ in points]
    if len(set(xs)) > 1:
        slope, intercept = statistics.linear_regression(xs, ys)
        if slope > 0:
            fixed = min(max(intercept, 0.0), min(ys))
            return fixed, _median([(y - fixed) / x for x, y in zip(xs, ys)])
    return 0.0, _median([y / x for x, y in zip(xs, ys)])


def cell_times(history: History, config_name: str, latest: int = LATEST) -> dict[str, CellTime]:
    """Per cell id, its time over the `latest` finished runs of the config named `config_name`
    (its file's stem, as the history records it); cells never finished are absent."""
    rows = history.db.execute(
        """SELECT c.cell_id, c.timings, c.metrics, c.cost FROM runs r JOIN cells c ON c.run_id = r.run_id
           WHERE r.config_name = ? AND c.status = 'ok' ORDER BY r.started_at DESC, r.run_id DESC""", (config_name,))
    found: dict[str, list[Figures]] = {}
    for cell_id, timings, metrics, cost in rows:
        kept = found.setdefault(cell_id, [])
        if len(kept) < latest and (figures := _figures(json.loads(timings or "{}"), json.loads(metrics or "{}"),
                                                       json.loads(cost) if cost else None)):
            kept.append(figures)
    out = {}
    for cell_id, runs in found.items():
        if not runs:
            continue
        names = sorted({name for _, _, per, _, _ in runs for name in per})
        plain_names = {name for _, _, _, plain, _ in runs for name in plain} - set(names)
        lines = {name: _line([r[2][name] for r in runs if name in r[2]]) for name in names}
        out[cell_id] = CellTime(
            runs=len(runs), startup_s=_median([r[0] for r in runs]), other_s=_median([r[1] for r in runs]),
            per_sample_s={name: per for name, (_, per) in lines.items()},
            fixed_s={name: fixed for name, (fixed, _) in lines.items()},
            samples={name: _median([r[2][name][1] for r in runs if name in r[2]]) for name in names},
            eval_s={name: _median([r[3][name] for r in runs if name in r[3]]) for name in sorted(plain_names)},
            wave=runs[0][4])
    return out
