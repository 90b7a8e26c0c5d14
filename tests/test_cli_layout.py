"""The CLI's shape: one module per command, a light import, errors as one line and a class's exit code."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.cli._common import EXIT_CODES_HELP, _Command
from evalkit.errors import EXIT_CODES, EXIT_INTERRUPTED, EvalkitError, LockHeld


def test_each_command_lives_in_its_own_module() -> None:
    assert sorted(main.commands) == ["bisect", "calibrate", "cell", "compare", "detect", "history", "matrix", "plan", "prepare", "report"]
    for name, command in main.commands.items():
        assert command.callback is not None and command.callback.__module__ == f"evalkit.cli.{name}", name
        assert isinstance(command, _Command), name


Program = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.smoke
def test_importing_the_cli_loads_no_heavy_dependency(program: Program) -> None:
    """A new interpreter's import, which this process (scipy loaded long since) cannot show: the
    default tier's one fresh `import evalkit.cli`."""
    code = "import sys, evalkit.cli; print(' '.join(m for m in ('scipy', 'pandas', 'lm_eval') if m in sys.modules))"
    done = program(sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_the_exit_code_table_is_written_once() -> None:
    for code, meaning in EXIT_CODES.items():
        assert f"  {code:<4} {meaning}" in EXIT_CODES_HELP
    for args in (["--help"], ["matrix", "--help"]):
        output = CliRunner().invoke(main, args, terminal_width=200).output
        assert all(meaning in output for meaning in EXIT_CODES.values()), args


def _failing(exc: BaseException) -> click.Command:
    @click.command(cls=_Command)
    def boom() -> None:
        raise exc

    return boom


def test_an_expected_error_is_one_line_and_its_class_exit_code() -> None:
    result = CliRunner().invoke(_failing(EvalkitError("cfg.yaml: engine.port: bad")), [])
    assert (result.exit_code, result.output) == (2, "error: cfg.yaml: engine.port: bad\n")
    result = CliRunner().invoke(_failing(LockHeld("devices are in use")), [])
    assert (result.exit_code, result.output) == (4, "error: devices are in use\n")
    result = CliRunner().invoke(_failing(KeyboardInterrupt()), [])
    assert (result.exit_code, result.output) == (EXIT_INTERRUPTED, "interrupted\n")


def test_history_without_a_model_names_the_recorded_models(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["history", "--db", str(tmp_path / "h.db")])
    assert (result.exit_code, result.output) == (2, "error: give --model NAME; recorded models: none yet\n")


def test_format_choices_are_the_renderers_formats_read_without_importing_a_renderer(program: Program) -> None:
    """e2e: its second half is a new interpreter's import (the smoke test above does one by default)."""
    from evalkit.render import BISECT_FORMATS, FORMATS

    for command, formats in (("report", FORMATS), ("compare", FORMATS), ("bisect", BISECT_FORMATS)):
        option = next(p for p in main.commands[command].params if p.name == "fmt")
        assert isinstance(option.type, click.Choice) and list(option.type.choices) == list(formats), command
    code = "import sys, evalkit.cli; print(' '.join(m for m in sys.modules if m.startswith('evalkit.render.')))"
    done = program(sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
