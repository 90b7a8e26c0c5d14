"""Transitional: the names `evalkit.cli` imported from the old runner, until it calls `evalkit.run_matrix`.

Delete this module when nothing imports it (issue #15): the run now lives in run/matrix.py
(prepare, execute), run/cell.py (one cell), run/local.py and run/slurm.py (executors), run/api.py
(the public functions).
"""

from __future__ import annotations

from pathlib import Path

from evalkit.config import MatrixConfig
from evalkit.matrix import Cell
from evalkit.run.api import run_one_cell
from evalkit.run.executor import OnCellDone
from evalkit.run.matrix import execute, prepare, redacted_snapshot
from evalkit.run.options import Progress, RunOptions
from evalkit.store import RunStore

__all__ = ["RunOptions", "redacted_snapshot", "run_matrix", "run_one_cell"]


def run_matrix(config: MatrixConfig, config_path: Path, cells: list[Cell], options: RunOptions, progress: Progress,
               on_cell_done: OnCellDone | None = None) -> RunStore:
    """The old runner's entry: check and run `cells` (no lock, no summary; run/api.py does those)."""
    return execute(prepare(config, config_path, cells, options, progress), on_cell_done)
