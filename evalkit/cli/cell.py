"""`evalkit cell`: one cell of an existing run (what each Slurm job runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from evalkit.cli._common import _Command, cache_dir_option, results_dir_option
from evalkit.errors import EXIT_CELL_FAILED, EXIT_INTERRUPTED, EXIT_OK


@click.command(cls=_Command)
@click.option("--run", "run_ref", required=True, help="The run the cell belongs to: a run id, its folder, or `latest` "
              "(its run.json must exist).")
@click.option("--cell", "cell_id", required=True, help="The cell id.")
@results_dir_option
@cache_dir_option()
def cell(run_ref: str, cell_id: str, results_dir: Path, cache_dir: Path) -> None:
    """Run one cell of an existing run and write its cell.json (what each Slurm job runs).

    \b
    Examples:
      evalkit cell --run 20261203-120000-demo --cell dp8-piecewise-fixoff
      evalkit cell --run latest --cell dp8-piecewise-fixoff
    """
    from evalkit.api.matrix import run_one_cell
    from evalkit.errors import Interrupted
    from evalkit.run.progress import PlainProgress
    from evalkit.store import resolve_run

    run_path = resolve_run(results_dir, run_ref)  # a missing run is one line, exit 2 (not a traceback)
    try:
        record = run_one_cell(run_path.parent, run_path.name, cell_id, cache_dir, PlainProgress())
    except Interrupted:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_OK if record["status"] == "ok" else EXIT_CELL_FAILED)
