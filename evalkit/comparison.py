"""Two runs of the same matrix, before and after a change: per cell, B - A with its tests.

Cells are matched by id and questions by id, so a run with `--limit` pairs with a full run on
the questions both answered. Every registered eval's compared metrics: paired marks with
McNemar's exact test, counts with a two-sided Fisher exact test (a change may go either way).
Rendering is in render/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.evals import recorded, registry
from evalkit.evals.base import Comparison, MetricSpec, setup_differences
from evalkit.redact import redact_argv
from evalkit.store import read_run_cells
from evalkit.verdicts import delta, flat_metrics, measured_by_both, refused, setup_of


def _b_minus_a(spec: MetricSpec, a_dir: Path, b_dir: Path, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """B - A of one metric (verdicts.delta); counts take the two-sided p, as a change may go either way."""
    found = delta(spec, b_dir, a_dir, b, a)
    if found is None or spec.comparison in (Comparison.CONTINUOUS, Comparison.PAIRWISE):
        return found
    if spec.comparison is Comparison.COUNT:
        return {"diff": found["diff"], "p_value": found["p_two_sided"], "p_greater": found["p_greater"]}
    return {k: v for k, v in found.items() if not k.startswith("right_only") and k != "both_right"}


def _run_meta(run: dict[str, Any], cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    shas = sorted({sha for c in cells.values() if (sha := (c.get("source") or {}).get("sha"))})
    return {"run_id": run.get("run_id"), "model": run.get("model"), "engine": run.get("engine"),
            "started_at": run.get("started_at"), "status": run.get("status"), "limit": run.get("limit"),
            "simulated": run.get("simulated", False), "source_shas": shas,
            "command": redact_argv(run["command"]) if run.get("command") else None}


def compare_runs(a_path: Path, b_path: Path) -> dict[str, Any]:
    """Per cell (matched by id), B - A of every compared metric (GSM8K strict/flexible, collapse rate).

    Paired metrics use McNemar's exact test on the questions both runs answered; counts use
    Fisher's exact test. Cells found in only one run are listed with `in` = "a" or "b". An eval
    whose setup differs between the runs (endpoint, n-shot, lm-eval version, ...) is not
    compared: its deltas say `setup_differs` with the fields, and the row lists them.
    """
    run_a, listed_a = read_run_cells(a_path)
    run_b, listed_b = read_run_cells(b_path)
    cells_a, cells_b = {c["id"]: c for c in listed_a}, {c["id"]: c for c in listed_b}
    out = []
    for cell_id in list(dict.fromkeys([*cells_a, *cells_b])):
        a, b = cells_a.get(cell_id), cells_b.get(cell_id)
        row: dict[str, Any] = {"id": cell_id, "axes": (a or b or {}).get("axes", {}),
                               "in": "both" if a and b else "a" if a else "b",
                               "status_a": a["status"] if a else None, "status_b": b["status"] if b else None,
                               "a": flat_metrics(a) if a else {}, "b": flat_metrics(b) if b else {}}
        if a and b and a["status"] == b["status"] == "ok":
            specs = registry.metrics(None, [a, b])
            for ev in registry.evals():
                differs = setup_differences(setup_of(a, ev.name), setup_of(b, ev.name))
                if differs:
                    row.setdefault("setup_differs", {})[ev.name] = differs
                for spec in (spec for spec in specs if registry.eval_of(spec.name) is ev):
                    if spec.comparison is Comparison.NONE:
                        continue
                    both = measured_by_both(spec, row["a"], row["b"])
                    row[spec.name] = (refused(differs) if differs and both
                                      else _b_minus_a(spec, a_path / cell_id, b_path / cell_id, row["a"], row["b"]))
        out.append(row)
    specs = registry.metrics(None, [*listed_a, *listed_b])
    return {"a": _run_meta(run_a, cells_a), "b": _run_meta(run_b, cells_b), "metrics": recorded.records(specs),
            "cells": out}
