"""A throwaway engine laid out like SGLang, for the tests of which tree a cell runs (test_tree_proof.py).

`make_tree_repo` builds a git repository whose package `fakeserve` lives under `python/`, as
SGLang's lives at `python/sglang/`. Its `python -m fakeserve.launch_server` warns naming its own
file (as sglang/launch_server.py:71 does), prints which commit's code runs and from where, and
then serves evalkit's simulator. `PROFILE` is its user profile (`engine.profile:
tests.tree_engine:PROFILE`): the simulator's flags with this entry point, package and layout.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from evalkit.profiles import Profile
from evalkit.profiles.atom import ATOM_SETTINGS, atom_flags
from evalkit.profiles.vllm import VLLM_METRICS

STARTUP_FILE = r"(?P<path>/[^\n]*?/fakeserve/launch_server\.py):\d+: UserWarning"

PROFILE = Profile(
    name="fakeserve",
    entrypoint=("{python}", "-m", "fakeserve.launch_server"),
    flags=atom_flags,
    settings_supported=ATOM_SETTINGS,
    uses_devices=False,
    simulated=True,
    version_path="/version",
    metrics_path="/metrics",
    metric_names=VLLM_METRICS,
    package="fakeserve",
    source_subdir="python",
    startup_file_pattern=STARTUP_FILE,
)

LAUNCH_SERVER = '''"""fakeserve: evalkit's simulator behind an SGLang-like entry point."""
import sys
import warnings

from fakeserve.mark import MARK

if __name__ == "__main__":
    warnings.warn("'python -m fakeserve.launch_server' is a test engine", UserWarning, stacklevel=1)
    print(f"fakeserve {MARK} running {__file__}", flush=True)
    from evalkit.sim.__main__ import main

    sys.exit(main(sys.argv[1:]))
'''
ELSEWHERE = '''"""fakeserve that hands over to a launch_server.py elsewhere: its package is this tree's, but the
file that runs (and that its warning names) is not."""
import os
import runpy

if __name__ == "__main__":
    runpy.run_path(os.environ["FAKESERVE_ELSEWHERE"], run_name="__main__")
'''


def write_package(root: Path, mark: str, launch_server: str = LAUNCH_SERVER) -> Path:
    """`root/fakeserve/` with its `MARK`; the package directory."""
    package = root / "fakeserve"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "mark.py").write_text(f"MARK = {mark!r}\n")
    (package / "launch_server.py").write_text(launch_server)
    return package


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_tree_repo(root: Path) -> tuple[Path, dict[str, str]]:
    """The repository and its commits by mark: `one`, `two` (the same code, another mark) and
    `three` (whose launch_server runs another file, named by $FAKESERVE_ELSEWHERE)."""
    repo = root / "fakeserve-repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.invalid")
    git(repo, "config", "user.name", "dev")
    (repo / "README").write_text("the package is under python/, as in SGLang\n")
    shas = {}
    for mark in ("one", "two", "three"):
        write_package(repo / "python", mark, ELSEWHERE if mark == "three" else LAUNCH_SERVER)
        git(repo, "add", ".")
        git(repo, "commit", "-qm", f"fakeserve {mark}")
        shas[mark] = git(repo, "rev-parse", "HEAD")
    return repo, shas
