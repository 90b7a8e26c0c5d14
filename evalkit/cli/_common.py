"""What every command shares: clean errors and exit codes, the console, the common options."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from evalkit.errors import EXIT_BAD_INPUT, EXIT_CODES, EXIT_INTERRUPTED, EvalkitError
from evalkit.run.lock import DEFAULT_LOCK_FILE
from evalkit.run.signals import terminate_as_interrupt
from evalkit.store import DEFAULT_CACHE_DIR, DEFAULT_RESULTS_DIR

if TYPE_CHECKING:
    from evalkit.config import MatrixConfig

EXIT_CODES_HELP = "\b\nExit codes:\n" + "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())
"""The exit-code table of `evalkit --help` and `evalkit matrix --help`, from evalkit.errors.EXIT_CODES."""

Decorator = Callable[[Any], Any]


class _UsageError(click.UsageError):
    """click's usage error worded like evalkit's others: `error: No such option: --limt (Possible
    options: --limit)`, then where the help is; no usage block in front of it. Exit 2, bad input."""

    def show(self, file: Any = None) -> None:
        fail_lines = [f"error: {line}" for line in self.format_message().splitlines() or [""]]
        if self.ctx is not None:
            fail_lines.append(f"Try '{self.ctx.command_path} --help' for help.")
        click.echo("\n".join(fail_lines), err=True)


class _Parsing:
    """Usage errors of parsing (an unknown option, a missing argument) as `_UsageError`s."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)  # type: ignore[misc]
        except click.UsageError as e:
            raise _UsageError(e.format_message(), e.ctx or ctx) from e


class _Command(_Parsing, click.Command):
    """Expected errors print as one line `error: ...` and exit with the error class's code; Ctrl-C and
    SIGTERM alike end the command with `interrupted` and 130 (run/signals.py)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with terminate_as_interrupt():
                return super().invoke(ctx)
        except EvalkitError as e:
            fail(str(e), e.cli_exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)


class _Group(_Parsing, click.Group):
    """The `evalkit` group: an unknown command is a usage error worded like the others (each
    command handles its own errors and signals)."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            raise _UsageError(e.format_message(), e.ctx or ctx) from e


class _CommandGroup(_Command, _Group):
    """A command with subcommands (`evalkit history`, `evalkit history judge`): its own errors
    handled as a command's."""


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """`error: ...`, one line per error (a config with three bad fields lists all three)."""
    for line in message.splitlines() or [""]:
        click.echo(f"error: {line}", err=True)
    sys.exit(code)


PIPED_WIDTH = 200
"""Columns of a console without a TTY (CI logs, cron mail) when `COLUMNS` does not say."""


def console(stderr: bool = False) -> Console:
    """The terminal's console; without a TTY, `COLUMNS` wide when set (rich reads it), else
    PIPED_WIDTH, so a CI log's tables do not fold into rich's 80-column default."""
    out = Console(stderr=stderr)
    columns = os.environ.get("COLUMNS", "")
    return out if out.is_terminal or columns.isdigit() else Console(stderr=stderr, width=PIPED_WIDTH)


def echo_output(text: str | None) -> None:
    """A renderer's document on stdout as is (it ends in a newline); None: it printed itself."""
    if text is not None:
        click.echo(text, nl=False)


def load(model: str | None, config_path: Path | None) -> tuple[MatrixConfig, Path]:
    """The config named by --model or --config, and the file it came from."""
    from evalkit.config import resolve_config

    return resolve_config(model, config_path)


def model_options(f: Any) -> Any:
    """--model NAME / --config PATH."""
    f = click.option("--config", "config_path", type=click.Path(path_type=Path), help="A config file (instead of --model).")(f)
    f = click.option("--model", "-m", help="Config name: configs/NAME.yaml, then the configs evalkit ships.")(f)
    return f


def only_option(f: Any) -> Any:
    """--only AXIS=VALUE[,AXIS=VALUE] (repeatable)."""
    return click.option(
        "--only", multiple=True, metavar="AXIS=VALUE[,AXIS=VALUE]",
        help="Run a subset: keys are ANDed, 'a|b' is either value, repeat --only for a union.",
    )(f)


def results_dir_option(f: Any) -> Any:
    """--results-dir, default `DEFAULT_RESULTS_DIR` (store/files.py)."""
    return click.option("--results-dir", type=click.Path(path_type=Path), default=DEFAULT_RESULTS_DIR,
                        show_default=True)(f)


def lock_file_option(f: Any) -> Any:
    """--lock-file, default `DEFAULT_LOCK_FILE` (run/lock.py): the device lock of every command that starts engines."""
    return click.option("--lock-file", type=click.Path(path_type=Path), default=DEFAULT_LOCK_FILE, show_default=True,
                        help="Taken while engines run on declared devices or a real engine, so two runs never "
                        "share GPUs.")(f)


def cache_dir_option(help: str | None = None) -> Decorator:
    """--cache-dir, default `DEFAULT_CACHE_DIR` (store/files.py): the engine source worktrees."""
    return click.option("--cache-dir", type=click.Path(path_type=Path), default=DEFAULT_CACHE_DIR,
                        show_default=True, help=help)
