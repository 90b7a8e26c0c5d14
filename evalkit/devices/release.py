"""Wait, after a cell's engine stopped, until its GPUs' memory is given back.

A stopped engine's workers can hold device memory for seconds after the leader exits (teardown,
processes stuck in the driver); the next cell would then fail at start-up with out-of-memory, an
engine error that is really evalkit's. vLLM's own tests wait the same way between servers
(`wait_for_gpu_memory_to_clear`, issue 31). Used memory counts as given back when every device is
within `SLACK_MIB` of what it held before the cell.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from evalkit.devices.model import Backend, DeviceProcess
from evalkit.devices.probe import snapshot

SLACK_MIB = 512.0
"""Used memory above the level before the cell that still counts as given back (allocator and
context noise of the driver, not an engine's weights or KV cache)."""
POLL_S = 0.5


@dataclass
class Release:
    """The wait's outcome, recorded in cell.json as `gpu.release`."""

    wait_s: float
    released: bool
    over_mib: dict[int, float] = field(default_factory=dict)
    """Device index -> MiB still above its level before the cell (only those over the slack)."""
    held: list[DeviceProcess] = field(default_factory=list)
    """Processes on those devices at the last reading."""

    def message(self, timeout_s: float) -> str:
        over = ", ".join(f"GPU {i} +{mib:.0f} MiB" for i, mib in sorted(self.over_mib.items()))
        holders = "; ".join(p.text() for p in self.held) or "no process listed (held in the driver)"
        return (f"GPU memory not given back {timeout_s:g} s after the engine stopped ({over}): "
                f"held by {holders}")

    def dump(self) -> dict[str, Any]:
        return {"wait_s": self.wait_s, "released": self.released,
                "over_mib": {str(i): round(m) for i, m in self.over_mib.items()},
                "held": [{"pid": p.pid, "name": p.name, "device": p.device, "used_mib": p.used_mib}
                         for p in self.held]}


def used_levels(backend: Backend | None, indices: list[int] | None) -> dict[int, float] | None:
    """Used MiB per device (None when unreadable): the level to come back to."""
    snap = snapshot(backend)
    return None if snap is None else {d.index: d.used_mib for d in snap.of(indices)}


def wait_released(backend: Backend, before: dict[int, float], timeout_s: float,
                  stop: threading.Event | None = None) -> Release:
    """Poll until every device in `before` is back within the slack, or `timeout_s` passed (or
    `stop` is set: an interrupted run does not wait)."""
    t0 = time.monotonic()
    indices = sorted(before)
    while True:
        snap = snapshot(backend)
        if snap is None:  # the tool stopped answering: nothing to wait on
            return Release(round(time.monotonic() - t0, 3), True)
        over = {d.index: d.used_mib - before[d.index] for d in snap.of(indices)
                if d.used_mib - before[d.index] > SLACK_MIB}
        waited = time.monotonic() - t0
        if not over:
            return Release(round(waited, 3), True)
        if waited >= timeout_s or (stop is not None and stop.is_set()):
            return Release(round(waited, 3), False, over, snap.held(sorted(over)))
        time.sleep(POLL_S)
