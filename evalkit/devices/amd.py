"""AMD GPUs through `amd-smi ... --json`.

Formats (ROCm/amdsmi, amdsmi_cli/amdsmi_commands.py and amdsmi_logger.py `_print_json_output`):
a JSON list with one object per GPU (`"gpu": N`); amd-smi 7.x wraps that list as
`{"gpu_data": [...]}`, so both are read. Quantities are `{"value": V, "unit": U}` (memory in `MB`,
which amd-smi computes as MiB, or `B`), or the string `N/A`.

- `metric --mem-usage --usage --json`: `mem_usage.used_vram` / `total_vram`, `usage.gfx_activity` (%);
- `process --json`: `process_list` of `{"process_info": {"name", "pid", "memory_usage": {"vram_mem"}}}`,
  or `{"process_info": "No running processes detected"}`;
- `list --json`: `uuid` per GPU; `static --asic --driver --json`: `asic.market_name`, `driver.version`;
- `version --json`: `rocm_version`.
"""

from __future__ import annotations

import json
from typing import Any

from evalkit.devices.model import DeviceProcess, DeviceState, Inventory, Snapshot, ToolFailed, number, run_tool

TOOL = "amd-smi"
MIB = {"B": 1 / 2**20, "KB": 1 / 1024, "KIB": 1 / 1024, "MB": 1.0, "MIB": 1.0, "GB": 1024.0, "GIB": 1024.0}


def entries(text: str) -> list[dict[str, Any]]:
    """The per-GPU objects of an amd-smi JSON answer, wrapped (7.x) or not."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolFailed(f"{TOOL}: not JSON ({e})") from e
    if isinstance(data, dict):
        data = data.get("gpu_data", [data])
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def mib(quantity: Any) -> float | None:
    """A `{"value", "unit"}` memory quantity in MiB (a bare number is bytes); None for `N/A`."""
    if isinstance(quantity, dict):
        value = number(str(quantity.get("value")))
        factor = MIB.get(str(quantity.get("unit", "B")).upper())
        return None if value is None or factor is None else value * factor
    value = number(str(quantity))
    return None if value is None else value / 2**20


def _pct(quantity: Any) -> float | None:
    return number(str(quantity.get("value") if isinstance(quantity, dict) else quantity))


def parse_metric(text: str, uuids: dict[int, str]) -> list[DeviceState]:
    out = []
    for e in entries(text):
        mem, usage = e.get("mem_usage") or {}, e.get("usage") or {}
        mem, usage = (mem if isinstance(mem, dict) else {}), (usage if isinstance(usage, dict) else {})
        index = int(e["gpu"])
        out.append(DeviceState(index, uuids.get(index, str(index)), mib(mem.get("used_vram")) or 0.0,
                               mib(mem.get("total_vram")), _pct(usage.get("gfx_activity"))))
    return out


def parse_processes(text: str) -> list[DeviceProcess]:
    out = []
    for e in entries(text):
        for item in e.get("process_list") or []:
            info = item.get("process_info") if isinstance(item, dict) else None
            if not isinstance(info, dict) or "pid" not in info:
                continue  # "No running processes detected"
            memory = info.get("memory_usage")
            memory = memory if isinstance(memory, dict) else {}
            out.append(DeviceProcess(int(info["pid"]), str(info.get("name", "?")), int(e["gpu"]),
                                     mib(memory.get("vram_mem", info.get("mem_usage")))))
    return out


class AmdSmi:
    """The `Backend` of a box with `amd-smi` on PATH."""

    name = "amd-smi"

    def _uuids(self) -> dict[int, str]:
        return {int(e["gpu"]): str(e.get("uuid", e["gpu"])) for e in entries(run_tool([TOOL, "list", "--json"]))}

    def snapshot(self) -> Snapshot:
        metric = run_tool([TOOL, "metric", "--mem-usage", "--usage", "--json"])
        return Snapshot(parse_metric(metric, self._uuids()), parse_processes(run_tool([TOOL, "process", "--json"])))

    def inventory(self) -> Inventory:
        uuids = self._uuids()
        static = {int(e["gpu"]): e for e in entries(run_tool([TOOL, "static", "--asic", "--driver", "--json"]))}
        states = {d.index: d for d in parse_metric(run_tool([TOOL, "metric", "--mem-usage", "--json"]), uuids)}
        version = entries(run_tool([TOOL, "version", "--json"]))
        driver = next((s.get("driver", {}).get("version") for s in static.values() if isinstance(s.get("driver"), dict)),
                      None)
        devices = [{"index": i, "uuid": uuids[i], "name": (static.get(i, {}).get("asic") or {}).get("market_name"),
                    "total_mib": states[i].total_mib if i in states else None} for i in sorted(uuids)]
        return Inventory("AMD", driver, "ROCm", version[0].get("rocm_version") if version else None, devices)
