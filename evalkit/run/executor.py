"""Where a run's cells run: the `Executor` protocol that this machine and Slurm implement.

    LocalExecutor   (run/local.py)  worker threads here, serial or side by side on the device pool
    SlurmExecutor   (run/slurm.py)  one `evalkit cell` batch job per cell, watched from the login node

A run asks its executor twice: `preflight` before the run folder exists, where anything the
executor would refuse (no sbatch, a partition Slurm rejects) is bad input that leaves nothing
behind; then `run`, once the folder and run.json exist. Both executors end every cell through the
same lifecycle (run/cell.py: `evalkit cell` runs it inside each Slurm job).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from evalkit.config.cells import Cell

OnCellDone = Callable[[dict[str, Any]], None]
"""Called with each finished cell's record (ok or error) as it finishes; e.g. the history's recorder."""


class Executor(Protocol):
    """Runs a run's cells; built for one run (config, store, options, progress)."""

    def preflight(self, todo: list[Cell]) -> None:
        """Raise ConfigError for what this executor cannot run, before the run folder is created."""

    def run(self, todo: list[Cell], on_cell_done: OnCellDone | None = None) -> None:
        """Run every cell of `todo` (after `preflight`), writing each cell.json, and return when
        all have ended. Raises Interrupted (or KeyboardInterrupt) after stopping every engine or
        cancelling every job; the cells finished by then are kept."""
