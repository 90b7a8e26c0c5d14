"""What a cell's lifecycle measures for its cost: the devices it holds and each phase's span.

The record itself (cell.json `cost`: device-seconds split by phase, the eval waited on last) is
store/costs.py's, built by run/parts.py `assemble` from the `Phase` pieces kept here. A step that
runs evals some other way (all at once in one wave, or stopping early) times each eval with
`timed(keep, name)`, and the record stays right: evals that overlap share each moment's devices.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence

from evalkit.config.cells import Cell
from evalkit.run.parts import Keep, Phase
from evalkit.store.costs import PhaseKind


def devices_held(cell: Cell, devices: Sequence[int] | None) -> tuple[int, str]:
    """The devices a cell holds while it runs, and where the count comes from: those the executor
    gave it (a config that declares the box's devices), else what its topology's parts declare
    (`cell.topology.devices`, the scheduler's and plan's count), which is what the engine occupies
    on a real box (TP8: 8; a PD pair: both workers') and what the simulator stands for."""
    if devices:
        return len(devices), "the devices the executor gave it"
    parts = cell.topology.parts
    if len(parts) > 1:
        return cell.topology.devices, f"its {len(parts)} parts' devices"
    if cell.settings.devices is not None:
        return cell.settings.devices, "its settings' devices"
    tp, dp = cell.settings.tensor_parallel or 1, cell.settings.data_parallel or 1
    return cell.topology.devices, f"tensor_parallel {tp} x data_parallel {dp}"


@contextlib.contextmanager
def timed(keep: Keep, name: str, kind: PhaseKind = "eval") -> Iterator[None]:
    """Keep the span of the block as a `Phase`, however the block ends (an eval that raises still
    held the devices)."""
    start = time.monotonic()
    try:
        yield
    finally:
        keep(Phase(name, kind, start, time.monotonic()))


class LaunchClock:
    """One engine launch's start-up and teardown: from the launch until it served (or failed),
    and from the moment the evals ended (or the failure) until the engine is stopped, its GPUs
    given back and its log scrubbed. Entered last around the live engine, so it exits first,
    before the engine's own stop."""

    def __init__(self, launched: float) -> None:
        self.launched = launched
        self.served: float | None = None
        self.torn: float | None = None

    def ready(self) -> None:
        """The engine serves: start-up ends here."""
        self.served = time.monotonic()

    def __enter__(self) -> LaunchClock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.torn = time.monotonic()

    def phases(self) -> list[Phase]:
        """The launch's start-up and teardown, ending now."""
        end = time.monotonic()
        torn = self.torn or end
        return [Phase("startup", "startup", self.launched, self.served or torn), Phase("teardown", "teardown", torn, end)]
