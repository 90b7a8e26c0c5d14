"""`evalkit plan`: every cell's exact argv, env, source, fresh caches, and how each source tree is
built; nothing started, nothing built."""

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
    import sys

    from evalkit.cells import expand, select
    from evalkit.engine.isolation import describe_isolation, isolate, shared_resources
    from evalkit.engine.launch import PORT_PLACEHOLDER, build_launch, describe_source
    from evalkit.engine.setup import describe_setup
    from evalkit.power_plan import noise_from, plan_lines

    config, path = load(model, config_path)
    cells = select(expand(config), only, config)
    click.echo(f"# {path}: {len(cells)} cells, engine profile {config.engine.profile}")
    for line in plan_lines(config, limit, noise_from(calibration)):
        click.echo(line)
    builds: dict[tuple[str, str], str] = {}
    for cell in cells:
        checkout = Path("<checkout>") if cell.source else None  # the worktree's path is known once checked out
        isolated = isolate(build_launch(config, cell, config.engine.port or PORT_PLACEHOLDER, source_dir=checkout),
                           config, None, None)
        launch = isolated.launch
        shown = launch.display(config.secret_env)
        click.echo(f"\n[{cell.id}] " + " ".join(f"{k}={v}" for k, v in cell.axes.items()))
        env = shown["env"]
        if env:
            click.echo("  env:    " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()))
        click.echo("  argv:   " + shlex.join(shown["argv"]))
        click.echo("  cwd:    the cell's own empty folder (engine_cwd), never this directory")
        if launch.package:
            said = f"must import from inside {launch.tree}" if launch.tree else "its import path is recorded"
            click.echo(f"  import: {launch.package} {said}")
        source = describe_source(cell.source, cache_dir)
        if source:
            sha = source["sha"] or f"? ({source['note']})"
            click.echo(f"  source: {source['repo']} @ {source['ref']} -> {sha}")
        if cell.source is not None:
            builds.setdefault((cell.source.repo, cell.source.ref), describe_setup(
                cell.source, cache_dir, config.engine.python or sys.executable,
                # a plugin's tree (`engine.plugin`) is not the engine's own build
                isolated.launch.profile.builds_from_source and not config.engine.plugin))
        for line in describe_isolation(isolated, shared_resources(config, cell)):
            click.echo(f"  {line}")
    if builds:
        click.echo("\n# source trees: checked out (and built) once each, before the first engine that runs them")
        for (repo, ref), build in builds.items():
            click.echo(f"{repo}@{ref}: {build}")
