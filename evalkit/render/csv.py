"""CSV for pandas and spreadsheets: one row per cell, of a run or of two runs compared.

The columns come from the eval registry: each eval's compared metrics and `csv_fields` (a
`_ci95` pair split into `_low` and `_high`), and a diff and p-value per compared metric and
reference (a metric measured between two cells, PAIRWISE, has only these: no cell holds it). The column set depends only on the registry and the matrix axes (absent values are
empty), so CSVs of different runs concatenate. Text a spreadsheet would run as a formula is
defused (text.csv_safe).
"""

from __future__ import annotations

import io
from typing import Any

from evalkit.evals import registry
from evalkit.evals.base import Comparison, Eval
from evalkit.render.compare_table import flip_specs, flips
from evalkit.render.engine_log import checks_text
from evalkit.render.table import AGAINST
from evalkit.render.text import csv_safe, strip_userinfo


def _compared(ev: Eval) -> list[str]:
    return [spec.name for spec in ev.metrics if spec.comparison is not Comparison.NONE]


def _per_cell(ev: Eval) -> list[str]:
    """The compared metrics a cell holds itself (not those measured between two cells)."""
    return [spec.name for spec in ev.metrics if spec.comparison not in (Comparison.NONE, Comparison.PAIRWISE)]


def _flat_fields() -> list[str]:
    """Each eval's compared per-cell metrics, then the rest of its csv_fields."""
    return list(dict.fromkeys(name for ev in registry.evals() for name in [*_per_cell(ev), *ev.csv_fields]))


def _flat_columns(metrics: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _flat_fields():
        value = metrics.get(name)
        if name.endswith("_ci95"):
            low, high = value if value else (None, None)
            out[f"{name}_low"], out[f"{name}_high"] = low, high
        else:
            out[name] = value
    return out


def _to_csv(records: list[dict[str, Any]]) -> str:
    import pandas as pd  # here, not at the top: half a second that only CSV needs

    buffer = io.StringIO()
    pd.DataFrame.from_records([{k: csv_safe(v) for k, v in rec.items()} for rec in records]).to_csv(
        buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


def records(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per cell: axes, status, source, flat metrics, deltas and p-values, flags."""
    axes = list(dict.fromkeys(a for c in summary["cells"] for a in c.get("axes", {})))
    compared = [name for ev in registry.evals() for name in _compared(ev)]
    out = []
    for cell in summary["cells"]:
        src = cell.get("source") or {}
        rec: dict[str, Any] = {"run_id": summary["run_id"], "model": summary["model"], "engine": summary["engine"],
                               "started_at": summary.get("started_at"), "cell": cell["id"]}
        rec |= {f"axis.{a}": cell.get("axes", {}).get(a) for a in axes}
        rec |= {"status": cell["status"], "error": cell.get("error"),
                "source_repo": strip_userinfo(src.get("repo") or "") or None, "source_ref": src.get("ref"),
                "source_sha": src.get("sha"), "engine_version": cell.get("engine_version"),
                "import_origin": (cell.get("imports") or {}).get("origin"),
                "effective_mode": cell.get("effective_mode"),
                "ran_as_asked": (cell.get("ran_as") or {}).get("agrees"),
                "log_checks": checks_text(cell.get("log_checks"))}
        rec |= _flat_columns(cell["metrics"])
        for against, _ in AGAINST:
            comparison = cell.get(against) or {}
            rec[f"{against}.reference"] = comparison.get("reference")
            for metric in compared:
                delta = comparison.get(metric) or {}
                rec[f"{against}.{metric}.diff"] = delta.get("diff")
                rec[f"{against}.{metric}.p_value"] = delta.get("p_value")
        for check in cell.get("checks") or []:
            key = f"check.{check['threshold'] + 1}"
            rec |= {f"{key}.outcome": check["outcome"], f"{key}.p": check.get("p"), f"{key}.p_adj": check.get("p_adj"),
                    f"{key}.mde": check.get("mde")}
        flags = cell.get("flags", [])
        rec |= {"broken": sum(f["action"] == "fail" for f in flags), "warnings": sum(f["action"] == "warn" for f in flags),
                "flags": "; ".join(f["message"] for f in flags) or None,
                "total_s": (cell.get("timings") or {}).get("total_s")}
        out.append(rec)
    return out


def _sample_count(ev: Eval) -> list[str]:
    """`<eval>.n`, the number of questions or samples every eval's flat metrics carry, if its CSV has it."""
    return [f"{ev.name}.n"] if f"{ev.name}.n" in ev.csv_fields else []


def compare_records(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per cell: A and B headline metrics, B − A deltas, p-values, flip counts."""
    headline = [name for ev in registry.evals() for name in [*_per_cell(ev), *_sample_count(ev)]]
    compared = [name for ev in registry.evals() for name in _compared(ev)]
    several = len(flip_specs()) > 1
    out = []
    for row in result["cells"]:
        rec: dict[str, Any] = {"cell": row["id"], "in": row["in"], "status_a": row["status_a"],
                               "status_b": row["status_b"]}
        for side in ("a", "b"):
            rec |= {f"{side}.{name}": row[side].get(name) for name in headline}
        for metric in compared:
            delta = row.get(metric) or {}
            rec[f"delta.{metric}"], rec[f"p.{metric}"] = delta.get("diff"), delta.get("p_value")
        for spec in flip_specs():
            paired, suffix = flips(row, spec), f".{spec.name}" if several else ""
            rec |= {f"paired_n{suffix}": paired["n"] if paired else None,
                    f"flipped_to_wrong{suffix}": len(paired["flipped_to_wrong"]) if paired else None,
                    f"flipped_to_right{suffix}": len(paired["flipped_to_right"]) if paired else None}
        out.append(rec)
    return out


def report(summary: dict[str, Any]) -> str:
    return _to_csv(records(summary))


def compare(result: dict[str, Any]) -> str:
    return _to_csv(compare_records(result))
