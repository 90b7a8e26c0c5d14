"""What `evalkit plan` says a run will cost and how many repeats an intermittent failure needs.

Wall time: each cell's time is estimated from the history of the same config (history/timing.py:
the median start-up, each eval's seconds per sample scaled to this run's n and repeats, the
rest), a cell without history from the median of the config's other cells, and the matrix's as
the executor would run them: one after another, or side by side on declared devices (the
scheduler's rule: a cell starts in order once enough devices are free). A nightly can be
scheduled by it.

Cost: each cell's GPU-hours are the devices it will hold (run/costs.py: what its settings declare,
TP8 is 8) x its estimated seconds; the verdict's are the sum over its cells, whatever runs side by
side: what one night's answer costs on the box.

Repeats: a failure that shows in a share p of runs is seen by k runs with probability
1 - (1 - p)^k (stats/power.py); the plan says what the config's `evals.gsm8k.repeats` catches,
how many repeats reach the asked chance, and what those cost from the same history.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Sequence
from pathlib import Path

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.history.timing import CellTime
from evalkit.run.costs import devices_held
from evalkit.stats.power import catch_probability, repeats_needed


def eval_samples(config: MatrixConfig, limit: int | None) -> dict[str, int | None]:
    """Per eval a cell runs, the samples it scores: its `count` setting, else its size, capped by
    --limit as the run caps them; None where neither is known (its prompt set's own length)."""
    out: dict[str, int | None] = {}
    for ev, settings in config.evals.evalset.enabled(config.evals):
        n = getattr(settings, "count", None) or ev.size
        out[ev.name] = min(n, limit) if n and limit else (n or limit)
    return out


def eval_repeats(config: MatrixConfig) -> dict[str, int]:
    """Per eval with a `repeats` setting, how many times each cell runs it."""
    return {ev.name: int(getattr(settings, "repeats", 1) or 1) for ev, settings in config.evals.evalset.enabled(config.evals)}


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def cell_estimates(config: MatrixConfig, cells: Sequence[Cell], times: dict[str, CellTime], limit: int | None,
                   repeats: dict[str, int] | None = None) -> dict[str, tuple[float, str]]:
    """Per cell, its estimated seconds and how it was found; cells without history take the
    median of those with (none at all: the cell is absent)."""
    samples, repeats = eval_samples(config, limit), repeats or eval_repeats(config)
    out: dict[str, tuple[float, str]] = {}
    for cell in cells:
        if (time := times.get(cell.id)) is not None:
            total, evals = time.estimate(samples, repeats)
            parts = ", ".join([f"start-up {_duration(time.startup_s)}", *(f"{name} {_duration(s)}"
                                                                          for name, s in evals.items())])
            untimed = [name for name in samples if name not in evals]
            out[cell.id] = total, (f"{parts}; median of {time.runs} earlier run{'s' if time.runs > 1 else ''}"
                                   + (f"; never timed, left out: {', '.join(untimed)}" if untimed else ""))
    if out:
        typical = statistics.median(seconds for seconds, _ in out.values())
        for cell in cells:
            out.setdefault(cell.id, (typical, "not run before: the median of the config's other cells"))
    return out


def matrix_seconds(config: MatrixConfig, cells: Sequence[Cell], seconds: dict[str, float]) -> float:
    """The matrix's wall time as the local executor runs it: one cell at a time, or with declared
    devices each cell in order as soon as its devices are free (scheduler.py's rule)."""
    count = config.devices.count if config.devices else None
    if not count:
        return sum(seconds.values())
    free, now = count, 0.0
    running: list[tuple[float, int]] = []  # (finish time, devices held)
    for cell in cells:
        need = min(cell.topology.devices, count)
        while free < need:
            now, held = heapq.heappop(running)
            free += held
        heapq.heappush(running, (now + seconds[cell.id], need))
        free -= need
    return max((finish for finish, _ in running), default=now)


def time_lines(config: MatrixConfig, name: str, cells: Sequence[Cell], times: dict[str, CellTime] | None, db: Path,
               limit: int | None) -> tuple[list[str], dict[str, str]]:
    """The wall-time section of `evalkit plan` (a header line) and each cell's line; `name` is
    the config's (its file's stem), as the history records its runs."""
    if times is None:
        return [f"# wall time: no history at {db} (every run of a config records one)"], {}
    found = cell_estimates(config, cells, times, limit)
    if not found:
        return [f"# wall time: no finished cell of config {name} in {db}"], {}
    total = matrix_seconds(config, cells, {cell_id: s for cell_id, (s, _) in found.items()})
    unit = "CPUs" if config.devices and config.devices.kind == "cpu" else "devices"
    how = f"side by side on {config.devices.count} {unit}" if config.devices else "one after another"
    held = {cell.id: devices_held(cell, None)[0] for cell in cells}
    hours = {cell_id: held[cell_id] * s / 3600 for cell_id, (s, _) in found.items()}
    head = (f"# wall time: ~{_duration(total)} for {len(cells)} cells {how}, {sum(hours.values()):.1f} GPU-hours "
            f"for the verdict (estimated from {db}: each cell's earlier runs of this config, evals scaled to this "
            "run's n and repeats; GPU-hours: the devices each cell holds x its time)")
    return [head], {cell_id: f"~{_duration(s)}, {hours[cell_id]:.2f} GPU-h on {held[cell_id]} devices ({why})"
                    for cell_id, (s, why) in found.items()}


def repeats_lines(config: MatrixConfig, cells: Sequence[Cell], times: dict[str, CellTime] | None,
                  limit: int | None, failure_rate: float, catch: float) -> list[str]:
    """The repeats section of `evalkit plan`: what the configured GSM8K repeats catch of a failure
    showing in `failure_rate` of runs, the repeats that catch it with probability `catch`, and
    their cost."""
    repeats = eval_repeats(config)
    if "gsm8k" not in repeats:
        return []
    have, need = repeats["gsm8k"], repeats_needed(failure_rate, catch)
    lines = [f"# repeats: evals.gsm8k.repeats {have} sees a failure that shows in {failure_rate:.0%} of runs with "
             f"probability {catch_probability(failure_rate, have):.0%}; {need} repeats see it with "
             f"{catch_probability(failure_rate, need):.1%} (>= {catch:.0%}; the worst run, gsm8k.flexible_worst, "
             "is what a `min` gates). They share the cell's engine: a failure that comes with an engine start "
             "needs runs of the cell (evalkit calibrate)"]
    if need <= have:
        return lines
    now = cell_estimates(config, cells, times or {}, limit)
    more = cell_estimates(config, cells, times or {}, limit, {**repeats, "gsm8k": need})
    if now and more:
        before = matrix_seconds(config, cells, {c: s for c, (s, _) in now.items()})
        after = matrix_seconds(config, cells, {c: s for c, (s, _) in more.items()})
        lines.append(f"#   cost: {need - have} more GSM8K runs per cell, the matrix ~{_duration(before)} -> "
                     f"~{_duration(after)} (from the history)")
    else:
        lines.append(f"#   cost: {need - have} more GSM8K runs per cell ({need}x GSM8K's time; no history to put "
                     "it in minutes)")
    return lines
