"""evalkit's command line for tests, one helper each way, both answering as a finished process does
(`returncode`, `stdout`, `stderr`):

* `evalkit_cli(*args, cwd=...)`: the CLI's own click group in this process (click's runner). The
  default: what a command prints, writes and exits with does not depend on the process it runs in,
  and a new interpreter costs ~3 s of imports on a 2-core box.
* `evalkit_process(*args, cwd=...)`: ``python -m evalkit.cli`` as its own process, this checkout
  first on PYTHONPATH. Only where the process boundary is the behaviour under test (signals, exit
  status and teardown of the real program, an engine profile imported by a new interpreter); a test
  asks for it through the `evalkit_process` fixture, which puts it in the `e2e` tier.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


def checkout_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment, less a CI runner's GitHub Actions variables (a test inside Actions
    must not write its step summary unless it says so), plus `env`, with this checkout first on
    PYTHONPATH: a CLI started in a folder of its own imports this checkout and the `tests.*`
    modules a config names (a test's engine profile or eval)."""
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    merged = {**base, **(env or {})}
    merged["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), merged.get("PYTHONPATH")]))
    return merged


@contextmanager
def chdir(path: Path | str) -> Iterator[None]:
    """In `path` for the block (contextlib.chdir is Python 3.11+; evalkit supports 3.10)."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@dataclass(frozen=True)
class Ran:
    """A finished command, read as `subprocess.CompletedProcess` reads."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """Standard output then standard error, as a terminal shows them."""
        return self.stdout + self.stderr


def evalkit_cli(*args: str, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
                input: str | None = None) -> Ran:
    """`evalkit ARGS` from `cwd` through its click group, in this process. `env` is set for the
    command only (a value None unsets it); an exception evalkit did not turn into an exit code
    reads as the real program's would: its traceback on stderr, exit 1."""
    from evalkit.cli import main  # deferred: a test that never runs the CLI skips its imports

    clean: dict[str, str | None] = {"GITHUB_ACTIONS": None, "GITHUB_STEP_SUMMARY": None, **(env or {})}
    argv = sys.argv  # what a run records as its command line (`evalkit matrix ...`), as the program's would be
    sys.argv = ["evalkit", *args]
    try:
        with chdir(cwd or os.getcwd()):
            result = CliRunner().invoke(main, list(args), env=clean, input=input)
    finally:
        sys.argv = argv
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return Ran(args, result.exit_code, result.stdout, stderr)


def evalkit_process(*args: str, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
                    timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m evalkit.cli ARGS` from `cwd` as its own process (see the module's docstring for
    when a test needs that); its output captured, never raising on a non-zero exit."""
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *args], cwd=cwd or ROOT, env=checkout_env(env),
                          capture_output=True, text=True, timeout=timeout, input=input, check=False)
