"""Cell -> the exact engine launch: argv, environment, source tree, health endpoint.

`evalkit plan` prints these without starting anything; run/cell.py launches exactly the same
thing with a real port, so what a reviewer reads in the plan is what ran.

The engine starts in a directory of its own (`cwd`, an empty folder run/cell.py makes per cell),
never in evalkit's: `python -m` puts the working directory first on sys.path, so an engine
started from an engine checkout would import that checkout whatever the cell's tree
(engine/imports.py). Paths a config gives relative to the directory evalkit runs in (as
configs/vllm-tiny.yaml does) keep that meaning: see `absolute`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig, Source
from evalkit.config.cells import Cell
from evalkit.engine.catalog import CatalogEntry
from evalkit.engine.sources import peek_sha
from evalkit.errors import SourceError
from evalkit.profiles import Launch, Profile, get_profile
from evalkit.redact import redact_argv, redact_env

PORT_PLACEHOLDER = "<port>"


@dataclass(frozen=True)
class CellLaunch:
    """Everything needed to start one cell's engine."""

    cell: Cell
    profile: Profile
    argv: list[str]
    env: dict[str, str]
    """Only what evalkit adds to the inherited environment (config env, cell env, PYTHONPATH)."""
    host: str
    port: int | str
    health_path: str
    fatal_patterns: tuple[str, ...]
    python: str = sys.executable
    """The interpreter of `python -m` entry points (`engine.python`), which the import proof asks."""
    package: str | None = None
    """The engine's top package, whose import path proves the tree (config `engine.package`, else the profile's)."""
    tree: Path | None = None
    """Where the package must import from: the source worktree's package directory (`source.subdir`,
    else the profile's `source_subdir`), first on PYTHONPATH; None without a source tree."""
    cwd: Path | None = None
    """The directory the engine starts in (an empty one of the cell's); None: evalkit's (plan only)."""
    cpus: tuple[int, ...] | None = None
    """The logical CPUs the engine's processes may run on (`devices.kind: cpu`); None: any."""

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def display(self, secret_env: list[str]) -> dict[str, Any]:
        """The launch as it may be shown or stored: secrets redacted."""
        return {
            "argv": redact_argv(self.argv),
            "env": redact_env(self.env, secret_env),
            "host": self.host,
            "port": self.port,
            "health_path": self.health_path,
            **({"cwd": str(self.cwd)} if self.cwd else {}),
            **({"cpus": list(self.cpus)} if self.cpus is not None else {}),
        }


def build_launch(
    config: MatrixConfig,
    cell: Cell,
    port: int | str,
    source_dir: Path | None = None,
    devices: tuple[int, ...] | None = None,
    cwd: Path | None = None,
    catalog: CatalogEntry | None = None,
) -> CellLaunch:
    """The launch of `cell` on `port`, started in `cwd`, with `source_dir` (a checked-out worktree)
    or its package directory on PYTHONPATH and, when the box declares devices, the
    device-visibility variables set to `devices`; `catalog`, the entry read at the cell's ref,
    goes under the cell's own settings, args and env (the launch's `cell` is the cell so made)."""
    profile = get_profile(config.engine.profile)
    cell = catalog.apply(cell) if catalog is not None else cell
    launch = Launch(
        python=absolute(config.engine.python) if config.engine.python else sys.executable,
        model=absolute(config.model),
        served_name=config.served,
        host=config.engine.host,
        port=port,
        template=tuple(absolute(part) for part in config.engine.command or ()),
    )
    argv = profile.argv(cell.settings, launch, [absolute(arg) for arg in cell.args])
    env = dict(cell.env)
    box = config.devices
    if devices is not None and box is not None:
        default_env = profile.visibility_env if box.kind == "gpu" else ()
        for name in box.visibility_env or default_env:
            env[name] = ",".join(str(d) for d in devices)
    cpus = devices if box is not None and box.kind == "cpu" else None
    tree = package_dir(source_dir, cell, profile) if source_dir is not None else None
    if tree is not None:
        inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), inherited) if p)
    if profile.safe_path:
        env.setdefault("PYTHONSAFEPATH", "1")  # the cell's own env may switch it off ("")
    return CellLaunch(
        cell=cell,
        profile=profile,
        argv=argv,
        env=env,
        host=config.engine.host,
        port=port,
        health_path=config.engine.health_path or profile.health_path,
        fatal_patterns=profile.fatal_patterns + tuple(config.engine.fatal_patterns),
        python=launch.python,
        package=config.engine.package or profile.package,
        tree=tree,
        cwd=cwd,
        cpus=cpus,
    )


def package_dir(worktree: Path, cell: Cell, profile: Profile) -> Path:
    """The directory of a checkout that holds the engine's package: the source's `subdir`, else
    the profile's `source_subdir` (SGLang keeps its package under `python/`)."""
    subdir = cell.source.subdir if cell.source is not None and cell.source.subdir is not None else profile.source_subdir
    return worktree / subdir if subdir else worktree


def absolute(path: str) -> str:
    """`path` made absolute against evalkit's working directory when it names something there.

    Engines used to inherit evalkit's working directory, so a config's relative paths (a model
    folder, a venv's interpreter, a script in a `command` template, a file in `args`) meant paths
    from where evalkit runs; the engine now starts in an empty directory, so evalkit resolves
    them first, keeping that meaning. Only whole values are resolved: `--flag=relative/path` and
    anything that does not exist yet reach the engine verbatim, as do placeholders and flags.
    The interpreter keeps its links (`os.path.abspath`, not `resolve`): a venv's python finds its
    venv through the path it is called by. The served name stays the config's string; with ATOM
    before 5e491a90b (no `--served-model-name`) give a local model as an absolute path.
    """
    if not path or path.startswith("-") or "{" in path or os.path.isabs(path) or not os.path.exists(path):
        return path
    return os.path.abspath(path)


def describe_source(source: Source | None, cache: Path) -> dict[str, str | None] | None:
    """A source as the plan shows it: repo, ref and SHA when it can be known offline."""
    if source is None:
        return None
    try:
        sha = peek_sha(source, cache)
        note = None if sha else "not fetched yet: resolved when the matrix runs"
    except SourceError as e:
        sha, note = None, str(e)
    return {"repo": source.repo, "ref": source.ref, "sha": sha, "note": note}
