"""Check out and build every source tree of a matrix, starting no engine (`evalkit prepare`).

A build (vLLM's compiled extensions, an hour for a full one) need not wait for the GPUs: run
this first and the matrix finds each worktree built (its setup marker, engine/setup.py) and goes
straight to its engines. The same checkout and the same setup step as a cell's own, so what is
prepared is exactly what the matrix would have built.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.engine.setup import ensure_built, setup_plan
from evalkit.engine.sources import ResolvedSource
from evalkit.errors import SetupFailed
from evalkit.run.options import Progress, Silent
from evalkit.run.stages import prepare_sources


@dataclass
class TreeBuild:
    """One source tree of the matrix: which cells run it, and how its setup went."""

    source: ResolvedSource
    cells: list[str] = field(default_factory=list)
    setup: dict[str, object] | None = None
    """What a cell records under `setup` (status built / reused / failed, log); None: no setup."""
    error: str | None = None
    """The setup's failure in one line (source, ref, log)."""


def build_trees(config: MatrixConfig, cells: list[Cell], cache_dir: Path,
                progress: Progress | None = None) -> list[TreeBuild]:
    """Check out each cell's source (a bad ref raises SourceError before anything is built) and
    run each worktree's setup once; a failed setup is that tree's error, the others still build."""
    progress = progress or Silent()
    resolved = prepare_sources(cells, cache_dir)
    trees: dict[tuple[Path, tuple[str, ...]], TreeBuild] = {}
    for cell in cells:
        if cell.id in resolved and cell.source is not None:
            key = (resolved[cell.id].worktree, tuple(cell.source.setup or ()))
            trees.setdefault(key, TreeBuild(resolved[cell.id])).cells.append(cell.id)
    python = config.engine.python or sys.executable
    for (worktree, setup), tree in trees.items():
        if not setup:
            continue
        plan = setup_plan(setup, worktree, python)
        progress.update(tree.source.sha[:12], "building", "" if plan.built else f"log {plan.log}")
        try:
            tree.setup = ensure_built(plan, tree.source)
        except SetupFailed as e:
            tree.setup, tree.error = e.info, str(e)
        progress.update(tree.source.sha[:12], "failed" if tree.error else str(tree.setup["status"]))
    return list(trees.values())
