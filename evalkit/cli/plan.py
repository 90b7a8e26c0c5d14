"""`evalkit plan`: every cell's exact argv, env and source, nothing started."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from evalkit.cli._common import _Command, cache_dir_option, load, model_options, only_option, results_dir_option


@click.command(cls=_Command)
@model_options
@only_option
@click.option("--limit", type=click.IntRange(min=1), help="Cap questions per eval, as `matrix --limit` would: the MDEs follow.")
@click.option("--calibration", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="A calibrate.json: its measured flips and event rates replace the assumed ones.")
@results_dir_option
@cache_dir_option(help="Engine source worktrees.")
def plan(model: str | None, config_path: Path | None, only: tuple[str, ...], results_dir: Path, cache_dir: Path,
         limit: int | None = None, calibration: Path | None = None) -> None:
    """Print every cell's exact argv, env and source, and each threshold's power, without starting anything.

    Per threshold: the n it is checked on, the smallest change it detects (MDE) at its alpha and
    power, and the n its margin needs.

    \b
    Example:
      evalkit plan --model deepseek-v4 --only parallel=dp8
      evalkit plan --model demo --limit 50
    """
    from evalkit.engine.launch import PORT_PLACEHOLDER, build_launch, describe_source
    from evalkit.matrix import expand, select
    from evalkit.power_plan import noise_from, plan_lines

    config, path = load(model, config_path)
    cells = select(expand(config), only, config)
    click.echo(f"# {path}: {len(cells)} cells, engine profile {config.engine.profile}")
    for line in plan_lines(config, limit, noise_from(calibration)):
        click.echo(line)
    for cell in cells:
        shown = build_launch(config, cell, config.engine.port or PORT_PLACEHOLDER).display(config.secret_env)
        click.echo(f"\n[{cell.id}] " + " ".join(f"{k}={v}" for k, v in cell.axes.items()))
        env = shown["env"]
        if env:
            click.echo("  env:    " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()))  # type: ignore[union-attr]
        click.echo("  argv:   " + shlex.join(shown["argv"]))  # type: ignore[arg-type]
        source = describe_source(cell.source, cache_dir)
        if source:
            sha = source["sha"] or f"? ({source['note']})"
            click.echo(f"  source: {source['repo']} @ {source['ref']} -> {sha}")
