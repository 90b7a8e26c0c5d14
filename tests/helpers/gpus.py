"""Fake `nvidia-smi` and `amd-smi` for CPU machines: they print the vendors' real output formats
(evalkit/devices/nvidia.py and amd.py cite them) for a box described by a JSON state file.

The state (`EVALKIT_FAKE_GPU`, written by `install`) names the GPUs and who holds memory on them:
- `foreign`: processes of someone else (pid, name, gpu, mib), optionally only `until` a time;
- every live process whose command line contains `engine_match` (the simulator, evalkit's engine
  here) holds `engine_mib` on each of `engine_gpus` at `engine_util` %, and keeps holding it for
  `linger_s` after it exits: a worker stuck in the driver after its leader stopped. The fake sees
  an engine only when it is run, so the pids it saw are kept beside the state file.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

NVIDIA_BANNER = """Sat Dec  5 01:52:06 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: {driver}      CUDA Version: {cuda}     |
|-----------------------------------------+------------------------+----------------------+
"""


def install(bin_dir: Path, state_path: Path, state: dict[str, Any], tool: str) -> dict[str, str]:
    """Write the fake `tool` into `bin_dir` and the state; the environment to run with it first on PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / tool
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                   f"import gpus\ngpus.main({tool!r}, sys.argv[1:])\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    write_state(state_path, state)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "EVALKIT_FAKE_GPU": str(state_path)}


def write_state(path: Path, state: dict[str, Any]) -> None:
    path.write_text(json.dumps(state))
    path.with_suffix(".foreign.json").unlink(missing_ok=True)  # a new box: no snapshot has decided anything yet


def _engines(state: dict[str, Any], seen_path: Path) -> list[tuple[int, str]]:
    """(pid, name) of engine processes alive now or exited less than `linger_s` ago."""
    seen: dict[str, list[Any]] = json.loads(seen_path.read_text()) if seen_path.is_file() else {}
    now = time.time()
    match = state.get("engine_match")
    if match:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if match in cmd and "fake_gpu" not in cmd:
                seen[entry.name] = [Path(cmd.split()[0]).name, now]
    seen_path.write_text(json.dumps(seen))
    return [(int(pid), name) for pid, (name, t) in seen.items() if now - t <= state.get("linger_s", 0)]


def holders(state: dict[str, Any], seen_path: Path) -> list[dict[str, Any]]:
    """Every process holding memory now: {pid, name, gpu, mib, util}."""
    now = time.time()
    out = [dict(f, util=f.get("util", 0)) for f in state.get("foreign", []) if f.get("until", now + 1) > now]
    for pid, name in _engines(state, seen_path):
        out += [{"pid": pid, "name": name, "gpu": g, "mib": state["engine_mib"], "util": state.get("engine_util", 0)}
                for g in state.get("engine_gpus", [0])]
    return out


def _used(state: dict[str, Any], procs: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(used MiB, util %) per GPU."""
    return [(g["base_mib"] + sum(p["mib"] for p in procs if p["gpu"] == i),
             max([p["util"] for p in procs if p["gpu"] == i], default=0)) for i, g in enumerate(state["gpus"])]


def nvidia(state: dict[str, Any], procs: list[dict[str, Any]], args: list[str]) -> str:
    gpus = state["gpus"]
    if not args:
        return NVIDIA_BANNER.format(driver=state["driver"], cuda=state["runtime"])
    if args[0].startswith("--query-gpu="):
        return "".join(f"{i}, {g['uuid']}, {g['name']}, {used:.0f}, {g['total_mib']}, {util:.0f}, {state['driver']}\n"
                       for i, (g, (used, util)) in enumerate(zip(gpus, _used(state, procs))))
    if args[0].startswith("--query-compute-apps="):
        return "".join(f"{gpus[p['gpu']]['uuid']}, {p['pid']}, {p['name']}, {p['mib']}\n" for p in procs)
    raise SystemExit(f"fake nvidia-smi: {args} not recorded")


def _mb(v: float) -> dict[str, Any]:
    return {"value": round(v), "unit": "MB"}


def amd(state: dict[str, Any], procs: list[dict[str, Any]], args: list[str]) -> str:
    gpus, cmd = state["gpus"], args[0]
    if cmd == "metric":
        rows: list[Any] = [{"gpu": i, "usage": {"gfx_activity": {"value": round(u), "unit": "%"},
                                                "umc_activity": {"value": 0, "unit": "%"}},
                            "mem_usage": {"total_vram": _mb(g["total_mib"]), "used_vram": _mb(used),
                                          "free_vram": _mb(g["total_mib"] - used)}}
                           for i, (g, (used, u)) in enumerate(zip(gpus, _used(state, procs)))]
    elif cmd == "process":
        rows = [{"gpu": i, "process_list": [
            {"process_info": {"name": p["name"], "pid": p["pid"],
                              "memory_usage": {"gtt_mem": {"value": 0, "unit": "B"}, "cpu_mem": {"value": 0, "unit": "B"},
                                               "vram_mem": {"value": p["mib"] * 2**20, "unit": "B"}},
                              "mem_usage": {"value": p["mib"] * 2**20, "unit": "B"}}}
            for p in procs if p["gpu"] == i] or [{"process_info": "No running processes detected"}]}
            for i in range(len(gpus))]
    elif cmd == "list":
        rows = [{"gpu": i, "bdf": f"0000:{0x0c + i:02x}:00.0", "uuid": g["uuid"], "kfd_id": 1000 + i}
                for i, g in enumerate(gpus)]
    elif cmd == "static":
        rows = [{"gpu": i, "asic": {"market_name": g["name"], "vendor_id": "0x1002"},
                 "driver": {"name": "amdgpu", "version": state["driver"]}} for i, g in enumerate(gpus)]
    elif cmd == "version":
        return json.dumps([{"tool": "AMDSMI Tool", "version": "24.6.2", "amdsmi_library_version": "24.6.2",
                            "rocm_version": state["runtime"]}], indent=4)
    else:
        raise SystemExit(f"fake amd-smi: {args} not recorded")
    return json.dumps({"gpu_data": rows} if state.get("wrapped") else rows, indent=4)


def _lists_processes(tool: str, args: list[str]) -> bool:
    """The call that lists processes, which evalkit makes right after the one reading memory
    (devices/nvidia.py and amd.py: one snapshot is those two calls)."""
    return args[:1] == ["process"] if tool == "amd-smi" else bool(args) and args[0].startswith("--query-compute-apps=")


def main(tool: str, args: list[str]) -> None:
    """One call of the fake `tool`. A snapshot's two calls agree, as one driver query would: the
    memory call decides which foreign processes are still there (their `until`) and records it;
    the process list that follows reads that decision. Decided by the clock per call instead, a
    process timed to leave 1 s in left between the two calls on a loaded box (each call a new
    interpreter, seconds apart): memory in use with no process listed, a state the test never set."""
    path = Path(os.environ["EVALKIT_FAKE_GPU"])
    state = json.loads(path.read_text())
    decided = path.with_suffix(".foreign.json")
    if _lists_processes(tool, args) and decided.is_file():
        kept = set(json.loads(decided.read_text()))
        state["foreign"] = [f for f in state.get("foreign", []) if f["pid"] in kept]
    procs = holders(state, path.with_suffix(".seen.json"))
    if not _lists_processes(tool, args):
        foreign = {f["pid"] for f in state.get("foreign", [])}
        decided.write_text(json.dumps(sorted(p["pid"] for p in procs if p["pid"] in foreign)))
    print(nvidia(state, procs, args) if tool == "nvidia-smi" else amd(state, procs, args), end="")
