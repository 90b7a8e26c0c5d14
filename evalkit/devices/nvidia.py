"""NVIDIA GPUs through `nvidia-smi`'s query interface (CSV, no header, no units: MiB and %).

Formats (nvidia-smi's `--help-query-gpu` / `--help-query-compute-apps`; e.g. the Telegraf
nvidia_smi input plugin, and `nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv`
as in NVIDIA's docs): one line per GPU, fields in the order asked, separated by `, `; a field the
GPU does not report reads `[N/A]` or `[Not Supported]`. The CUDA version the driver supports is only
in the banner of plain `nvidia-smi` (`CUDA Version: 12.4`).
"""

from __future__ import annotations

import csv
import io
import re

from evalkit.devices.model import DeviceProcess, DeviceState, Inventory, Snapshot, ToolFailed, number, run_tool

TOOL = "nvidia-smi"
GPU_FIELDS = "index,uuid,name,memory.used,memory.total,utilization.gpu,driver_version"
APP_FIELDS = "gpu_uuid,pid,process_name,used_memory"
CSV = "--format=csv,noheader,nounits"
CUDA_BANNER = re.compile(r"CUDA Version:\s*([0-9.]+)")


def _rows(text: str) -> list[list[str]]:
    return [[f.strip() for f in row] for row in csv.reader(io.StringIO(text), skipinitialspace=True) if row]


def parse_gpus(text: str) -> list[tuple[DeviceState, str, str]]:
    """(state, name, driver) per line of `--query-gpu=GPU_FIELDS`."""
    out = []
    for row in _rows(text):
        if len(row) != 7:
            raise ToolFailed(f"{TOOL} --query-gpu: {len(row)} fields in {','.join(row)!r}, expected 7")
        index, uuid, name, used, total, util, driver = row
        out.append((DeviceState(int(index), uuid, number(used) or 0.0, number(total), number(util)), name, driver))
    return out


def parse_apps(text: str, index_of: dict[str, int]) -> list[DeviceProcess]:
    """Compute processes of `--query-compute-apps=APP_FIELDS`, their GPU by index."""
    out = []
    for row in _rows(text):
        if len(row) != 4 or row[0] not in index_of:
            continue  # "No running processes found" is printed to stdout by old drivers
        uuid, pid, name, used = row
        out.append(DeviceProcess(int(pid), name, index_of[uuid], number(used)))
    return out


class NvidiaSmi:
    """The `Backend` of a box with `nvidia-smi` on PATH."""

    name = "nvidia-smi"

    def snapshot(self) -> Snapshot:
        gpus = [g for g, _, _ in parse_gpus(run_tool([TOOL, f"--query-gpu={GPU_FIELDS}", CSV]))]
        apps = parse_apps(run_tool([TOOL, f"--query-compute-apps={APP_FIELDS}", CSV]), {g.uuid: g.index for g in gpus})
        return Snapshot(gpus, apps)

    def inventory(self) -> Inventory:
        gpus = parse_gpus(run_tool([TOOL, f"--query-gpu={GPU_FIELDS}", CSV]))
        cuda = CUDA_BANNER.search(run_tool([TOOL]))
        return Inventory("NVIDIA", gpus[0][2] if gpus else None, "CUDA", cuda.group(1) if cuda else None,
                         [{"index": g.index, "uuid": g.uuid, "name": name, "total_mib": g.total_mib}
                          for g, name, _ in gpus])
