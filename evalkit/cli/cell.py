"""`evalkit cell`: one cell of an existing run (what each Slurm job runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalkit.cli._common import _Command, cache_dir_option, results_dir_option
from evalkit.errors import EXIT_CELL_FAILED, EXIT_INTERRUPTED, EXIT_OK


@click.command(cls=_Command)
@click.option("--run", "run_id", required=True, help="The run the cell belongs to (its run.json must exist).")
@click.option("--cell", "cell_id", required=True, help="The cell id.")
@results_dir_option
@cache_dir_option()
def cell(run_id: str, cell_id: str, results_dir: Path, cache_dir: Path) -> None:
    """Run one cell of an existing run and write its cell.json (what each Slurm job runs).

    \b
    Example:
      evalkit cell --run 20261203-120000-demo --cell dp8-piecewise-fixoff
    """
    from evalkit.api.matrix import run_one_cell
    from evalkit.errors import Interrupted
    from evalkit.run.progress import PlainProgress

    try:
        record = run_one_cell(results_dir, run_id, cell_id, cache_dir, PlainProgress())
    except Interrupted:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_OK if record["status"] == "ok" else EXIT_CELL_FAILED)
