"""The GPU side of a run (issue 31): busy devices before the first cell, provenance in run.json,
and around each cell's engine its devices' UUIDs, telemetry while it serves and the wait for its
memory after it stops (evalkit/devices/), returned as the cell's `Gpus` piece (run/parts.py).

All of it only when the run's engines occupy devices here (the config declares devices or the
engine's profile uses them; not the simulator, not an external server) and a vendor tool is on
PATH: the demo and CI see none of it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from evalkit.config import MatrixConfig
from evalkit.devices.busy import require_free
from evalkit.devices.model import Backend
from evalkit.devices.probe import find_backend, inventory, snapshot
from evalkit.devices.release import Release, used_levels, wait_released
from evalkit.devices.telemetry import Sampler
from evalkit.errors import GpuMemoryHeld
from evalkit.profiles import get_profile
from evalkit.run.options import Progress
from evalkit.run.parts import Gpus

GPUS_ROW = "gpus"
"""The progress row of the wait for busy GPUs before the first cell."""


def _declared_gpus(config: MatrixConfig) -> int | None:
    """The GPUs the config declares; declared CPUs (`devices.kind: cpu`) are not GPUs."""
    return config.devices.count if config.devices is not None and config.devices.kind == "gpu" else None


def run_backend(config: MatrixConfig, base_url: str | None) -> Backend | None:
    """The vendor backend, when this run's engines occupy this box's GPUs."""
    if base_url or not (_declared_gpus(config) or get_profile(config.engine.profile).uses_devices):
        return None
    return find_backend()


def run_indices(config: MatrixConfig) -> list[int] | None:
    """The devices the run may use: the declared ones, else all."""
    count = _declared_gpus(config)
    return list(range(count)) if count else None


def preflight(config: MatrixConfig, base_url: str | None, wait_s: float | None,
              progress: Progress | None = None) -> None:
    """Refuse (or wait up to `wait_s`, default `timeouts.gpus_busy`) while other processes use the
    run's GPUs; a wait shows in `progress` as the row `gpus` (which devices, then how long)."""
    backend = run_backend(config, base_url)
    report = None if progress is None else (lambda state, detail: progress.update(GPUS_ROW, state, detail))
    require_free(backend, run_indices(config), config.timeouts.gpus_busy if wait_s is None else wait_s,
                 report=report)


def provenance(config: MatrixConfig, base_url: str | None) -> dict[str, Any] | None:
    """run.json's `gpus`: vendor, driver, CUDA/ROCm version, model and UUID per device."""
    found = inventory(run_backend(config, base_url))
    return None if found is None else found.dump()


class CellGpus:
    """One cell's devices: watched around each of its engine launches (`watch`)."""

    def __init__(self, config: MatrixConfig, devices: tuple[int, ...] | None, base_url: str | None = None) -> None:
        self.backend = run_backend(config, base_url)
        self.indices = list(devices) if devices and _declared_gpus(config) else run_indices(config)
        self.timeout_s = config.timeouts.gpu_release

    def watch(self, stop: threading.Event) -> EngineGpus:
        """The watch of one engine launch's devices (a context manager around the engine's life)."""
        return EngineGpus(self, stop)


class EngineGpus:
    """Around an engine's life: its devices' UUIDs and used memory before; while the evals run, a
    telemetry sampler (`sampling`); after it stopped, the wait until that memory is back
    (`GpuMemoryHeld` on timeout, unless the engine's life already failed: that failure is the
    cell's error, the wait is still recorded). `part()` is what was seen, at any moment: the
    lifecycle asks once the launch ended, however it ended."""

    def __init__(self, gpus: CellGpus, stop: threading.Event) -> None:
        self.gpus, self.stop = gpus, stop
        self._before: dict[int, float] | None = None
        self._uuids: list[str] = []
        self._telemetry: dict[str, Any] | None = None
        self._release: Release | None = None

    def __enter__(self) -> EngineGpus:
        backend = self.gpus.backend
        self._before = used_levels(backend, self.gpus.indices)
        if backend is not None and self._before is not None:
            snap = snapshot(backend)
            self._uuids = [d.uuid for d in snap.of(self.gpus.indices)] if snap else []
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self.gpus.backend is None or self._before is None:
            return
        self._release = wait_released(self.gpus.backend, self._before, self.gpus.timeout_s, self.stop)
        if not self._release.released and exc_type is None:
            raise GpuMemoryHeld(self._release.message(self.gpus.timeout_s))

    @contextmanager
    def sampling(self) -> Iterator[None]:
        """While the evals run: a telemetry sampler whose summary is the part's `telemetry`
        (also when an eval fails: what was sampled until then)."""
        if self.gpus.backend is None or self._before is None:
            yield
            return
        sampler = Sampler(self.gpus.backend, self.gpus.indices)
        try:
            with sampler:
                yield
        finally:
            self._telemetry = sampler.summary()

    def part(self) -> Gpus | None:
        """What was seen of the devices; None when they cannot be read (no GPU tool)."""
        if self.gpus.backend is None or self._before is None:
            return None
        release = self._release
        return Gpus(uuids=self._uuids, before_mib={str(i): round(m) for i, m in self._before.items()},
                    telemetry=self._telemetry, release=release.dump() if release else None,
                    release_wait_s=release.wait_s if release else None)
