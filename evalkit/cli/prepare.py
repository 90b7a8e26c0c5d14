"""`evalkit prepare`: check out and build every source tree of a matrix, starting no engine."""

from __future__ import annotations

from pathlib import Path

import click

from evalkit.cli._common import _Command, cache_dir_option, load, model_options, only_option
from evalkit.errors import EXIT_CELL_FAILED, EXIT_OK


@click.command(cls=_Command)
@model_options
@only_option
@cache_dir_option(help="Engine source worktrees (the matrix's --cache-dir).")
def prepare(model: str | None, config_path: Path | None, only: tuple[str, ...], cache_dir: Path) -> None:
    """Check out every source of the matrix and run each worktree's setup (its build) once,
    without starting any engine: build before the GPUs are free, and the matrix then reuses it.

    Exits 0 when every tree is ready, 3 when a setup failed (its log is named), 2 for a bad ref.

    \b
    Example:
      evalkit prepare --model vllm-deepseek
    """
    from evalkit.config.cells import expand, select
    from evalkit.run.build import build_trees
    from evalkit.run.progress import PlainProgress

    config, path = load(model, config_path)
    trees = build_trees(config, select(expand(config), only, config), cache_dir, PlainProgress())
    click.echo(f"# {path}: {len(trees)} source trees")
    for tree in trees:
        source = tree.source
        state = tree.error or (f"setup {tree.setup['status']} (log {tree.setup['log']})" if tree.setup
                               else "no setup")
        click.echo(f"{source.sha[:12]} {source.repo}@{source.ref} [{', '.join(tree.cells)}]: {state}")
        click.echo(f"  worktree: {source.worktree}")
    raise SystemExit(EXIT_CELL_FAILED if any(tree.error for tree in trees) else EXIT_OK)
