"""Which cell runs when, on which devices.

A box declares its devices (`devices: {count: 8}`); each cell needs `settings.devices` or
tensor_parallel x data_parallel of them. Cells start in plan order as soon as enough devices
are free and fewer than `max_parallel` cells run, each on a disjoint set. Without declared
devices cells run one at a time, which is always safe.

Some launches also hold something of the host that no flag gives each its own (a fixed port, a
fixed cache folder: engine/isolation.py `shared_resources`); a cell holding one never starts while
another cell holds it, so such cells run one after the other.

Waiting is done in short slices so the main thread stays responsive to Ctrl-C.
"""

from __future__ import annotations

import threading

from evalkit.config import EngineSettings
from evalkit.errors import ConfigError

WAIT_SLICE_S = 0.2


def device_need(settings: EngineSettings) -> int:
    """Devices a cell occupies: explicit, else tensor x data parallel (1 x 1 by default)."""
    if settings.devices is not None:
        return settings.devices
    return (settings.tensor_parallel or 1) * (settings.data_parallel or 1)


class DevicePool:
    """Hands out disjoint device sets and parallel slots; thread-safe."""

    def __init__(self, count: int | None, max_parallel: int) -> None:
        self.count = count
        self.max_parallel = max_parallel if count else 1
        self._free = set(range(count)) if count else set()
        self._running = 0
        self._held: set[str] = set()
        self._cond = threading.Condition()

    def check(self, cell_id: str, need: int) -> None:
        if self.count is not None and need > self.count:
            raise ConfigError(f"cell {cell_id}: needs {need} devices, devices.count is {self.count}")

    def try_acquire(self, need: int, holds: frozenset[str] = frozenset()) -> tuple[int, ...] | None:
        """A device set (empty when devices are not declared), or None if the cell must wait
        (for devices, a parallel slot, or one of the shared resources it `holds`)."""
        with self._cond:
            if self._running >= self.max_parallel or holds & self._held:
                self._cond.wait(WAIT_SLICE_S)
                return None
            if self.count is None:
                chosen: tuple[int, ...] = ()
            elif len(self._free) < need:
                self._cond.wait(WAIT_SLICE_S)
                return None
            else:
                chosen = tuple(sorted(self._free)[:need])
            self._free -= set(chosen)
            self._held |= holds
            self._running += 1
            return chosen

    def busy(self, holds: frozenset[str]) -> frozenset[str]:
        """Which of `holds` a running cell holds now."""
        with self._cond:
            return holds & self._held

    def release(self, devices: tuple[int, ...], holds: frozenset[str] = frozenset()) -> None:
        with self._cond:
            self._free |= set(devices)
            self._held -= holds
            self._running -= 1
            self._cond.notify_all()
