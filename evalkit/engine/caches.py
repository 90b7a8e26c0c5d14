"""Compile caches kept across launches, in folders evalkit names by its own key (`engine.cache: keyed`).

An engine's torch.compile, Inductor and Triton caches make a warm start minutes shorter, and a
wrong one when the engine keys them on less than what decides their contents: ATOM's key leaves
out the graph mode (profiles/atom.py), which is why evalkit empties caches per launch. So evalkit
keys the folder itself, on everything that decides what a compiler writes there:

* the launch as the comparability key sees it (store/comparability.py `launch_key`: argv and env
  without ports, hosts and paths that move from launch to launch), where the env is what the
  launch sets plus the inherited variables whose names start with the profile's `compile_env`
  prefixes (TORCHINDUCTOR_*, VLLM_*: they reach compilation without being in the config);
* the graph mode asked for, the model (a local folder by its real path: a rebuilt model is a new
  folder), the engine source tree's commit;
* the engine's, torch's and Triton's distribution versions as the engine's own interpreter
  reports them (`importlib.metadata`, no engine import);
* the devices: this CPU's model (Inductor's CPU kernels are built for its instruction set), and
  for an engine on GPUs their runtime and models (devices/probe.py).

A cache variable's own value is never part of it (where a cache lives does not decide what it
holds), and the key never enters the comparability key: two cells that may be compared stay so
whichever cache they ran with, and cell.json records the mode, key and hit beside the launch.

The folders live under `engine.cache_dir` (default `.evalkit-cache/engine-caches` beside the
results folder), one per key: `<key>/key.json` says the key in full, `<key>/<VARIABLE>/` is what
the engine got. `index.json` records each folder's last use, size and whether a launch that used
it became ready: only such a folder is a hit; one left by a launch that never served is removed,
never reused. The index is read and written whole under an fcntl lock (`index.lock`), so cells
running side by side or as Slurm jobs on one filesystem never lose each other's entries, and
last use is the index's, not the filesystem's atime. A launch holds its folder's own lock while
its engine runs: a second launch with the same key gets fresh caches instead (said in cell.json),
and eviction skips folders in use. After each launch the least recently used folders are removed
until the rest fit `engine.cache_max_gib`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from evalkit.config import MatrixConfig
from evalkit.devices.probe import find_backend, inventory
from evalkit.engine.launch import CellLaunch, absolute
from evalkit.profiles import Profile
from evalkit.store import atomic_write_text
from evalkit.store.comparability import launch_key

CacheMode = Literal["fresh", "keyed", "engine"]
FOLDER = "engine-caches"
"""The keyed caches' folder under `.evalkit-cache` beside the results folder (default)."""
INDEX, INDEX_LOCK, KEY_FILE = "index.json", "index.lock", "key.json"
LAYOUT = 1
"""The key's own version: a change to what the key holds makes every folder a miss."""
SHARED_COMPILE_ENV = ("TORCH", "TRITON_", "PYTORCH_", "CUDA_", "HIP_", "ROCM_", "NVCC_")
"""Inherited variables that reach any PyTorch engine's compilation (TORCHINDUCTOR_*, TRITON_*)."""
VERSIONED = ("torch", "triton", "pytorch-triton-rocm")
"""Distributions whose version decides compiled code besides the engine's own."""
_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "dists = m.packages_distributions().get(sys.argv[1], [])\n"
    "out = {}\n"
    "for name in [*dists, *sys.argv[2:]]:\n"
    "    try:\n"
    "        out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps(out, sort_keys=True))\n"
)
"""Asks the engine's interpreter its distributions' versions without importing the engine."""
PROBE_TIMEOUT_S = 120
IMPORT_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PATH", "HOME")
"""The variables that decide which distributions the engine's interpreter finds (the probe's only
environment, so the answer is the same whatever else differs, and asked once per interpreter)."""


def cache_mode(config: MatrixConfig, profile: Profile) -> CacheMode:
    """The config's `engine.cache`; by default keyed where the profile names a variable that
    moves the engine's caches, else fresh (a fixed folder such as ATOM's can only be emptied)."""
    if config.engine.cache is not None:
        return config.engine.cache
    return "keyed" if profile.isolation.cache_env else "fresh"


def caches_root(config: MatrixConfig, results_dir: Path) -> Path:
    """Where keyed caches live: `engine.cache_dir`, else `.evalkit-cache/engine-caches` beside the
    results folder; absolute, since the engine starts in another directory."""
    given = config.engine.cache_dir
    root = Path(absolute(os.path.expanduser(given))) if given else results_dir.parent / ".evalkit-cache" / FOLDER
    return root.absolute()


