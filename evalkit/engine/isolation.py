"""Each engine launch gets its own caches and internal ports (what its profile's `isolation` names).

Caches: a compile cache outlives the launch that filled it, and the engines key it on less than
a matrix varies. ATOM's torch.compile cache lives in `~/.cache/atom` (atom/utils/backends.py:475,
`VLLM_CACHE_ROOT = os.path.expanduser("~/.cache/atom")`, at 0e9804c21, ccc861dc5 and ffdf3bb5),
its key (`CompilationConfig.compute_hash`, atom/config.py:222-240 at 0e9804c21) leaves out
`cudagraph_mode`, so FULL and PIECEWISE cells of one commit share entries, and ATOM's CI empties
it before every launch "to avoid NameError from outdated generated code"
(.github/scripts/atom_test.sh:50-52). So, by `engine.cache` (engine/caches.py `cache_mode`):
- `keyed` (the default where the profile names a `cache_env` variable): every such variable
  points at `<key>/<VAR>` in a folder evalkit names by its own key of what decides the cache's
  contents (engine/caches.py), reused by every launch with that key; cell.json records the mode,
  key and whether it was a hit. A keyed folder another launch holds gives this one fresh caches;
- `fresh`: every variable in `cache_env` points at its own empty folder under the cell folder
  (`engine-cache/<VAR>`), made before the launch and removed when the engine has stopped (a
  compile cache can be gigabytes; cell.json records where it was);
- `engine`: the engine's own caches, untouched (for users who know its cache keys).
A variable the config sets itself is left as given, and recorded as kept. Unless `engine`:
- every folder in `fixed_cache_dirs` (no variable moves it: ATOM's) is emptied before the
  launch, as the engine's CI does; the folder itself and anything outside it are left alone,
  symlinks inside are unlinked, never followed. Moving HOME instead would also move the user's
  site-packages, model downloads and kernel JIT caches. Two cells that would use one such folder
  never run side by side (`shared_resources`): emptying it under a running engine would break it.

Internal ports: each `InternalPort` whose condition holds gets a port (or a block of `span`
consecutive ports) from evalkit's port book, through its flag, unless the cell's argv already
passes that flag. A `FixedPort` (no flag moves it) is a shared resource too.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.engine.caches import Lease, acquire, cache_key, cache_mode, caches_root, would_hit
from evalkit.engine.launch import CellLaunch
from evalkit.engine.ports import PortBook
from evalkit.errors import ConfigError
from evalkit.profiles import get_profile

CACHE_FOLDER = "engine-cache"
"""The fresh cache folder of a launch, inside its cell folder."""
INTERNAL_PORT_PLACEHOLDER = "<internal port>"
CACHE_PLACEHOLDER = "<fresh cache>"
KEYED_PLACEHOLDER = "<keyed cache>"
GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Isolated:
    """A launch with its own caches and ports, and what cell.json records of them."""

    launch: CellLaunch
    record: dict[str, Any]
    """cell.json's `isolation`: JSON values, read back by `describe_isolation`."""
    cache_root: Path | None
    """The folder to remove once the engine has stopped (None: nothing was made)."""
    lease: Lease | None = None
    """The keyed cache folder this launch holds until its engine has stopped."""

    def finish(self, ready: bool, max_gib: float) -> list[str]:
        """After the engine stopped: fresh caches removed; a keyed folder kept as filled if the
        engine became `ready` (else dropped), and the least recently used beyond `max_gib`
        evicted. The keyed folders evicted."""
        release(self.cache_root)
        return self.lease.finish(ready, int(max_gib * GIB)) if self.lease is not None else []


def isolate(launch: CellLaunch, config: MatrixConfig, ports: PortBook | None, cell_dir: Path | None,
            results_dir: Path, source_sha: str | None = None) -> Isolated:
    """`launch` with its internal ports and its caches (`engine.cache`). With `ports` and
    `cell_dir` None (a plan) it shows placeholders and touches nothing; otherwise the caches are
    made or held (and fixed cache folders emptied) now, right before the launch. Keyed caches
    live beside `results_dir` unless `engine.cache_dir` says where; `source_sha` is the cell's
    tree (None: none, or not resolved yet in a plan)."""
    isolation = launch.profile.isolation
    mode = cache_mode(config, launch.profile)
    if mode == "keyed" and not isolation.cache_env:
        raise ConfigError(f"engine.cache: keyed needs a variable that moves the caches of {launch.profile.name}, "
                          "whose profile names none (use fresh or engine)")
    argv, env = list(launch.argv), dict(launch.env)
    record: dict[str, Any] = {}
    given: dict[str, str] = {}
    for spec in isolation.internal_ports:
        if not spec.when(launch.cell.settings) or spec.flag in argv:
            continue
        port = str(ports.take_block(launch.host, spec.span)) if ports else INTERNAL_PORT_PLACEHOLDER
        given[spec.flag] = spec.value.format(port=port, host=launch.host)
        argv += [spec.flag, given[spec.flag]]
    if given:
        record["internal_ports"] = given
    cache_root, lease = None, None
    if mode == "keyed" and all(name in launch.env for name in isolation.cache_env):
        mode = "fresh"  # the config sets every cache variable itself: nothing to key (recorded as kept)
    if mode == "keyed":
        lease, caches, made = _keyed_caches(launch, config, cell_dir, results_dir, source_sha)
        if lease is None and cell_dir is not None:  # another launch holds the folder: fresh ones instead
            cache_root, caches, fresh = _fresh_caches(launch, cell_dir)
            made = {**fresh, "cache": {**made["cache"], "mode": "fresh", "hit": None, "path": None}}
        env.update(caches)
        record.update(made)
    elif mode == "fresh":
        cache_root, caches, made = _fresh_caches(launch, cell_dir)
        env.update(caches)
        record.update(made, **({"cache": {"mode": "fresh"}} if caches else {}))
    else:
        record["cache"] = {"mode": "engine"}
    return Isolated(dataclasses.replace(launch, argv=argv, env=env), record, cache_root, lease)


