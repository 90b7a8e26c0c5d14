"""Before the first cell: are the run's GPUs free of other processes?

A matrix must never start an engine that shares a GPU by accident: the cell would measure
someone else's load, or fail with out-of-memory. A device counts as busy when a compute process
is listed on it or its used memory is above `release.SLACK_MIB` (the driver's own idle use).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from evalkit.devices.model import Backend, Snapshot
from evalkit.devices.probe import snapshot
from evalkit.devices.release import POLL_S, SLACK_MIB
from evalkit.errors import GpusBusy


def busy_lines(snap: Snapshot, indices: list[int] | None) -> list[str]:
    """One phrase per busy device: `GPU 0 (70000 MiB used; pid 4242 python3 (70000 MiB on GPU 0))`."""
    out = []
    for d in snap.of(indices):
        procs = [p for p in snap.processes if p.device == d.index]
        if procs or d.used_mib > SLACK_MIB:
            who = "; ".join(p.text() for p in procs) or "no process listed"
            out.append(f"GPU {d.index} ({d.used_mib:.0f} MiB used; {who})")
    return out


def require_free(backend: Backend | None, indices: list[int] | None, wait_s: float,
                 stop: threading.Event | None = None, report: Callable[[str, str], None] | None = None) -> None:
    """Return when the devices are free; wait up to `wait_s` for them, then raise `GpusBusy`
    with one line listing them. No backend, or a tool that does not answer: nothing to check.
    `report(state, detail)` hears a wait, which is otherwise silent: `waiting` once with the busy
    devices, then `ok` with the seconds waited, or `error`."""
    t0 = time.monotonic()
    deadline = t0 + wait_s
    waiting = False
    while True:
        snap = snapshot(backend)
        lines = busy_lines(snap, indices) if snap is not None else []
        if not lines:
            if waiting and report is not None:
                report("ok", f"GPUs free after {time.monotonic() - t0:.0f} s")
            return
        if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
            if waiting and report is not None:
                report("error", f"GPUs still in use after {wait_s:g} s")
            waited = f" after waiting {wait_s:g} s" if wait_s else ""
            raise GpusBusy(f"GPUs in use by other processes{waited}: {', '.join(lines)}; "
                           "free them or pass --wait-for-gpus SECONDS")
        if not waiting and report is not None:
            report("waiting", f"up to {wait_s:g} s for GPUs in use: {', '.join(lines)}")
        waiting = True
        time.sleep(POLL_S)
