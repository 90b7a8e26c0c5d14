"""What evalkit knows about a box's GPUs, the same for every vendor's tool.

`Snapshot` is one reading (per device used memory and utilisation, the compute processes and what
they hold); `Inventory` the provenance of a run (model, UUIDs, driver, CUDA/ROCm). The vendor
modules (nvidia.py, amd.py) fill them from their tools' output; everything above reads only these.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import Any, Protocol

TOOL_TIMEOUT_S = 10.0
"""A vendor tool that does not answer in this time is treated as absent (a wedged driver must not hang a run)."""


@dataclass(frozen=True)
class DeviceState:
    """One device at one moment."""

    index: int
    uuid: str
    used_mib: float
    total_mib: float | None = None
    util_pct: float | None = None


@dataclass(frozen=True)
class DeviceProcess:
    """A process holding memory on a device (what a timeout names)."""

    pid: int
    name: str
    device: int
    used_mib: float | None

    def text(self) -> str:
        mem = "?" if self.used_mib is None else f"{self.used_mib:.0f} MiB"
        return f"pid {self.pid} {self.name} ({mem} on GPU {self.device})"


@dataclass(frozen=True)
class Snapshot:
    devices: list[DeviceState]
    processes: list[DeviceProcess]

    def of(self, indices: list[int] | None) -> list[DeviceState]:
        """The devices among `indices` (None: all)."""
        return [d for d in self.devices if indices is None or d.index in indices]

    def held(self, indices: list[int] | None) -> list[DeviceProcess]:
        return [p for p in self.processes if indices is None or p.device in indices]


@dataclass(frozen=True)
class Inventory:
    """A run's GPU provenance, stored in run.json as `gpus`."""

    vendor: str
    driver: str | None
    runtime: str
    """`CUDA` or `ROCm`."""
    runtime_version: str | None
    devices: list[dict[str, Any]] = field(default_factory=list)
    """`{index, uuid, name, total_mib}` per device."""

    def dump(self) -> dict[str, Any]:
        return {"vendor": self.vendor, "driver": self.driver, "runtime": self.runtime,
                "runtime_version": self.runtime_version, "count": len(self.devices), "devices": self.devices}


class Backend(Protocol):
    """One vendor's way to read its GPUs."""

    name: str

    def snapshot(self) -> Snapshot: ...

    def inventory(self) -> Inventory: ...


class ToolFailed(Exception):
    """A vendor tool did not answer or answered what cannot be read."""


def run_tool(argv: list[str]) -> str:
    """A vendor tool's stdout; `ToolFailed` when it fails, times out or cannot start."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                             check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise ToolFailed(f"{argv[0]}: {e}") from e
    if out.returncode != 0:
        raise ToolFailed(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()[:200]}")
    return out.stdout


def number(text: str) -> float | None:
    """A numeric field of a tool's output; None for `[N/A]`, `N/A`, `[Not Supported]`."""
    try:
        return float(text.strip())
    except ValueError:
        return None
