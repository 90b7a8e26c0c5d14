"""evalkit's simulated engine: ATOM's flag map with another entry point (`python -m evalkit.sim`).

It runs on the CPU, so it needs no device lock, and its runs are marked as simulated. It reports
what vLLM reports, under vLLM's names (`/version`, `/metrics`; see profiles/vllm.py), and it is
scraped as an external server too: nobody else's requests reach a simulator a test started.
It prints ATOM's own start-up lines (evalkit/sim/startup.py), so ATOM's log reader reads it.
Its compile cache (evalkit/sim/compiled.py) is moved by `EVALKIT_SIM_CACHE`, so its launches get
keyed caches by default like vLLM's, and inherited `EVALKIT_SIM_*` variables are part of the key.
Its top package is evalkit's own; a config whose source tree holds the simulator's fix module
(`--sim-fix-module simfix`) names that module as `engine.package`, the package the tree provides.

Topologies (docs/simulator.md, "Disaggregated and multi-node"): a PD worker takes ATOM's
`--kv-transfer-config` (the `atom` profile's spelling, `atom_worker_flags`); the router is
`python -m evalkit.sim.router` with atomesh's launch flags (no Prometheus port: it serves
`/metrics` itself); ranks across nodes take vLLM's `--nnodes/--node-rank/--master-addr/--master-port`
(the `vllm` profile's spelling, `vllm_rank_flags`, `--headless` above rank 0).
"""

from __future__ import annotations

from evalkit.profiles import Profile
from evalkit.profiles.atom import (
    ATOM_FATAL_PATTERNS,
    ATOM_SETTINGS,
    atom_flags,
    atom_worker_flags,
    atom_worker_ports,
    read_atom_log,
)
from evalkit.profiles.isolation import Isolation
from evalkit.profiles.topology import PartContext, TopologySpelling
from evalkit.profiles.vllm import VLLM_METRICS, vllm_rank_flags


def sim_router(ctx: PartContext) -> list[str]:
    """The simulator's router, atomesh's flags (docs/simulator.md)."""
    return [ctx.python, "-m", "evalkit.sim.router", "--host", ctx.host, "--port", str(ctx.port), "--pd-disaggregation",
            *ctx.peer_flags()]


SIM_TOPOLOGY = TopologySpelling(
    read_at="docs/simulator.md (the simulator's own flags: ATOM ffdf3bb5d for PD, vLLM 0.32.0 for ranks)",
    worker_flags=atom_worker_flags,
    worker_ports=atom_worker_ports,
    rank_flags=vllm_rank_flags,
    rank_ports={"master": 1},
    router=sim_router,
)

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
    topology=SIM_TOPOLOGY,
    isolation=Isolation(cache_env=("EVALKIT_SIM_CACHE",), compile_env=("EVALKIT_SIM_",)),
)
