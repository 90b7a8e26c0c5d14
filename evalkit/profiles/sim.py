"""evalkit's simulated engine: ATOM's flag map with another entry point (`python -m evalkit.sim`).

It runs on the CPU, so it needs no device lock, and its runs are marked as simulated. It reports
what vLLM reports, under vLLM's names (`/version`, `/metrics`; see profiles/vllm.py), and it is
scraped as an external server too: nobody else's requests reach a simulator a test started.
It prints ATOM's own start-up lines (evalkit/sim/startup.py), so ATOM's log reader reads it.
Its top package is evalkit's own; a config whose source tree holds the simulator's fix module
(`--sim-fix-module simfix`) names that module as `engine.package`, the package the tree provides.
"""

from __future__ import annotations

from evalkit.profiles import Profile
from evalkit.profiles.atom import (
    ATOM_FATAL_PATTERNS,
    ATOM_SETTINGS,
    atom_flags,
    read_atom_log,
)
from evalkit.profiles.vllm import VLLM_METRICS

PROFILE = Profile(
    name="sim",
    entrypoint=("{python}", "-m", "evalkit.sim"),
    flags=atom_flags,
    health_path="/health",
    fatal_patterns=ATOM_FATAL_PATTERNS,
    read_log=read_atom_log,
    supports_token_ids=True,
    settings_supported=ATOM_SETTINGS,
    uses_devices=False,
    simulated=True,
    version_path="/version",
    metrics_path="/metrics",
    metric_names=VLLM_METRICS,
    scrape_external=True,
    package="evalkit",
)
