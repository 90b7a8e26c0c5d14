"""The `evalkit` command line: every command parses, calls the library once, prints.

Exit codes (also in README.md):
  0    every cell ran and no failing threshold broke
  1    a threshold with action `fail` broke
  2    bad input: config, arguments, run id, source ref; nothing was started
  3    at least one cell failed to run (engine crash, timeout, eval error)
  4    another evalkit run holds the device lock
  130  interrupted (Ctrl-C / SIGTERM); finished cells are kept
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from evalkit import __version__
from evalkit.config import MatrixConfig, find_config, load_config
from evalkit.errors import ConfigError, EvalkitError
from evalkit.errors import EXIT_BAD_INPUT, EXIT_CODES, EXIT_INTERRUPTED

EXIT_CODES_HELP = "\b\nExit codes:\n" + "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())


def _load(model: str | None, config_path: Path | None) -> tuple[MatrixConfig, Path]:
    if config_path is None and model is None:
        raise ConfigError("give --model NAME (configs/NAME.yaml) or --config PATH")
    path = config_path or find_config(model or "")
    return load_config(path), path


def _console(stderr: bool = False) -> Console:
    """A wide console even without a TTY (CI logs, cron mail), so tables do not fold into columns."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=200)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


class _Command(click.Command):
    """Expected errors print as one line and exit 2, with no traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EvalkitError as e:
            _fail(str(e), e.cli_exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)


@click.group(epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="evalkit")
def main() -> None:
    """evalkit: did this change break model accuracy in any serving configuration?

    It expands a config's axes (e.g. TP/DP x graph mode x fix on/off) into cells, starts the
    engine for each cell, scores GSM8K through lm-eval, runs a long-generation repeated-token
    detector, and tabulates accuracy, collapse rates and paired deltas with their significance.

    \b
    Example:
      evalkit matrix --model demo            # the whole pipeline on the simulated engine
      evalkit plan --model deepseek-v4       # the 12 ATOM command lines, nothing started
    """


def _model_options(f: Any) -> Any:
    f = click.option("--config", "config_path", type=click.Path(path_type=Path), help="A config file (instead of --model).")(f)
    f = click.option("--model", "-m", help="Config name: configs/NAME.yaml, then the configs evalkit ships.")(f)
    return f


def _only_option(f: Any) -> Any:
    return click.option(
        "--only", multiple=True, metavar="AXIS=VALUE[,AXIS=VALUE]",
        help="Run a subset: keys are ANDed, 'a|b' is either value, repeat --only for a union.",
    )(f)


@main.command(cls=_Command)
@_model_options
@_only_option
@click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--cache-dir", type=click.Path(path_type=Path), default=Path(".evalkit-cache"), show_default=True,
              help="Engine source worktrees.")
def plan(model: str | None, config_path: Path | None, only: tuple[str, ...], results_dir: Path, cache_dir: Path) -> None:
    """Print every cell's exact argv, env and source without starting anything.

    \b
    Example:
      evalkit plan --model deepseek-v4 --only parallel=dp8
    """
    from evalkit.matrix import expand, select
    from evalkit.engine.launch import PORT_PLACEHOLDER, build_launch, describe_source

    config, path = _load(model, config_path)
    cells = select(expand(config), only, config)
    click.echo(f"# {path}: {len(cells)} cells, engine profile {config.engine.profile}")
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


@main.command(cls=_Command, epilog=EXIT_CODES_HELP)
@_model_options
@_only_option
@click.option("--limit", type=click.IntRange(min=1), help="Cap questions per eval (and prompts of the repetition check).")
@click.option("--dry-run", is_flag=True, help="Print the plan and exit.")
@click.option("--run-id", help="Name of the run folder (default: timestamp-model).")
@click.option("--resume", "resume_run", metavar="RUN", help="Finish an interrupted run (id, path or latest).")
@click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--cache-dir", type=click.Path(path_type=Path), default=Path(".evalkit-cache"), show_default=True)
@click.option("--base-url", help="Evaluate an already running server at this root URL (one cell, nothing started).")
@click.option("--executor", type=click.Choice(["local", "slurm"]), default=None,
              help="Where cells run: this machine, or one Slurm job per cell (default: the config's executor.kind).")
@click.option("--max-parallel", type=click.IntRange(min=1), default=None,
              help="Cells side by side (needs `devices` in the config). Default: as many as the devices allow.")
@click.option("--lock-file", type=click.Path(path_type=Path), default=Path("/tmp/evalkit-devices.lock"), show_default=True,
              help="Taken while engines run on declared devices or a real engine, so two runs never share GPUs.")
@click.option("--no-lock", is_flag=True, help="Do not take the device lock.")
@click.option("--history-db", type=click.Path(path_type=Path), help="History database [default: RESULTS_DIR/history.db].")
@click.option("--no-history", is_flag=True, help="Do not record finished cells in the history database.")
@click.option("--notify", metavar="CMD", help="Run CMD (split like a shell would, run without one) with the "
              "markdown report's path appended, after the run; e.g. --notify 'scripts/post-to-chat --channel ci'.")
@click.option("--json", "as_json", is_flag=True, help="Print summary.json on stdout; progress stays on stderr.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
@click.pass_context
def matrix(ctx: click.Context, model: str | None, config_path: Path | None, only: tuple[str, ...], limit: int | None,
           dry_run: bool, run_id: str | None, resume_run: str | None, results_dir: Path, cache_dir: Path,
           base_url: str | None, executor: str | None, max_parallel: int | None, lock_file: Path, no_lock: bool,
           history_db: Path | None,
           no_history: bool, notify: str | None, as_json: bool, quiet: bool) -> None:
    """Run the matrix: start each cell's engine, run GSM8K and the collapse check, report.

    Results go to RESULTS_DIR/RUN_ID/ (run.json, summary.json, table.md, one folder per cell).

    \b
    Examples:
      evalkit matrix --model demo
      evalkit matrix --model deepseek-v4 --only parallel=dp8,graph=piecewise --limit 200
      evalkit matrix --resume latest                      # after Ctrl-C or a crash
      evalkit matrix --config my.yaml --base-url http://127.0.0.1:8000   # a running server
    """
    from contextlib import nullcontext

    from evalkit.render import report
    from evalkit.store import history
    from evalkit.run.lock import DeviceLock
    from evalkit.matrix import Cell, baseline_cell, expand, select
    from evalkit.run.progress import make_progress
    from evalkit.errors import Interrupted
    from evalkit.run.runner import RunOptions, run_matrix
    from evalkit.store import RunStore, atomic_write_text, check_run_id, new_run_id, read_json, resolve_run, write_json
    from evalkit.verdicts import summarize

    if dry_run:
        ctx.invoke(plan, model=model, config_path=config_path, only=only, results_dir=results_dir, cache_dir=cache_dir)
        return
    if resume_run:
        run_path = resolve_run(results_dir, resume_run)
        previous = read_json(run_path / "run.json")
        config, path = _load(None, config_path or Path(previous["config_path"]))
        _check_same_config(config, previous, path)
        run_id, limit, only = run_path.name, previous.get("limit"), tuple(previous.get("only") or ())
        results_dir = run_path.parent
    else:
        config, path = _load(model, config_path)
    if base_url:
        from urllib.parse import urlparse

        if urlparse(base_url).path.strip("/"):
            raise ConfigError(f"--base-url {base_url}: give the server root (e.g. http://127.0.0.1:8000), not an endpoint")
        cells = [Cell("external", {}, config.engine.settings, (), {}, None)]
        config = config.model_copy(update={"axes": {}, "baseline": None, "ab": None, "exclude": []})
    else:
        every_cell = expand(config)
        baseline_cell(every_cell, config)  # a baseline that is not a cell is bad input, caught now
        cells = select(every_cell, only, config)
    options = RunOptions(
        results_dir=results_dir, cache_dir=cache_dir, run_id=check_run_id(run_id or new_run_id(path.stem)),
        limit=limit, base_url=base_url, command_line=["evalkit", *sys.argv[1:]],
        max_parallel=max_parallel or (config.devices.count if config.devices else 1), resume=bool(resume_run),
        only=list(only), executor=executor or config.executor.kind,
    )
    needs_lock = (not no_lock and not base_url and options.executor == "local"
                  and (config.devices is not None or config.engine.profile != "sim"))
    console = _console(stderr=as_json)
    progress = make_progress(quiet, stderr=as_json)
    history_path = history_db or history.default_db_path(results_dir)
    on_cell_done = None if no_history else history.cell_recorder(history_path, results_dir, options.run_id)
    interrupted = False
    try:
        with DeviceLock(lock_file, options.run_id) if needs_lock else nullcontext():
            try:
                store = run_matrix(config, path, cells, options, progress, on_cell_done=on_cell_done)
            finally:
                progress.close()
    except Interrupted:
        interrupted = True
        store = RunStore(results_dir, options.run_id)
        click.echo(f"interrupted: finished cells kept; continue with: evalkit matrix --resume {options.run_id}", err=True)
    summary = summarize(store.path, config)
    write_json(store.path / "summary.json", summary)
    atomic_write_text(store.path / "table.md", report.markdown(summary, report.load_details(store.path, summary)))
    if not no_history:
        history.record_finished_run(history_path, store.path)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    elif not quiet:
        report.terminal(summary, console, report.load_details(store.path, summary))
        console.print(f"results: {store.path}")
    if notify:
        _notify(notify, store.path / "table.md", summary["exit_code"])
    sys.exit(EXIT_INTERRUPTED if interrupted else summary["exit_code"])


def _notify(command: str, markdown_path: Path, exit_code: int) -> None:
    """The --notify hook: argv from `command` plus the report path; its failure is reported, not fatal."""
    import subprocess

    argv = [*shlex.split(command), str(markdown_path.resolve())]
    try:
        done = subprocess.run(argv, env={**os.environ, "EVALKIT_EXIT_CODE": str(exit_code)}, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        click.echo(f"warning: --notify {argv[0]}: {e}", err=True)
        return
    if done.returncode != 0:
        click.echo(f"warning: --notify {argv[0]} exited with {done.returncode}", err=True)


@main.command(cls=_Command)
@click.option("--run", "run_id", required=True, help="The run the cell belongs to (its run.json must exist).")
@click.option("--cell", "cell_id", required=True, help="The cell id.")
@click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
@click.option("--cache-dir", type=click.Path(path_type=Path), default=Path(".evalkit-cache"), show_default=True)
def cell(run_id: str, cell_id: str, results_dir: Path, cache_dir: Path) -> None:
    """Run one cell of an existing run and write its cell.json (what each Slurm job runs).

    \b
    Example:
      evalkit cell --run 20261203-120000-demo --cell dp8-piecewise-fixoff
    """
    from evalkit.run.progress import PlainProgress
    from evalkit.errors import Interrupted
    from evalkit.run.runner import run_one_cell

    try:
        record = run_one_cell(results_dir, run_id, cell_id, cache_dir, PlainProgress())
    except Interrupted:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(0 if record["status"] == "ok" else 3)


@main.command(cls=_Command)
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True, path_type=Path))
@click.option("--field", default="text", show_default=True, help="JSONL: the field holding the text.")
@click.option("--finish-reason", default=None, help="Assume this finish_reason (JSONL rows may carry their own).")
@click.option("--json", "as_json", is_flag=True, help="One JSON verdict per text on stdout.")
def detect(files: tuple[Path, ...], field: str, finish_reason: str | None, as_json: bool) -> None:
    """Judge texts with evalkit's repeated-token collapse detector.

    FILE is plain text (one text per file), or JSONL (one text per line, in --field, with an
    optional finish_reason); `-` reads stdin. Exit code 0 when nothing collapsed, 1 otherwise.

    \b
    Examples:
      evalkit detect transcript.txt
      evalkit detect results/latest/dp8-piecewise-fixoff/repetition.samples.jsonl --json
    """
    from evalkit.evals.detector import analyze_text
    from evalkit.render.report import clean

    collapsed = 0
    for path in files:
        for name, text, reason in _texts(path, field):
            analysis = analyze_text(text, finish_reason=finish_reason or reason)
            collapsed += analysis.collapsed
            if as_json:
                click.echo(json.dumps({"source": name, "collapsed": analysis.collapsed, **analysis.to_dict()}))
                continue
            ev = analysis.evidence
            line = f"{name}: {analysis.verdict}"
            if analysis.collapsed:
                line += (f" ({', '.join(ev.signals)}; period {ev.period}, onset token {ev.onset}, "
                         f"{ev.loop_tokens} tokens looped) unit: {clean(ev.unit_text or '')[:60]!r}")
            click.echo(line)
    sys.exit(1 if collapsed else 0)


def _texts(path: Path, field: str) -> list[tuple[str, str, str | None]]:
    """(name, text, finish_reason) for every text in a plain or JSONL file."""
    raw = sys.stdin.read() if str(path) == "-" else _read(path)
    name = "stdin" if str(path) == "-" else str(path)
    if not (str(path).endswith(".jsonl") or str(path).endswith(".ndjson")):
        return [(name, raw, None)]
    out = []
    for lineno, line in enumerate(raw.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text = row[field]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError(f"{name}:{lineno}: expected a JSON object with a {field!r} field ({e})") from e
        out.append((f"{name}:{row.get('id', lineno)}", str(text), row.get("finish_reason")))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from e


def _check_same_config(config: MatrixConfig, previous: dict[str, Any], path: Path) -> None:
    """--resume only continues the same matrix: a changed config would mix two experiments."""
    from evalkit.run.runner import redacted_snapshot

    if redacted_snapshot(config) != previous["config"]:
        raise ConfigError(f"{path}: changed since run {previous['run_id']} started; start a new run instead of --resume")


@main.command(cls=_Command)
@click.argument("run", default="latest")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown", "csv", "json"]), default="terminal",
              show_default=True, help="markdown: for a PR comment; csv: one row per cell; json: summary.json.")
@click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
def report(run: str, fmt: str, results_dir: Path) -> None:
    """Show a stored run (a run id, a path, or `latest`) as a table, markdown, CSV or JSON.

    The verdict is recomputed from the stored cells with the run's own config snapshot, so it
    equals the run's summary.json.

    \b
    Examples:
      evalkit report latest --format markdown > pr-comment.md
      evalkit report 20261203-111333-demo --format csv > cells.csv
    """
    from evalkit.render import report as render
    from evalkit.config import parse_config
    from evalkit.store import read_json, resolve_run
    from evalkit.verdicts import summarize

    run_path = resolve_run(results_dir, run)
    info = read_json(run_path / "run.json")
    summary = summarize(run_path, parse_config(info["config"], run_path / "run.json"))
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
    elif fmt == "csv":
        click.echo(render.csv(summary), nl=False)
    elif fmt == "markdown":
        click.echo(render.markdown(summary, render.load_details(run_path, summary)), nl=False)
    else:
        render.terminal(summary, _console(), render.load_details(run_path, summary))


@main.command(cls=_Command)
@click.argument("run_a")
@click.argument("run_b", default="latest")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown", "csv", "json"]), default="terminal",
              show_default=True)
@click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
def compare(run_a: str, run_b: str, fmt: str, results_dir: Path) -> None:
    """Compare two runs of the same matrix (e.g. before and after a PR), cell by cell.

    Per cell id found in both runs: B - A of GSM8K flexible and strict (McNemar exact test on
    the questions both runs answered) and of the collapse rate (Fisher exact test).

    \b
    Example:
      evalkit compare 20261201-020000-demo latest --format markdown > pr-comment.md
    """
    from evalkit.render import report as render
    from evalkit.comparison import compare_runs
    from evalkit.store import resolve_run

    result = compare_runs(resolve_run(results_dir, run_a), resolve_run(results_dir, run_b))
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
    elif fmt == "csv":
        click.echo(render.compare_csv(result), nl=False)
    elif fmt == "markdown":
        click.echo(render.compare_markdown(result), nl=False)
    else:
        render.compare_terminal(result, _console())


@main.command(cls=_Command)
@click.option("--model", "-m", help="Model name (run.json `model`) or config name (e.g. demo).")
@click.option("--cell", "cells", multiple=True, metavar="CELL", help="Only this cell id (repeatable).")
@click.option("--since", metavar="DATE", help="Runs started on or after: YYYY-MM-DD, an ISO time, or 7d / 12h.")
@click.option("--last", type=click.IntRange(min=0), default=20, show_default=True,
              help="Runs per cell in the table (0: all); the plot draws every run.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), help="Also draw accuracy and collapse rate to this PNG.")
@click.option("--import", "imports", multiple=True, metavar="RUN",
              help="First record a stored run (id, path, `latest` or `all`) into the history (repeatable).")
@click.option("--db", "db_path", type=click.Path(path_type=Path), help="History database [default: RESULTS_DIR/history.db].")
@click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True)
def history(model: str | None, cells: tuple[str, ...], since: str | None, last: int, plot_path: Path | None,
            imports: tuple[str, ...], db_path: Path | None, results_dir: Path) -> None:
    """Show how each cell's accuracy and collapse rate moved across runs.

    Every finished cell of `evalkit matrix` is recorded in RESULTS_DIR/history.db; --import
    backfills runs stored before that (recording a run again replaces its rows).

    \b
    Examples:
      evalkit history --import all
      evalkit history --model demo --cell dp8-piecewise-fixoff --since 7d
      evalkit history --model demo --plot trend.png
    """
    from evalkit.store import history as hist
    from evalkit.store import resolve_run

    with hist.History(db_path or hist.default_db_path(results_dir)) as store:
        for ref in imports:
            paths = list(hist.run_folders(results_dir)) if ref == "all" else [resolve_run(results_dir, ref)]
            for path in paths:
                click.echo(f"imported {path.name}: {store.import_run(path)} cells", err=True)
        if model is None:
            if not imports:
                known = ", ".join(f"{m} ({c})" if c else m for m, c, _ in store.models()) or "none yet"
                raise ConfigError(f"give --model NAME; recorded models: {known}")
            return
        points = store.trend(model, cells, hist.parse_since(since) if since else None)
    if not points:
        raise ConfigError(f"history: no recorded cells for model {model!r}"
                          + (f", cells {', '.join(cells)}" if cells else "") + (f" since {since}" if since else ""))
    title = f"evalkit history: {model}" + (f" since {since}" if since else "")
    _console().print(hist.trend_table(points, title, last or None))
    if plot_path:
        hist.plot(points, plot_path, title)
        click.echo(f"plot: {plot_path}", err=True)


if __name__ == "__main__":
    main()
