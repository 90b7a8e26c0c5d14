"""What a profile says about an engine's state outside its argv: caches and internal ports.

Two launches of one engine on one host share whatever the engine keeps at a fixed place: a
compile cache keyed on less than what changed between cells (ATOM's torch.compile cache key
ignores cudagraph_mode), or a port its workers rendezvous on (ATOM's MASTER_PORT and DP master
port). A profile names them here, and engine/isolation.py gives each launch its own: cache
folders through the variables that move them (empty, or kept under evalkit's own key of what
decides their contents: engine/caches.py), and internal ports from evalkit's port book through
the flags that set them. What no flag or variable moves is named too, so the local executor can
refuse to run two cells that would share it side by side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evalkit.config import EngineSettings


def always(settings: EngineSettings) -> bool:
    """The condition of what every launch needs, whatever its settings."""
    return True


def data_parallel(settings: EngineSettings) -> bool:
    """A launch with more than one data-parallel rank (DP, or DP attention)."""
    return bool(settings.dp_attention) or (settings.data_parallel or 1) > 1


@dataclass(frozen=True)
class InternalPort:
    """A port the engine binds besides its HTTP port, and the flag that sets it."""

    flag: str
    """The engine flag, e.g. ATOM's `--port` (its MASTER_PORT)."""
    value: str = "{port}"
    """The flag's value; `{port}` and `{host}` are filled (`{host}:{port}` for an address)."""
    span: int = 1
    """Consecutive ports the engine derives from it (port .. port+span-1), all kept free."""
    when: Callable[[EngineSettings], bool] = always
    """Whether a launch with these settings binds it at all."""


@dataclass(frozen=True)
class FixedPort:
    """A port the engine binds that neither a flag nor a variable moves (at some of its versions)."""

    port: int
    why: str
    """Where it is fixed (file@ref): said when two cells are kept from running side by side."""
    when: Callable[[EngineSettings], bool] = always


@dataclass(frozen=True)
class Isolation:
    """An engine's caches and internal ports (the profile's `isolation`)."""

    cache_env: tuple[str, ...] = ()
    """Variables that move the engine's caches: each launch sets each to an empty folder, or to
    one kept under evalkit's key (`engine.cache: keyed`, the default when there is one)."""
    compile_env: tuple[str, ...] = ()
    """Prefixes of inherited variables that reach the engine's compilation (`VLLM_`, `TORCH`):
    part of a keyed cache's key with the variables the launch sets (engine/caches.py)."""
    fixed_cache_dirs: tuple[str, ...] = ()
    """Cache folders that no variable moves (`~` is the user's home): emptied before each launch,
    as the engine's own CI does, and never in use by two cells at once."""
    internal_ports: tuple[InternalPort, ...] = ()
    fixed_ports: tuple[FixedPort, ...] = field(default_factory=tuple)
