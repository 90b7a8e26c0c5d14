"""How long a config's cells took in earlier runs: what `evalkit plan` estimates a run's wall time from.

A cell's time is its engine's start-up (until ready and warmed up: `engine_ready_s`), each eval's
time (`<eval>_s`) and what is left of `total_s` (the stop, the GPU release, the records). The
eval times are read per sample and per repeat (`<eval>.n`, `<eval>.repeats` of the same record),
so an estimate for another `--limit` or another number of repeats scales them; start-up and the
rest do not depend on either. Each figure is the median over the cell's latest finished runs
(`LATEST`): one slow night (a cold cache, a busy box) does not move it.

Only cells that finished (`status = 'ok'`) of runs of the same config name count: a cell that
failed stopped early, and another config's engine is another engine.
"""

from __future__ import annotations

import json
import statistics
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
    samples: dict[str, float] = field(default_factory=dict)
    """Per eval of `per_sample_s`, the samples it scored (median): an estimate's n where the
    plan cannot know it (a prompt set of its own length)."""
    eval_s: dict[str, float] = field(default_factory=dict)
    """Per eval whose sample count is not recorded, its seconds as measured."""

    def estimate(self, samples: dict[str, int | None], repeats: dict[str, int]) -> tuple[float, dict[str, float]]:
        """The cell's seconds, and each eval's, when each eval scores `samples[name]` samples
        `repeats[name]` times (an eval missing from `samples` did not run then and is left out)."""
        evals = {}
        for name, n in samples.items():
            if name in self.per_sample_s:
                evals[name] = self.per_sample_s[name] * (n or self.samples[name]) * repeats.get(name, 1)
            elif name in self.eval_s:
                evals[name] = self.eval_s[name]
        return self.startup_s + sum(evals.values()) + self.other_s, evals


Figures = tuple[float, float, dict[str, tuple[float, float]], dict[str, float]]
"""One finished cell's start-up and rest seconds, per eval (seconds per sample, samples), and the
seconds of evals without a sample count."""


def _figures(timings: dict[str, Any], metrics: dict[str, Any]) -> Figures | None:
    """One finished cell's figures; None without a total."""
    total = timings.get("total_s")
    if not isinstance(total, (int, float)):
        return None
    startup = float(timings.get("engine_ready_s") or timings.get("engine_start_s") or 0.0)
    per_sample: dict[str, tuple[float, float]] = {}
    plain: dict[str, float] = {}
    for key, value in timings.items():
        if not key.endswith("_s") or key.startswith(("engine_", "gpu_", "total")) or not isinstance(value, (int, float)):
            continue
        name = key.removesuffix("_s")
        n, runs = metrics.get(f"{name}.n"), metrics.get(f"{name}.repeats") or 1
        if isinstance(n, (int, float)) and n > 0:
            per_sample[name] = (float(value) / (n * runs), float(n))
        else:
            plain[name] = float(value)
    evals = sum(float(timings[f"{name}_s"]) for name in (*per_sample, *plain))
    return startup, max(0.0, float(total) - startup - evals), per_sample, plain


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def cell_times(history: History, config_name: str, latest: int = LATEST) -> dict[str, CellTime]:
    """Per cell id, its time over the `latest` finished runs of the config named `config_name`
    (its file's stem, as the history records it); cells never finished are absent."""
    rows = history.db.execute(
        """SELECT c.cell_id, c.timings, c.metrics FROM runs r JOIN cells c ON c.run_id = r.run_id
           WHERE r.config_name = ? AND c.status = 'ok' ORDER BY r.started_at DESC, r.run_id DESC""", (config_name,))
    found: dict[str, list[Figures]] = {}
    for cell_id, timings, metrics in rows:
        kept = found.setdefault(cell_id, [])
        if len(kept) < latest and (figures := _figures(json.loads(timings or "{}"), json.loads(metrics or "{}"))):
            kept.append(figures)
    out = {}
    for cell_id, runs in found.items():
        if not runs:
            continue
        names = {name for _, _, per, _ in runs for name in per}
        plain_names = {name for _, _, _, plain in runs for name in plain} - names
        out[cell_id] = CellTime(
            runs=len(runs), startup_s=_median([r[0] for r in runs]), other_s=_median([r[1] for r in runs]),
            per_sample_s={name: _median([r[2][name][0] for r in runs if name in r[2]]) for name in sorted(names)},
            samples={name: _median([r[2][name][1] for r in runs if name in r[2]]) for name in sorted(names)},
            eval_s={name: _median([r[3][name] for r in runs if name in r[3]]) for name in sorted(plain_names)})
    return out
