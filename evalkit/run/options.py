"""What a run is asked to do (`RunOptions`) and where it reports what each cell is doing (`Progress`).

Both are plain data shared by every part of `evalkit.run`; this module imports nothing of it, so
the cell lifecycle, the executors and the public API can all depend on it without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class Progress(Protocol):
    """Where a run reports what each cell is doing: plain lines, a live table (run/progress.py),
    or nothing. Called from the cell worker threads."""

    def update(self, cell_id: str, state: str, detail: str = "") -> None: ...


class Silent:
    """The progress of a caller that wants none."""

    def update(self, cell_id: str, state: str, detail: str = "") -> None:
        """Says nothing."""


@dataclass
class RunOptions:
    """A run's settings once the request is resolved (resume, defaults): stored in run.json."""

    results_dir: Path
    cache_dir: Path
    """Engine source worktrees."""
    run_id: str
    limit: int | None = None
    """At most this many questions or prompts per eval."""
    base_url: str | None = None
    """Evaluate a server that is already running (one cell, no engine started)."""
    command_line: list[str] = field(default_factory=list)
    """evalkit's own command line, for run.json and the report."""
    max_parallel: int = 1
    """Cells side by side, when the config declares devices."""
    resume: bool = False
    """Continue the run `run_id`: cells already finished are kept, the others run."""
    only: list[str] = field(default_factory=list)
    """The `--only` selections, stored so `--resume` runs the same subset."""
    executor: str = "local"
    """`local` (this machine) or `slurm` (one job per cell)."""
