"""CSV for pandas and spreadsheets: one row per cell, of a run or of two runs compared.

The columns come from the metrics the summary records: each eval's compared metrics and `csv_columns` (a
`_ci95` pair split into `_low` and `_high`), and a diff and p-value per compared metric and
reference (a metric measured between two cells, PAIRWISE, has only these: no cell holds it). The column set depends only on the run's metrics and the matrix axes (absent values are
empty), so CSVs of different runs concatenate. Text a spreadsheet would run as a formula is
defused (text.csv_safe).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evalkit.evals.base import Comparison, Eval, MetricSpec
from evalkit.evals.evalset import EvalSet, eval_name
from evalkit.redact import strip_userinfo
from evalkit.render.compare_table import flip_specs, flips
from evalkit.render.engine_log import checks_text
from evalkit.render.table import AGAINST
from evalkit.render.text import csv_safe, no_local_paths
from evalkit.verdict.summary import CheckRecord, RunComparison, RunSummary

if TYPE_CHECKING:
    from evalkit.render.details import Details

Share = tuple[str, Eval | None, tuple[MetricSpec, ...]]
"""One eval (its name, and its code where the run's evals have it) and its metrics among those a
summary or a comparison records."""


def _shares(specs: list[MetricSpec], evals: EvalSet) -> list[Share]:
    """Every eval of the run's set in order with its share of `specs` (none: an eval the run did
    not have), then those the set lacks (a plugin this process cannot import), as recorded."""
    names = dict.fromkeys([*(ev.name for ev in evals), *(eval_name(s.name) for s in specs)])
    return [(name, evals.get(name), tuple(s for s in specs if eval_name(s.name) == name)) for name in names]


def _csv(share: Share) -> list[str]:
    """The eval's CSV columns (`EvalDisplay.csv`); without its code, its recorded metrics."""
    _, ev, specs = share
    return list(ev.display.csv(specs)) if ev is not None else [spec.name for spec in specs]


def _compared(share: Share) -> list[str]:
    return [spec.name for spec in share[2] if spec.comparison is not Comparison.NONE]


def _per_cell(share: Share) -> list[str]:
    """The compared metrics a cell holds itself (not those measured between two cells)."""
    return [spec.name for spec in share[2] if spec.comparison not in (Comparison.NONE, Comparison.PAIRWISE)]


def _flat_fields(shares: list[Share]) -> list[str]:
    """Each eval's compared per-cell metrics, then the rest of its CSV columns."""
    return list(dict.fromkeys(name for share in shares for name in [*_per_cell(share), *_csv(share)]))


def _flat_columns(metrics: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in fields:
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


def records(summary: RunSummary) -> list[dict[str, Any]]:
    """One record per cell: axes, status, source, flat metrics, deltas and p-values, flags (local
    paths cut like every report's: summary.json keeps them whole)."""
    axes = list(dict.fromkeys(a for c in summary.cells for a in c.axes))
    shares = _shares(summary.specs(), summary.evals)
    compared = [name for share in shares for name in _compared(share)]
    fields = _flat_fields(shares)
    out = []
    for cell in summary.cells:
        src = cell.source
        rec: dict[str, Any] = {"run_id": summary.run_id, "model": summary.model, "engine": summary.engine,
                               "started_at": summary.started_at, "cell": cell.id}
        rec |= {f"axis.{a}": cell.axes.get(a) for a in axes}
        rec |= {"status": cell.status, "error": no_local_paths(cell.error) if cell.error else None,
                "source_repo": no_local_paths(strip_userinfo(src.repo or "")) or None if src else None,
                "source_ref": src.ref if src else None, "source_sha": src.sha if src else None,
                "engine_version": cell.engine_version, "import_origin": no_local_paths(cell.imports.origin or "") or None if cell.imports else None,
                "effective_mode": cell.effective_mode, "ran_as_asked": cell.ran_as.agrees if cell.ran_as else None,
                "log_checks": checks_text(cell.log_checks)}
        rec |= _flat_columns(cell.metrics, fields)
        for against, _ in AGAINST:
            deltas = cell.against(against)
            rec[f"{against}.reference"] = deltas.reference if deltas else None
            for metric in compared:
                delta = deltas.of(metric) if deltas else None
                rec[f"{against}.{metric}.diff"] = delta.diff if delta else None
                rec[f"{against}.{metric}.p_value"] = delta.p_value if delta else None
        rec |= check_columns(cell.checks)
        flags = cell.flags
        rec |= {"broken": sum(f.action == "fail" for f in flags), "warnings": sum(f.action == "warn" for f in flags),
                "flags": "; ".join(f.message for f in flags) or None, "total_s": cell.timings.get("total_s")}
        out.append(rec)
    return out


def check_columns(checks: Sequence[CheckRecord] | None) -> dict[str, Any]:
    """`check.<N>.outcome` (PASS, FAIL, INCONCLUSIVE, NOT_CHECKED), `.p`, `.p_adj`, `.mde` of each
    threshold checked on a run's cell or a compared cell; N counts the thresholds from 1."""
    out: dict[str, Any] = {}
    for check in checks or []:
        key = f"check.{check.threshold + 1}"
        out |= {f"{key}.outcome": check.outcome, f"{key}.p": check.p, f"{key}.p_adj": check.p_adj, f"{key}.mde": check.mde}
    return out


def _sample_count(share: Share) -> list[str]:
    """`<eval>.n`, the number of questions or samples every eval's flat metrics carry, if its CSV has it."""
    n = f"{share[0]}.n"
    return [n] if n in _csv(share) else []


def comparison_records(result: RunComparison) -> list[dict[str, Any]]:
    """One record per cell: A and B headline metrics, B − A deltas, p-values, flip counts, and
    B's checks against A (`check_columns`; rules numbered as B's config's delta thresholds)."""
    specs = result.specs()
    shares = _shares(specs, result.evals)
    headline = [name for share in shares for name in [*_per_cell(share), *_sample_count(share)]]
    compared = [name for share in shares for name in _compared(share)]
    several = len(flip_specs(specs)) > 1
    out = []
    for row in result.cells:
        rec: dict[str, Any] = {"cell": row.id, "in": row.found_in, "status_a": row.status_a, "status_b": row.status_b}
        for side, flat in (("a", row.a), ("b", row.b)):
            rec |= {f"{side}.{name}": flat.get(name) for name in headline}
        for metric in compared:
            delta = row.delta(metric)
            rec[f"delta.{metric}"], rec[f"p.{metric}"] = (delta.diff, delta.p_value) if delta else (None, None)
        for spec in flip_specs(specs):
            paired, suffix = flips(row, spec), f".{spec.name}" if several else ""
            rec |= {f"paired_n{suffix}": paired.n if paired else None,
                    f"flipped_to_wrong{suffix}": len(paired.flipped_to_wrong) if paired else None,
                    f"flipped_to_right{suffix}": len(paired.flipped_to_right) if paired else None}
        out.append(rec | check_columns(row.checks))
    return out


def report(summary: RunSummary, details: Details) -> str:
    """One row per cell; the run folder's details are not columns."""
    return _to_csv(records(summary))


def comparison(result: RunComparison) -> str:
    return _to_csv(comparison_records(result))
