"""The simulator's compile cache: a cold start compiles and writes its artifact, a warm one loads it.

A real engine spends minutes of its start-up in torch.compile and keeps what it built in a cache
folder a variable moves (vLLM's VLLM_CACHE_ROOT). The simulator does the same in miniature, so
evalkit's keyed caches (engine/caches.py) are tested end to end on a real process:
`--sim-compile-seconds S` of simulated compilation, and with `EVALKIT_SIM_CACHE` set (the variable
the `sim` profile names) an artifact `compiled-<hash>.json` in that folder, which a later start
finds and loads instead of compiling. Without the variable nothing is cached and nothing written.

The artifact's hash covers the flags the simulator compiles for except the graph mode, as ATOM's
torch.compile cache key does (atom/config.py:222-240 at 0e9804c21, `CompilationConfig.compute_hash`
leaves out `cudagraph_mode`): an artifact built for another mode is loaded all the same, and the
log line says which mode it was built for. Only a cache folder keyed by evalkit keeps modes apart.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from evalkit.sim.config import ServerConfig

CACHE_ENV = "EVALKIT_SIM_CACHE"


def compile_step(config: ServerConfig, log: Callable[[str], None]) -> bool:
    """Load the artifact for `config`'s flags from the cache folder, or compile and write it;
    whether it was loaded (a warm start)."""
    cell = config.cell
    flags = {"model": config.model, "tp": cell.tp, "dp": cell.dp, "dp_attention": cell.dp_attention,
             "expert_parallel": cell.expert_parallel, "fix": cell.fix, "max_model_len": config.max_model_len}
    digest = hashlib.sha256(json.dumps(flags, sort_keys=True).encode()).hexdigest()[:16]
    folder = os.environ.get(CACHE_ENV)
    path = Path(folder) / f"compiled-{digest}.json" if folder else None
    if path is not None and path.is_file():
        built = json.loads(path.read_text(encoding="utf-8")).get("graph_mode")
        log(f"sim: compile cache hit {path} (built for graph mode {built}, running {cell.graph_mode})")
        return True
    seconds = config.timing.compile_seconds
    if seconds > 0:
        log(f"sim: compiling (simulated, {seconds:g} s)")
        time.sleep(seconds)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"graph_mode": cell.graph_mode, "flags": flags}, sort_keys=True), encoding="utf-8")
        tmp.replace(path)
        log(f"sim: compile cache miss, wrote {path}")
    return False
