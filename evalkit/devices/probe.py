"""Which vendor tool reads this box's GPUs, if any: none on a laptop or CI, so nothing changes there.

The tool found first on PATH, in PATH's order (NVIDIA's `nvidia-smi` before AMD's `amd-smi` in one
folder), so tests put small fakes first on PATH that print the real formats: a fake `amd-smi` is
read on a box whose real `nvidia-smi` sits in /usr/bin. A tool that fails is reported once as absent: GPU
checks are evalkit's care for the matrix, never a reason for a run without them to fail.
"""

from __future__ import annotations

import os
import shutil

from evalkit.devices.amd import AmdSmi
from evalkit.devices.model import Backend, Inventory, Snapshot, ToolFailed
from evalkit.devices.nvidia import NvidiaSmi


def find_backend() -> Backend | None:
    """The backend of the first vendor tool on PATH; None on a box without one."""
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if shutil.which("nvidia-smi", path=folder or os.curdir):
            return NvidiaSmi()
        if shutil.which("amd-smi", path=folder or os.curdir):
            return AmdSmi()
    return None


def snapshot(backend: Backend | None) -> Snapshot | None:
    """A reading, or None without a backend or when its tool fails."""
    if backend is None:
        return None
    try:
        return backend.snapshot()
    except (ToolFailed, ValueError, KeyError):
        return None


def inventory(backend: Backend | None) -> Inventory | None:
    if backend is None:
        return None
    try:
        return backend.inventory()
    except (ToolFailed, ValueError, KeyError):
        return None