class CacheKey(BaseModel):
    """Everything that decides what an engine's compile caches hold (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    engine: str
    model: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    graph_mode: str | None
    source: str | None
    """The engine tree's commit; None: the installed engine (its `versions` say which)."""
    versions: tuple[tuple[str, str], ...]
    """Distribution -> version in the engine's interpreter (the engine's own, torch, Triton)."""
    device: str
    layout: int = LAYOUT

    @property
    def digest(self) -> str:
        """16 hex characters of the whole key: the folder's name."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_key(launch: CellLaunch, config: MatrixConfig, source_sha: str | None) -> CacheKey:
    """The key of `launch` (before evalkit adds its internal ports and cache variables)."""
    isolation = launch.profile.isolation
    prefixes = (*SHARED_COMPILE_ENV, *isolation.compile_env)
    inherited = {k: v for k, v in os.environ.items() if k.startswith(prefixes)}
    env = {k: v for k, v in {**inherited, **launch.env}.items() if k not in isolation.cache_env}
    moved = [p for p in (str(launch.tree) if launch.tree else None,
                         f"{launch.cwd.parent}/" if launch.cwd is not None else None) if p]
    model = absolute(config.model)
    said = launch_key(model=model, engine=launch.profile.name, argv=launch.argv, env=env, host=launch.host,
                      port=launch.port, moved=moved, secret_env=config.secret_env)
    return CacheKey(
        engine=launch.profile.name, model=os.path.realpath(model) if os.path.exists(model) else model,
        argv=said.argv or (), env=said.env or (), graph_mode=launch.cell.settings.graph_mode, source=source_sha,
        versions=versions(launch.python, launch.package or "",
                          tuple((k, v) for k, v in sorted({**os.environ, **launch.env}.items()) if k in IMPORT_ENV)),
        device=device_fingerprint(launch.profile.uses_devices))


@functools.lru_cache(maxsize=64)
def versions(python: str, package: str, env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Distribution versions of `package` (what provides it) and of `VERSIONED`, as `python` with
    `env` (`IMPORT_ENV` only) reports them; (("unreadable", why),) when it cannot say (the engine
    would not start either, or a plan on a machine without the engine's interpreter)."""
    try:
        out = subprocess.run([python, "-c", _PROBE, package or "-", *VERSIONED], env=dict(env),
                             capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=True)
        return tuple(sorted(json.loads(out.stdout).items()))
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return (("unreadable", type(e).__name__),)


def device_fingerprint(uses_devices: bool) -> str:
    """This CPU's architecture and model, and for an engine on GPUs their runtime and models."""
    parts = [f"cpu {platform.machine()} {_cpu_model()}"]
    found = inventory(find_backend()) if uses_devices else None
    if found is not None:
        names = sorted({str(d.get("name")) for d in found.devices})
        parts.append(f"{found.runtime} {found.runtime_version} {' + '.join(names)}")
    return "; ".join(parts)


@functools.cache
def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


@contextlib.contextmanager
def _index(root: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The index, read and written whole under its lock: digest -> entry. An unreadable index
    counts as empty: its folders are then misses, refilled, never trusted."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / INDEX_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            entries = json.loads((root / INDEX).read_text(encoding="utf-8"))
            entries = entries if isinstance(entries, dict) else {}
        except (OSError, ValueError):
            entries = {}
        yield entries
        atomic_write_text(root / INDEX, json.dumps(entries, indent=1, sort_keys=True) + "\n")


def read_index(root: Path) -> dict[str, dict[str, Any]]:
    """The index as it is now (empty when there is none); creates nothing."""
    if not (root / INDEX).is_file():
        return {}
    with _index(root) as entries:
        return dict(entries)


def would_hit(root: Path, key: CacheKey) -> bool:
    """Whether a launch with `key` would find its folder filled now (what `plan` says)."""
    entry = read_index(root).get(key.digest)
    return bool(entry and entry.get("ready")) and (root / key.digest).is_dir()


@dataclass
class Lease:
    """A keyed folder held by one launch, from before its engine starts until it has stopped."""

    root: Path
    key: CacheKey
    hit: bool
    lock_fd: int

    @property
    def path(self) -> Path:
        return self.root / self.key.digest

    def finish(self, ready: bool, max_bytes: int) -> list[str]:
        """After the engine stopped: a launch that became ready marks the folder filled (its size
        and last use), one that never did leaves nothing to reuse; then the least recently used
        folders go until the rest fit `max_bytes`. The folders evicted."""
        try:
            size = _size(self.path) if ready else 0
            with _index(self.root) as entries:
                if ready:  # the entry is there unless the index was lost meanwhile: then it is made again
                    entry = entries.setdefault(self.key.digest, {"engine": self.key.engine, "created": time.time()})
                    entry.update(ready=True, size=size, last_used=time.time())
                else:
                    shutil.rmtree(self.path, ignore_errors=True)
                    entries.pop(self.key.digest, None)
                return _evict(self.root, entries, max_bytes, held=self.key.digest)
        finally:
            os.close(self.lock_fd)


def acquire(root: Path, key: CacheKey) -> Lease | None:
    """Hold the folder of `key` for one launch (made empty unless a ready launch filled it);
    None while another launch holds it."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / f"{key.digest}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    folder = root / key.digest
    with _index(root) as entries:
        entry = entries.get(key.digest)
        hit = bool(entry and entry.get("ready")) and folder.is_dir()
        if not hit:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            atomic_write_text(folder / KEY_FILE, key.model_dump_json(indent=1) + "\n")
            entries[key.digest] = {"engine": key.engine, "ready": False, "size": 0, "created": time.time()}
        entries[key.digest]["last_used"] = time.time()
    return Lease(root, key, hit, fd)


def _evict(root: Path, entries: dict[str, dict[str, Any]], max_bytes: int, held: str) -> list[str]:
    """Remove least recently used folders (none in use by another launch) until the rest fit."""
    total = sum(int(e.get("size") or 0) for e in entries.values())
    evicted = []
    for digest, entry in sorted(entries.items(), key=lambda item: float(item[1].get("last_used") or 0)):
        if total <= max_bytes:
            break
        with _held_elsewhere(root, digest, held) as busy:
            if busy:
                continue
            shutil.rmtree(root / digest, ignore_errors=True)
            total -= int(entry.get("size") or 0)
            evicted.append(digest)
    for digest in evicted:
        del entries[digest]
    return evicted


@contextlib.contextmanager
def _held_elsewhere(root: Path, digest: str, held: str) -> Iterator[bool]:
    """Whether another launch holds `digest`'s folder; while False, it is locked for us."""
    if digest == held:  # this launch's own, whose lock we hold already
        yield False
        return
    fd = os.open(root / f"{digest}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield True
            return
        yield False
    finally:
        os.close(fd)


def _size(folder: Path) -> int:
    """Bytes in the files under `folder` (links not followed)."""
    total = 0
    for base, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total
