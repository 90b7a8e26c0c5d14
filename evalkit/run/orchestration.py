"""What every command that starts engines shares: a matrix (api/matrix.py), a bisect
(bisect/driver.py) and a Slurm job's one cell (`run_one_cell`).

Each takes the same terms (`CommandRequest`: which config, how many questions, where results and
engine sources go, the device lock, the command line to record), holds the machine-wide device
lock while its engines occupy devices here (`device_lock`), continues a run only with the config it
started with (`load_unchanged`), and on Ctrl-C or SIGTERM stops the engine of the cell it runs
before the interrupt goes on up (`stopping_on_interrupt`). A matrix of several cells side by side
stops its engines through its executor instead (run/local.py, run/slurm.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig, load_config
from evalkit.errors import ConfigError, Interrupted
from evalkit.evals.cancel import Stop
from evalkit.profiles import get_profile
from evalkit.run.cell import CellControl
from evalkit.run.lock import DEFAULT_LOCK_FILE, DeviceLock
from evalkit.run.stages import redacted_snapshot
from evalkit.store import DEFAULT_CACHE_DIR, DEFAULT_RESULTS_DIR


@dataclass(frozen=True)
class CommandRequest:
    """The terms a matrix (`MatrixRequest`) and a bisect (`BisectRequest`) share, with their defaults."""

    model: str | None = None
    """Config name: configs/NAME.yaml, then the configs evalkit ships (`find_config`)."""
    config_path: Path | None = None
    """Or a config file."""
    limit: int | None = None
    """At most this many questions per eval (and prompts of the repetition check)."""
    resume: str | None = None
    """Continue a run (its id, its folder or `latest`) or a bisect (its id or folder) on the terms
    it started with."""
    results_dir: Path = DEFAULT_RESULTS_DIR
    cache_dir: Path = DEFAULT_CACHE_DIR
    """Engine source checkouts (bare clones and worktrees)."""
    lock_file: Path = DEFAULT_LOCK_FILE
    lock: bool = True
    """Take the device lock when engines use devices here: a config that declares devices or whose
    engine profile uses them (not the simulator), engines started on this machine (not an external
    server, not Slurm jobs)."""
    command_line: tuple[str, ...] = ()
    """Stored in run.json or bisect.json and shown in the report ("evalkit matrix ...")."""


def device_lock(request: CommandRequest, holder: str, config: MatrixConfig,
                engines_here: bool = True) -> AbstractContextManager[Any]:
    """The machine-wide device lock, named for `holder` (a run id, a bisect's folder), when the
    command's engines occupy devices here (`CommandRequest.lock`); else a lock that holds nothing."""
    uses_devices = config.devices is not None or get_profile(config.engine.profile).uses_devices
    if request.lock and engines_here and uses_devices:
        return DeviceLock(request.lock_file, holder)
    return nullcontext()


def load_unchanged(path: Path, snapshot: dict[str, Any], since: str, instead: str | None = None) -> MatrixConfig:
    """The config at `path`, which must still be what a run or bisect stored when it started
    (`snapshot`, secrets redacted): continuing with another experiment under the same name would
    mix two in one report. ConfigError otherwise, "changed since `since` started; `instead`"."""
    config = load_config(path)
    if redacted_snapshot(config) != snapshot:
        raise ConfigError(f"{path}: changed since {since} started" + (f"; {instead}" if instead else ""))
    return config


@contextmanager
def stopping_on_interrupt(config: MatrixConfig) -> Iterator[CellControl]:
    """The control of cells run one at a time in this thread (a Slurm job's cell, a bisect's ends
    and steps), with the config's cell budget. On Ctrl-C or SIGTERM (under `interrupts_raise`) the
    running cell stops and its engine is stopped before the interrupt goes on up, so no engine
    outlives the command."""
    control = CellControl(Stop(), config.timeouts.cell)
    try:
        yield control
    except (KeyboardInterrupt, Interrupted):
        control.stop.set()
        if control.engine is not None:
            control.engine.stop()
        raise