def _keyed_caches(launch: CellLaunch, config: MatrixConfig, cell_dir: Path | None, results_dir: Path,
                  source_sha: str | None) -> tuple[Lease | None, dict[str, str], dict[str, Any]]:
    """(the folder held, the cache variables to set, what to record); no folder held in a plan,
    or when another launch holds it (then `why` says so and the caller makes fresh ones)."""
    isolation = launch.profile.isolation
    root = caches_root(config, results_dir)
    key = cache_key(launch, config, source_sha)
    moved = [name for name in isolation.cache_env if name not in launch.env]
    kept = {name: launch.env[name] for name in isolation.cache_env if name in launch.env}
    emptied = list(isolation.fixed_cache_dirs)
    cache: dict[str, Any] = {"mode": "keyed", "key": key.digest, "path": str(root / key.digest)}
    if cell_dir is None:
        cache["hit"] = would_hit(root, key)
        if launch.cell.source is not None and source_sha is None:
            cache["why"] = "the source is not resolved yet: its commit is part of the key"
        lease, where = None, KEYED_PLACEHOLDER
    else:
        lease = acquire(root, key)
        if lease is None:
            return None, {}, {"cache": {**cache, "why": f"keyed folder {key.digest} in use by another launch"}}
        cache["hit"], where = lease.hit, str(lease.path)
        emptied = [_empty(Path(folder).expanduser()) for folder in isolation.fixed_cache_dirs]
    env = {name: f"{where}/{name}" for name in moved}
    if lease is not None:
        for name in moved:
            Path(env[name]).mkdir(exist_ok=True)
    made = {"cache": cache, "cache_env": env, "emptied": emptied, "kept": kept}
    return lease, env, {k: v for k, v in made.items() if v}


def _fresh_caches(launch: CellLaunch, cell_dir: Path | None) -> tuple[Path | None, dict[str, str], dict[str, object]]:
    """(the folder to remove after the launch, the cache variables to set, what to record)."""
    isolation = launch.profile.isolation
    kept = {name: launch.env[name] for name in isolation.cache_env if name in launch.env}
    moved = [name for name in isolation.cache_env if name not in kept]
    root = cell_dir / CACHE_FOLDER if cell_dir is not None and moved else None
    where = str(root) if root is not None else CACHE_PLACEHOLDER
    env = {name: f"{where}/{name}" for name in moved}
    if cell_dir is None:
        emptied = list(isolation.fixed_cache_dirs)
    else:
        release(root)
        for name in moved:
            Path(env[name]).mkdir(parents=True)
        emptied = [_empty(Path(folder).expanduser()) for folder in isolation.fixed_cache_dirs]
    record: dict[str, object] = {"cache_env": env, "emptied": emptied}
    if moved:
        record["cache_root"] = where
    if kept:
        record["kept"] = kept
    return root, env, {k: v for k, v in record.items() if v}


def _empty(folder: Path) -> str:
    """Remove what `folder` holds (not the folder, nothing a symlink inside points at)."""
    if folder.is_dir() and not folder.is_symlink():
        for entry in folder.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    return str(folder)


def release(cache_root: Path | None) -> None:
    """Remove a launch's fresh caches (after its engine stopped, or a previous attempt's)."""
    if cache_root is not None and cache_root.exists():
        shutil.rmtree(cache_root, ignore_errors=True)


def shared_resources(config: MatrixConfig, cell: Cell) -> dict[str, str]:
    """What a cell's launch would hold that no flag or variable gives it alone: resource -> why.
    The local executor never runs two cells holding one of them side by side."""
    isolation = get_profile(config.engine.profile).isolation
    held = {f"port {p.port}": f"{config.engine.profile} binds port {p.port} ({p.why})"
            for p in isolation.fixed_ports if p.when(cell.settings)}
    if cache_mode(config, get_profile(config.engine.profile)) != "engine":
        for folder in isolation.fixed_cache_dirs:
            held[f"cache {folder}"] = (f"{config.engine.profile} keeps its compile cache in {folder}, which no variable "
                                       "moves and which evalkit empties before each launch")
    return held


def describe_isolation(isolated: Isolated, shared: dict[str, str]) -> list[str]:
    """What `evalkit plan` says of a launch's caches and shared host resources, one line each."""
    record = isolated.record
    cache = dict(record.get("cache") or {})
    if cache.get("mode") == "keyed":
        said = "would hit" if cache.get("hit") else "would miss (filled by the first launch)"
        lines = [f"cache:  keyed {cache['key']}, {said}"]
        lines += [f"cache:  {name} in {cache['path']}" for name in dict(record.get("cache_env") or {})]
        lines += [f"cache:  {cache['why']}"] if cache.get("why") else []
    else:
        lines = [f"cache:  {name}={where} (empty at each launch, removed after)"
                 for name, where in dict(record.get("cache_env") or {}).items()]
    lines += [f"cache:  {folder} emptied before each launch (no variable moves it)"
              for folder in list(record.get("emptied") or [])]
    lines += [f"cache:  {name}={value} as the config sets it (not made fresh)"
              for name, value in dict(record.get("kept") or {}).items()]
    lines += [f"shared: {why}: never side by side with another cell that needs it" for why in shared.values()]
    return lines
