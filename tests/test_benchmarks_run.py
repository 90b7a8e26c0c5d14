"""Every benchmark the docs cite starts as a new user runs it: `python benchmarks/<name>.py`.

A script's own folder is first on `sys.path`, so a benchmark named like a standard-library module
(`benchmarks/bisect.py` once was) shadows it for every script beside it: `random` imports `bisect`,
and each benchmark died at import. Where a site-packages `.pth` file imports `random` before the
script's folder joins the path the shadowing hides, so the name test is the one that holds it;
`--help` imports everything a script needs and runs nothing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


def test_no_benchmark_is_named_like_a_standard_library_module() -> None:
    assert SCRIPTS, "no benchmarks found"
    assert [s.name for s in SCRIPTS if s.stem in sys.stdlib_module_names] == []


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_benchmark_imports_and_answers_help(script: Path, program: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """Its own process (the `e2e` tier): the script's folder first on sys.path is the point."""
    done = program(sys.executable, str(script), "--help", cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:")
