"""Engine profiles: how one engine's command line, readiness and log lines look.

A profile is data plus one small function (`flags`) that turns a cell's logical settings into that
engine's flags. Adding an engine is one short module that builds a `Profile` and one line in
`PROFILES`; nothing else in evalkit knows engine flag names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from evalkit.config import EngineSettings
from evalkit.errors import ConfigError


@dataclass(frozen=True)
class Launch:
    """What every profile needs to know to build an argv, besides the cell's settings."""

    python: str
    model: str
    served_name: str
    host: str
    port: int | str
    """An int at run time; a placeholder such as `<port>` when only planning."""


@dataclass(frozen=True)
class Profile:
    """One engine's launch and readiness conventions."""

    name: str
    entrypoint: tuple[str, ...]
    """argv prefix; `{python}` is replaced by the configured interpreter."""
    flags: Callable[[EngineSettings, Launch], list[str]]
    health_path: str = "/health"
    fatal_patterns: tuple[str, ...] = ()
    """Log regexes that mean the engine is broken even if the process lives (fail the cell at once)."""
    effective_mode_pattern: str | None = None
    """Log regex with a `mode` group: the graph mode the engine really chose (engines rewrite modes)."""
    supports_token_ids: bool = False
    """Whether completions accept `return_tokens_as_token_ids` (exact ids for the detector)."""
    settings_supported: frozenset[str] = field(default_factory=frozenset)
    """EngineSettings fields the flag map understands; any other one set is a config error."""
    visibility_env: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)
    """Variables that restrict the engine to the devices evalkit gives a cell."""

    def argv(self, settings: EngineSettings, launch: Launch, extra_args: list[str] | tuple[str, ...]) -> list[str]:
        """The full argv: entry point, the profile's flags, then the config's own args."""
        unsupported = set(settings.model_dump(exclude_none=True)) - self.settings_supported - {"devices"}
        if unsupported:
            raise ConfigError(
                f"profile {self.name}: does not support setting(s) {', '.join(sorted(unsupported))} "
                f"(supported: {', '.join(sorted(self.settings_supported)) or 'none'}; use args instead)"
            )
        head = [part.replace("{python}", launch.python) for part in self.entrypoint]
        return head + self.flags(settings, launch) + list(extra_args)


def get_profile(name: str) -> Profile:
    """The built-in profile called `name`."""
    from evalkit.profiles import atom, command, sglang, sim, vllm

    profiles = {p.name: p for p in (atom.PROFILE, sim.PROFILE, command.PROFILE, vllm.PROFILE, sglang.PROFILE)}
    if name not in profiles:
        raise ConfigError(f"engine.profile: unknown profile {name!r} (known: {', '.join(sorted(profiles))})")
    return profiles[name]
