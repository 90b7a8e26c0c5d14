"""The GPUs in words (issue 31): the box's provenance for the report header (run.json `gpus`),
and a cell's devices, telemetry and memory release for its drill-down (cell.json `gpu`)."""

from __future__ import annotations

from typing import Any


def box_text(gpus: dict[str, Any] | None) -> str:
    """`2x NVIDIA H200, driver 550.54.15, CUDA 12.4`; "" without a GPU record."""
    if not gpus:
        return ""
    names = sorted({str(d.get("name") or "?") for d in gpus.get("devices", [])}) or ["?"]
    parts = [f"{gpus.get('count', 0)}x {' + '.join(names)}"]
    if gpus.get("driver"):
        parts.append(f"driver {gpus['driver']}")
    if gpus.get("runtime_version"):
        parts.append(f"{gpus.get('runtime', '')} {gpus['runtime_version']}".strip())
    return ", ".join(parts)


def cell_rows(gpu: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(label, text) rows of a cell's GPU record: its UUIDs, per device peak memory and mean
    utilisation, and how long its memory took to come back (or who still held it)."""
    if not gpu:
        return []
    rows = [("GPUs", ", ".join(gpu.get("uuids") or []) or "?")]
    telemetry = gpu.get("telemetry") or {}
    if telemetry.get("devices"):
        per = "; ".join(f"GPU {d['index']}: peak {d['peak_used_mib']} MiB, mean util "
                        + ("?" if d.get("mean_util_pct") is None else f"{d['mean_util_pct']}%")
                        for d in telemetry["devices"])
        rows.append(("GPU telemetry", f"{per} ({telemetry.get('samples', 0)} samples)"))
    release = gpu.get("release")
    if release:
        said = (f"given back in {release['wait_s']} s" if release.get("released") else
                f"NOT given back after {release['wait_s']} s, held by "
                + ("; ".join(f"pid {h['pid']} {h['name']} ({h.get('used_mib')} MiB on GPU {h['device']})"
                             for h in release.get("held", [])) or "no process listed"))
        rows.append(("GPU memory after stop", said))
    return rows
