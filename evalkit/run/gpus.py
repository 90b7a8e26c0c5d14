"""The GPU side of a run (issue 31): busy devices before the first cell, provenance in run.json,
and around each cell's engine its devices' UUIDs, telemetry while it serves and the wait for its
memory after it stops (evalkit/devices/).

All of it only when the run's engines occupy devices here (the config declares devices or the
engine's profile uses them; not the simulator, not an external server) and a vendor tool is on
PATH: the demo and CI see none of it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from evalkit.config import MatrixConfig
from evalkit.devices.busy import require_free
from evalkit.devices.model import Backend
from evalkit.devices.probe import find_backend, inventory, snapshot
from evalkit.devices.release import used_levels, wait_released
from evalkit.devices.telemetry import Sampler
from evalkit.errors import GpuMemoryHeld
from evalkit.profiles import get_profile
from evalkit.run.options import Progress
from evalkit.store.records import CellRecord, GpuRecord

GPUS_ROW = "gpus"
"""The progress row of the wait for busy GPUs before the first cell."""


def run_backend(config: MatrixConfig, base_url: str | None) -> Backend | None:
    """The vendor backend, when this run's engines occupy this box's GPUs."""
    if base_url or not (config.devices is not None or get_profile(config.engine.profile).uses_devices):
        return None
    return find_backend()


def run_indices(config: MatrixConfig) -> list[int] | None:
    """The devices the run may use: the declared ones, else all."""
    return list(range(config.devices.count)) if config.devices else None


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
    """One cell's devices: recorded in `record.gpu`, watched around its engine."""

    def __init__(self, config: MatrixConfig, devices: tuple[int, ...] | None, record: CellRecord,
                 base_url: str | None = None) -> None:
        self.backend = run_backend(config, base_url)
        self.indices = list(devices) if devices else run_indices(config)
        self.timeout_s = config.timeouts.gpu_release
        self.record = record

    @contextmanager
    def engine(self, stop: threading.Event) -> Iterator[None]:
        """Around an engine's life: its devices' UUIDs and used memory before; after it stopped,
        the wait until that memory is back (`GpuMemoryHeld` on timeout, unless the cell already
        failed: that failure is the cell's error, the wait is still recorded)."""
        before = used_levels(self.backend, self.indices)
        if self.backend is None or before is None:
            yield
            return
        snap = snapshot(self.backend)
        self.record.gpu = GpuRecord(uuids=[d.uuid for d in snap.of(self.indices)] if snap else [],
                                    before_mib={str(i): round(m) for i, m in before.items()})
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            release = wait_released(self.backend, before, self.timeout_s, stop)
            self.record.gpu.release = release.dump()
            self.record.timings["gpu_release_s"] = release.wait_s
            if not release.released and not failed:
                raise GpuMemoryHeld(release.message(self.timeout_s))

    def sampling(self) -> Any:
        """While the evals run: a telemetry sampler whose summary lands in `record.gpu.telemetry`."""
        if self.backend is None or self.record.gpu is None:
            return nullcontext()
        return _Sampled(Sampler(self.backend, self.indices), self.record.gpu)


class _Sampled:
    def __init__(self, sampler: Sampler, gpu: GpuRecord) -> None:
        self.sampler, self.gpu = sampler, gpu

    def __enter__(self) -> None:
        self.sampler.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.sampler.__exit__(None, None, None)
        self.gpu.telemetry = self.sampler.summary()
