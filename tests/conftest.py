"""Shared fixtures: paths of the project and a scratch results folder per test."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings

from evalkit.engine import EngineProcess, free_port

# Property tests check behaviour, never speed (benchmarks/ measures that): Hypothesis' default
# 200 ms deadline per example failed detector properties on a loaded 2-core machine (3 s for one
# example while other jobs ran), a timing verdict no test here should give.
settings.register_profile("evalkit", deadline=None)
settings.load_profile("evalkit")

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"


def demo_without_consistency() -> str:
    """configs/demo.yaml without the consistency eval and its thresholds, for tests that require
    two runs of one matrix (side by side and one by one, local and on Slurm) to agree exactly:
    that eval measures how outputs depend on which requests share a step, which is timing, and
    the buggy cell's race differs run to run by design."""
    text = re.sub(r"\n  consistency:\n(    .*\n)+", "\n", (CONFIGS / "demo.yaml").read_text(encoding="utf-8"))
    kept = "".join(line for line in text.splitlines(keepends=True) if "consistency." not in line)
    assert "consistency" not in kept, "configs/demo.yaml names consistency where this cannot remove it"
    return kept


def checkout_env() -> dict[str, str]:
    """This process's environment with this checkout first on PYTHONPATH: for the CLI started in a
    directory of its own, as a user would, when a config names a `tests.*` module (a test's engine
    profile) or a test must import this checkout rather than an installed evalkit."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    return tmp_path / "results"


def write_config(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@contextmanager
def running_sim(tmp_path: Path, *sim_args: str, served: str = "sim-model") -> Iterator[str]:
    """A simulated engine started and stopped by evalkit's own EngineProcess; yields its base URL."""
    port = free_port()
    argv = [sys.executable, "-m", "evalkit.sim", "--model", served, "--server-port", str(port), *sim_args]
    engine = EngineProcess(argv=argv, env=dict(os.environ), log_path=tmp_path / "sim.log",
                           base_url=f"http://127.0.0.1:{port}", served_name=served, stop_grace_s=5)
    with engine:
        engine.wait_ready(timeout_s=60)
        yield engine.base_url
