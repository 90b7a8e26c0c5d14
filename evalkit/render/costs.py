"""What a verdict cost, in one line under it, and each cell's GPU-hours as a column.

The figures are the cells' cost records (store/costs.py: devices held x wall time, by phase), as
the summary carries them; a summary of cells recorded before costs were shows none. One line per
verdict keeps the verdict itself uncrowded: its GPU-hours, the cells and devices, the phases that
took most of them, and the eval the cells waited on last. Texts are plain; each renderer escapes.
"""

from __future__ import annotations

from collections import Counter

from evalkit.store.costs import HOUR
from evalkit.verdict.summary import CellRow, RunSummary

SHOWN = 3
"""Phases named in the line, the largest first; the rest are summed as `rest`."""


def gpu_hours(cell: CellRow) -> str:
    """A cell's GPU-hours (`-`: no cost recorded)."""
    return "-" if cell.cost is None else f"{cell.cost.gpu_hours:.2f}"


def cost_line(summary: RunSummary) -> str | None:
    """`cost: 15.7 GPU-hours for this verdict (12 cells x 8 devices): start-up 41%, repetition 44%,
    gsm8k 12%, rest 3%; waited on repetition`; None when no cell recorded its cost."""
    costs = [cell.cost for cell in summary.cells if cell.cost is not None]
    if not costs:
        return None
    total = sum(c.device_s for c in costs)
    devices = sorted({c.devices for c in costs})
    held = f"{devices[0]} devices" if len(devices) == 1 else f"{devices[0]}-{devices[-1]} devices"
    phases: Counter[str] = Counter()
    for cost in costs:
        phases.update(cost.phases)
    ranked = [(name, seconds) for name, seconds in phases.most_common() if seconds > 0]
    shown = ranked[:SHOWN] if len(ranked) <= SHOWN + 1 else ranked[:SHOWN] + [("rest", sum(s for _, s in ranked[SHOWN:]))]
    split = ", ".join(f"{'start-up' if name == 'startup' else name} {_share(seconds, total)}" for name, seconds in shown)
    waited = Counter(c.waited_on for c in costs if c.waited_on)
    last = ""
    if waited:
        name, count = waited.most_common(1)[0]
        last = f"; waited on {name}" + ("" if count == len(costs) else f" in {count} of {len(costs)} cells")
    return (f"cost: {total / HOUR:.1f} GPU-hours for this verdict ({len(costs)} cells x {held}): "
            f"{split}{last}")


def _share(part: float, total: float) -> str:
    return f"{part / total:.0%}" if total > 0 else "-"
