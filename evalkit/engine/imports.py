"""Which tree an engine runs: asked of the engine's own interpreter before it starts, and read
from its log once it has.

A source A/B is only an A/B if each cell imports its own checkout. Three things can make both
cells import the same code while each still starts and answers: `python -m` puts the working
directory first on sys.path, ahead of PYTHONPATH (CPython's `PyConfig.safe_path`,
Doc/c-api/init_config.rst since 3.11, gh-57684: "If argv[0] is equal to L"-m" (python -m
module), prepend the current working directory"; checked with Python 3.11.7 here), so an engine
started from a checkout imports that checkout; a checkout whose package lives in a subdirectory
(SGLang's `python/`) puts nothing importable on PYTHONPATH, so the installed build runs; and an
editable install or a `.pth` file can win over PYTHONPATH. So before the engine starts, `prove`
asks the cell's interpreter, with the cell's environment and working directory, where the
engine's top package would import from: `importlib.util.find_spec` locates it without importing
it. After start-up, `logged_file` reads the path of the engine's own file from a line it logs (a
warning's `path:line:`), the running process's own word on its tree.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROBE_TIMEOUT_S = 60.0
"""An interpreter that cannot answer where a package is in a minute will not start an engine."""
_PROBE = (
    "import importlib.util, json, sys\n"
    "try:\n"
    "    spec = importlib.util.find_spec(sys.argv[1])\n"
    "    found = None if spec is None else {'origin': spec.origin,\n"
    "                                      'locations': list(spec.submodule_search_locations or [])}\n"
    "except Exception as e:\n"
    "    found = {'error': f'{type(e).__name__}: {e}'}\n"
    "print(json.dumps(found))\n"
)
"""Run as `python -c _PROBE package`: like `python -m`, `-c` puts the working directory first on
sys.path unless PYTHONSAFEPATH is set, so it sees what the engine's `-m` will see."""


@dataclass(frozen=True)
class ImportProof:
    """Where `package` would import from, as the engine's interpreter answered."""

    package: str
    origin: str | None
    """The package's `__init__.py` (a regular package) or its first directory (a namespace
    package); None when it cannot be imported at all."""
    locations: tuple[str, ...] = ()
    """Every directory the package would load its modules from (a namespace package may span several)."""
    error: str | None = None
    """Why the interpreter could not answer, when it could not."""

    def outside(self, tree: Path) -> str | None:
        """The first place the package would come from that is not inside `tree`, or None when all
        are inside. A package that cannot be found at all is outside by definition."""
        if self.origin is None:
            return f"nowhere ({self.error or 'not importable'})"
        for place in (self.origin, *self.locations):
            if not inside(place, tree):
                return place
        return None


def inside(path: str, tree: Path) -> bool:
    """Whether `path` lies in `tree` once both are made absolute and their links resolved (a
    worktree reached through a symlinked cache is still the worktree)."""
    try:
        Path(path).resolve().relative_to(tree.resolve())
    except ValueError:
        return False
    return True


def prove(python: str, package: str, env: Mapping[str, str], cwd: Path | None) -> ImportProof:
    """Ask `python`, run with `env` in `cwd` exactly as the engine will be, where `package` imports from."""
    try:
        done = subprocess.run([python, "-c", _PROBE, package], env=dict(env), cwd=cwd, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return ImportProof(package, None, error=f"cannot run {python}: {type(e).__name__}: {e}")
    lines = done.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if done.returncode == 0 and lines else {"error": _last(done.stderr)}
    except ValueError:
        found = {"error": f"unreadable answer {lines[-1]!r}"}
    if found is None:
        return ImportProof(package, None, error=f"{python} finds no package {package!r}")
    if "error" in found:
        return ImportProof(package, None, error=found["error"] or f"{python} exited with {done.returncode}")
    locations = tuple(found["locations"])
    origin = found["origin"] if found["origin"] not in (None, "namespace") else (locations[0] if locations else None)
    return ImportProof(package, origin, locations)


def logged_file(log_text: str, pattern: str | None) -> str | None:
    """The path in the first line of the engine's log that `pattern` (with a `path` group) matches."""
    if pattern is None:
        return None
    found = re.search(pattern, log_text)
    return found.group("path") if found else None


def _last(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""
