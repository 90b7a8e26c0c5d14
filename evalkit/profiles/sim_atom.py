"""evalkit's simulated engine speaking ATOM's dialect (`python -m evalkit.sim --sim-dialect atom`).

Everything a real ATOM engine shows evalkit, as the `atom` profile reads it (its finish-reason
map, log reader, settings and fatal patterns are imported from profiles/atom.py, so the two
cannot drift), behind the simulator's entry point: ATOM's finish reasons and stream ending, no
logprobs or token ids, no `/version`, no `/metrics` but ATOM's `[MTP Stats ...]` log lines under speculative
decoding (evalkit/sim/atom_wire.py and sim/mtp.py say where each was read). So a test of evalkit against this profile is a test against what ATOM sends. It runs on
the CPU and its runs are marked as simulated, like the `sim` profile's. It has none of ATOM's
`isolation`: the simulator keeps no compile cache, so nothing of a user's `~/.cache/atom` is touched.
"""

from __future__ import annotations

from evalkit.config import EngineSettings
from evalkit.profiles import Launch, Profile
from evalkit.profiles.atom import (
    ATOM_FATAL_PATTERNS,
    ATOM_FINISH_REASONS,
    ATOM_SETTINGS,
    atom_flags,
    atom_settings,
    read_atom_log,
    read_mtp_log,
)


def sim_atom_flags(settings: EngineSettings, launch: Launch) -> list[str]:
    """ATOM's flags, plus the switch that makes the simulator speak ATOM's dialect."""
    return [*atom_flags(settings, launch), "--sim-dialect", "atom"]


PROFILE = Profile(
    name="sim-atom",
    entrypoint=("{python}", "-m", "evalkit.sim"),
    flags=sim_atom_flags,
    health_path="/health",
    fatal_patterns=ATOM_FATAL_PATTERNS,
    read_log=read_atom_log,
    settings_supported=ATOM_SETTINGS,
    finish_reasons=ATOM_FINISH_REASONS,
    uses_devices=False,
    simulated=True,
    spec_log=read_mtp_log,
    catalog_flags=atom_settings,
)
