"""A throwaway engine that cannot run from its git tree until a setup step has built it.

Laid out like vLLM: the package `toyengine/` is tracked, its build output `toyengine/_built.py`
is not (vLLM's `_version.py` and compiled extensions are ignored by git the same way). The server
(`python -m toyengine.server`, ATOM's flags) imports `_built` first, so an unbuilt tree exits at
once with ModuleNotFoundError; built, it serves evalkit's simulator and reports the version its
build wrote (`0.1.<n>+g<sha>`, the commit of the tree that was built) on `/version`. At start it
logs what its cache folder (`$TOY_CACHE`) held, then leaves a file in it: a reused cache shows.

`build.py` is the setup: it writes `_built.py` from `git rev-parse HEAD` of the tree it runs in.
The third commit's build fails, like a commit whose extensions do not compile.

`PROFILE` is a user profile (`engine.profile: tests.toy_engine:PROFILE`) declaring `TOY_CACHE`
as its cache variable and `--port` as an internal port, as the built-in profiles do.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from evalkit.profiles import Profile
from evalkit.profiles.atom import ATOM_SETTINGS, atom_flags
from evalkit.profiles.isolation import InternalPort, Isolation

PROFILE = Profile(
    name="toy",
    entrypoint=("{python}", "-m", "toyengine.server"),
    flags=atom_flags,
    settings_supported=ATOM_SETTINGS,
    uses_devices=False,
    simulated=True,
    version_path="/version",
    isolation=Isolation(cache_env=("TOY_CACHE",), internal_ports=(InternalPort("--port"),)),
    builds_from_source=True,
)
SETUP = '["{python}", "build.py"]'
"""The setup of the toy engine's source, as a config writes it."""

SERVER = '''import os
import runpy
import sys

from toyengine import _built  # written by build.py: an unbuilt tree stops here

cache = os.environ["TOY_CACHE"]
print(f"toyengine {_built.VERSION} from {os.path.dirname(_built.__file__)}; cache {cache} held at start: "
      f"{sorted(os.listdir(cache))}", flush=True)
with open(os.path.join(cache, "compiled.bin"), "w") as out:
    out.write("what a compile cache keeps")
sys.argv = ["evalkit.sim", *sys.argv[1:], "--sim-version", _built.VERSION]
runpy.run_module("evalkit.sim", run_name="__main__")
'''
BUILD = '''import subprocess
import sys

sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
print(f"building toyengine at {sha}", flush=True)
with open("toyengine/_built.py", "w") as out:
    out.write(f"VERSION = '0.1.{MINOR}+g{sha[:12]}'\\n")
print("built", flush=True)
'''
BROKEN_BUILD = '''import sys

print("compiling toyengine/_C.c", flush=True)
sys.exit("error: toyengine/_C.c:12: unknown type name 'half2'")
'''


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_toy_repo(root: Path) -> tuple[Path, list[str]]:
    """The toy engine's repo: three commits (two that build, one whose build fails), oldest first."""
    repo = root / "toy-engine"
    (repo / "toyengine").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.invalid")
    git(repo, "config", "user.name", "dev")
    (repo / ".gitignore").write_text("toyengine/_built.py\n")
    (repo / "toyengine" / "__init__.py").write_text("")
    (repo / "toyengine" / "server.py").write_text(SERVER)
    shas = []
    for minor, build in ((1, BUILD), (2, BUILD), (3, BROKEN_BUILD)):
        (repo / "build.py").write_text(build.replace("{MINOR}", str(minor)))
        git(repo, "add", ".")
        git(repo, "commit", "-qm", f"change {minor}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return repo, shas
