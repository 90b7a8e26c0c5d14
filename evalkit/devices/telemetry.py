"""Per device peak used memory and mean utilisation while a cell's engine runs.

A daemon thread reads the vendor tool every `INTERVAL_S` (2 Hz: each reading is a subprocess,
and the engine must not feel it); `summary()` is what cell.json stores as `gpu.telemetry`.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from evalkit.devices.model import Backend
from evalkit.devices.probe import snapshot

INTERVAL_S = 0.5


class Sampler:
    """`with Sampler(backend, [0, 1]) as s: ...` then `s.summary()`."""

    def __init__(self, backend: Backend, indices: list[int] | None, interval_s: float = INTERVAL_S) -> None:
        self.backend, self.indices, self.interval_s = backend, indices, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-telemetry", daemon=True)
        self._peak: dict[int, float] = {}
        self._util: dict[int, list[float]] = {}
        self._uuid: dict[int, str] = {}
        self.samples = 0

    def __enter__(self) -> Sampler:  # noqa: PYI034 - not meant to be subclassed
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                return

    def sample(self) -> None:
        snap = snapshot(self.backend)
        if snap is None:
            return
        self.samples += 1
        for d in snap.of(self.indices):
            self._uuid[d.index] = d.uuid
            self._peak[d.index] = max(self._peak.get(d.index, 0.0), d.used_mib)
            if d.util_pct is not None:
                self._util.setdefault(d.index, []).append(d.util_pct)

    def summary(self) -> dict[str, Any]:
        devices = [{"index": i, "uuid": self._uuid[i], "peak_used_mib": round(self._peak[i]),
                    "mean_util_pct": round(sum(u) / len(u), 1) if (u := self._util.get(i)) else None}
                   for i in sorted(self._peak)]
        return {"interval_s": self.interval_s, "samples": self.samples, "devices": devices}
