"""Which cell runs when, on which devices.

A box declares its devices (`devices: {count: 8}`); each cell needs `settings.devices` or
tensor_parallel x data_parallel of them. Cells start in plan order as soon as enough devices
are free and fewer than `max_parallel` cells run, each on a disjoint set. Without declared
devices cells run one at a time, which is always safe.

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
        self._cond = threading.Condition()

    def check(self, cell_id: str, need: int) -> None:
        if self.count is not None and need > self.count:
            raise ConfigError(f"cell {cell_id}: needs {need} devices, devices.count is {self.count}")

    def try_acquire(self, need: int) -> tuple[int, ...] | None:
        """A device set (empty when devices are not declared), or None if the cell must wait."""
        with self._cond:
            if self._running >= self.max_parallel:
                self._cond.wait(WAIT_SLICE_S)
                return None
            if self.count is None:
                self._running += 1
                return ()
            if len(self._free) < need:
                self._cond.wait(WAIT_SLICE_S)
                return None
            chosen = tuple(sorted(self._free)[:need])
            self._free -= set(chosen)
            self._running += 1
            return chosen

    def release(self, devices: tuple[int, ...]) -> None:
        with self._cond:
            self._free |= set(devices)
            self._running -= 1
            self._cond.notify_all()
