"""Cell -> the exact engine launch: argv, environment, source tree, health endpoint.

`evalkit plan` prints these without starting anything; run/cell.py launches exactly the same
thing with a real port, so what a reviewer reads in the plan is what ran.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from evalkit.config import MatrixConfig, Source
from evalkit.errors import SourceError
from evalkit.matrix import Cell
from evalkit.profiles import Launch, Profile, get_profile
from evalkit.redact import redact_argv, redact_env
from evalkit.engine.sources import peek_sha

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

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def display(self, secret_env: list[str]) -> dict[str, object]:
        """The launch as it may be shown or stored: secrets redacted."""
        return {
            "argv": redact_argv(self.argv),
            "env": redact_env(self.env, secret_env),
            "host": self.host,
            "port": self.port,
            "health_path": self.health_path,
        }


def build_launch(
    config: MatrixConfig,
    cell: Cell,
    port: int | str,
    source_dir: Path | None = None,
    devices: tuple[int, ...] | None = None,
) -> CellLaunch:
    """The launch of `cell` on `port`, with `source_dir` (a checked-out worktree) on PYTHONPATH
    and, when the box declares devices, the device-visibility variables set to `devices`."""
    profile = get_profile(config.engine.profile)
    launch = Launch(
        python=config.engine.python or sys.executable,
        model=config.model,
        served_name=config.served,
        host=config.engine.host,
        port=port,
        template=tuple(config.engine.command or ()),
    )
    argv = profile.argv(cell.settings, launch, cell.args)
    env = dict(cell.env)
    if devices is not None and config.devices is not None:
        for name in config.devices.visibility_env or profile.visibility_env:
            env[name] = ",".join(str(d) for d in devices)
    if source_dir is not None:
        inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source_dir), inherited) if p)
    return CellLaunch(
        cell=cell,
        profile=profile,
        argv=argv,
        env=env,
        host=config.engine.host,
        port=port,
        health_path=config.engine.health_path or profile.health_path,
        fatal_patterns=profile.fatal_patterns + tuple(config.engine.fatal_patterns),
    )


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
