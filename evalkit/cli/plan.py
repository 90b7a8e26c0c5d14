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
@click.option("--db", "db_path", type=click.Path(path_type=Path, dir_okay=False),
              help="History database the wall times are estimated from (default: RESULTS_DIR/history.db).")
@click.option("--intermittent", type=click.FloatRange(0, 1, min_open=True), default=0.25, show_default=True,
              help="Share of runs a failure shows in: how many GSM8K repeats catch it, and their cost.")
@click.option("--catch", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.9, show_default=True,
              help="The chance of catching it that the repeats should reach.")
@results_dir_option
@cache_dir_option(help="Engine source worktrees.")
def plan(model: str | None, config_path: Path | None, only: tuple[str, ...], results_dir: Path, cache_dir: Path,
         limit: int | None = None, calibration: Path | None = None, db_path: Path | None = None,
         intermittent: float = 0.25, catch: float = 0.9) -> None:
    """Print every cell's exact argv, env and source, each threshold's power, the run's wall time
    and the repeats an intermittent failure needs, without starting anything.

    Per threshold: the n it is checked on, the smallest change it detects (MDE) at its alpha and
    power, and the n its margin needs. Per cell and for the matrix: the wall time, from the
    history of earlier runs of the same config (engine start-up, each eval's time scaled to this
    run's n and repeats).

    \b
    Example:
      evalkit plan --model deepseek-v4 --only parallel=dp8
      evalkit plan --model demo --limit 50
      evalkit plan --model demo --intermittent 0.25 --catch 0.9
    """
    import sys

    from evalkit.config.cells import expand, select
    from evalkit.engine.catalog import CatalogEntry, catalog_lines, describe_entry, entry_at_ref
    from evalkit.engine.isolation import describe_isolation, isolate, shared_resources
    from evalkit.engine.launch import PORT_PLACEHOLDER, CellLaunch, build_launch, describe_source
    from evalkit.engine.setup import describe_setup
    from evalkit.history import History, default_db_path
    from evalkit.history.timing import cell_times
    from evalkit.verdict.pairs import pair_lines
    from evalkit.verdict.plan import noise_from, plan_lines
    from evalkit.verdict.plan_topology import topology_lines
    from evalkit.verdict.schedule import repeats_lines, time_lines

    config, path = load(model, config_path)
    cells = select(expand(config), only, config)
    click.echo(f"# {path}: {len(cells)} cells, engine profile {config.engine.profile}")
    for line in plan_lines(config, limit, noise_from(calibration)):
        click.echo(line)
    db = db_path or default_db_path(results_dir)
    times = None
    if db.is_file():  # a plan creates nothing: no history, no estimate
        with History(db) as history:
            times = cell_times(history, path.stem)
    time_head, cell_time = time_lines(config, path.stem, cells, times, db, limit)
    for line in (*time_head, *repeats_lines(config, cells, times, limit, intermittent, catch)):
        click.echo(line)
    builds: dict[tuple[str, str], str] = {}
    entries: dict[str, CatalogEntry] = {}
    launches: dict[str, CellLaunch] = {}
    for cell in cells:
        checkout = Path("<checkout>") if cell.source else None  # the worktree's path is known once checked out
        entry = entry_at_ref(config, cell, cache_dir)
        if isinstance(entry, CatalogEntry):
            entries[cell.id] = entry
        source = describe_source(cell.source, cache_dir)
        isolated = isolate(build_launch(config, cell, config.engine.port or PORT_PLACEHOLDER, source_dir=checkout,
                                        catalog=entry if isinstance(entry, CatalogEntry) else None),
                           config, None, None, results_dir, source["sha"] if source else None)
        launch = launches[cell.id] = isolated.launch
        shown = launch.display(config.secret_env)
        click.echo(f"\n[{cell.id}] " + " ".join(f"{k}={v}" for k, v in cell.axes.items()))
        parts = topology_lines(config, cell, checkout, entry if isinstance(entry, CatalogEntry) else None)
        env = shown["env"]
        if env and not parts:
            click.echo("  env:    " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()))
        for line in parts or ["  argv:   " + shlex.join(shown["argv"])]:  # a topology's parts, else its one argv
            click.echo(line)
        click.echo("  cwd:    the cell's own empty folder (engine_cwd), never this directory")
        if cell.id in cell_time:
            click.echo(f"  time:   {cell_time[cell.id]}")
        if launch.package:
            said = f"must import from inside {launch.tree}" if launch.tree else "its import path is recorded"
            click.echo(f"  import: {launch.package} {said}")
        if source:
            sha = source["sha"] or f"? ({source['note']})"
            click.echo(f"  source: {source['repo']} @ {source['ref']} -> {sha}")
        if config.engine.catalog is not None:
            click.echo(f"  catalog: {describe_entry(entry) if isinstance(entry, CatalogEntry) else entry}")
        if cell.source is not None:
            builds.setdefault((cell.source.repo, cell.source.ref), describe_setup(
                cell.source, cache_dir, config.engine.python or sys.executable,
                # a plugin's tree (`engine.plugin`) is not the engine's own build
                isolated.launch.profile.builds_from_source and not config.engine.plugin))
        for line in describe_isolation(isolated, shared_resources(config, cell)):
            click.echo(f"  {line}")
    for line in catalog_lines(config, cells, entries):
        click.echo(line)
    for line in pair_lines(config, cells, launches):  # a pair that differs beyond its axes, before any engine starts
        click.echo(line)
    if builds:
        click.echo("\n# source trees: checked out (and built) once each, before the first engine that runs them")
        for (repo, ref), build in builds.items():
            click.echo(f"{repo}@{ref}: {build}")
