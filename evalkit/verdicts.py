"""Stored cells -> comparisons, broken thresholds and the run's summary (summary.json).

Comparisons are paired, on the questions both cells answered: each cell against the baseline
cell, and each fix-off cell against its fix-on twin (the A/B axis). Accuracy deltas use McNemar's
exact test, collapse rates Fisher's exact test (see stats.py). A threshold with `alpha` counts
a delta only when it is significant, so noise on a small `--limit` does not fail a nightly job.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig, Threshold
from evalkit.errors import EXIT_CELL_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_THRESHOLD
from evalkit.matrix import twin_axes
from evalkit.stats import fisher_collapse, paired_comparison, proportion
from evalkit.store import read_jsonl, read_run_cells

FILTERS = {"strict": "strict-match", "flexible": "flexible-extract"}


def question_order(qid: str) -> tuple[int, str]:
    """Sort key of question ids ("test-12" after "test-9"); ids without a number go first."""
    tail = qid.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else -1, qid)


def marks(cell_dir: Path, filter_name: str) -> dict[str, bool]:
    """Question id -> right or wrong under one lm-eval filter, from a cell's GSM8K samples."""
    column = list(FILTERS.values()).index(filter_name)
    return {qid: pair[column] for qid, pair in _marks_file(cell_dir / "gsm8k.samples.jsonl").items()}


def _marks_file(path: Path) -> dict[str, tuple[bool, ...]]:
    """Both filters' marks of a samples file ({} when absent), read once per state of the file:
    each cell is compared with the baseline and with its twin, and the baseline with all."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return {}
    return _read_marks(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _read_marks(path: Path, mtime_ns: int, size: int) -> dict[str, tuple[bool, ...]]:
    return {row["id"]: tuple(bool(row[f"{f}.correct"]) for f in FILTERS.values()) for row in read_jsonl(path)}


def flat_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """A cell's headline metrics under stable dotted names (the summary.json contract)."""
    g = record.get("metrics", {}).get("gsm8k") or {}
    r = record.get("metrics", {}).get("repetition") or {}
    out: dict[str, Any] = {}
    if g:
        out |= {"gsm8k.strict": g["strict"], "gsm8k.flexible": g["flexible"], "gsm8k.n": g["n"],
                "gsm8k.strict_stderr": g.get("strict_stderr"), "gsm8k.flexible_stderr": g.get("flexible_stderr"),
                "gsm8k.cut_by_max_gen_toks": g.get("cut_by_max_gen_toks"), "gsm8k.retries": g.get("retries")}
        for short in FILTERS:
            p = proportion(round(g[short] * g["n"]), g["n"])
            out[f"gsm8k.{short}_ci95"] = [p.low, p.high]
    if r:
        out |= {"repetition.collapse_rate": r["collapse_rate"], "repetition.n": r["n"],
                "repetition.collapsed": r["collapsed"]}
        if r.get("n"):
            p = proportion(r["collapsed"], r["n"])
            out["repetition.collapse_rate_ci95"] = [p.low, p.high]
    return out


def compare(cell: dict[str, Any], ref: dict[str, Any], run_path: Path) -> dict[str, Any]:
    """Paired deltas of `cell` against `ref` (cell - ref) on the shared questions."""
    result: dict[str, Any] = {"reference": ref["id"]}
    for short, filter_name in FILTERS.items():
        a, b = marks(run_path / cell["id"], filter_name), marks(run_path / ref["id"], filter_name)
        shared = sorted(set(a) & set(b), key=question_order)
        if not shared:
            continue
        p = paired_comparison([a[i] for i in shared], [b[i] for i in shared], ids=shared)
        floors = [c["metrics"]["gsm8k"]["repeats"]["noise_floor"][short]["max_pairwise_diff"]
                  for c in (cell, ref) if "repeats" in (c["metrics"].get("gsm8k") or {})]
        result[f"gsm8k.{short}"] = {
            "diff": p.diff, "p_value": p.p_value, "ci95": [p.low, p.high], "n": p.n,
            "noise_floor": max(floors) if floors else None,
            "right_only_in_cell": p.a_only, "right_only_in_reference": p.b_only,
            "flipped_to_wrong": list(p.b_only_ids), "flipped_to_right": list(p.a_only_ids),
        }
    rc, rr = cell["metrics"].get("repetition"), ref["metrics"].get("repetition")
    if rc and rr and rc.get("n") and rr.get("n"):
        f = fisher_collapse(rc["collapsed"], rc["n"], rr["collapsed"], rr["n"])
        result["repetition.collapse_rate"] = {"diff": f.diff, "p_value": f.p_greater, "p_two_sided": f.p_two_sided,
                                              "new_collapses": _new_collapses(run_path / cell["id"], run_path / ref["id"])}
    return result


def _new_collapses(cell_dir: Path, ref_dir: Path, limit: int = 50) -> list[dict[str, Any]]:
    """Prompts collapsed in the cell but not in the reference, with the first token where the
    two greedy outputs diverge: what the reference did instead, and how early the cell left it."""
    from evalkit.evals.detector import split_text

    def rows(d: Path, keep: Callable[[dict[str, Any]], bool]) -> dict[str, dict[str, Any]]:
        path = d / "repetition.samples.jsonl"  # streamed: only the rows needed are kept
        return {row["id"]: row for row in read_jsonl(path) if keep(row)} if path.is_file() else {}

    cell = rows(cell_dir, lambda row: bool(row.get("collapsed")))
    ref = rows(ref_dir, lambda row: row["id"] in cell) if cell else {}
    out = []
    for prompt_id, row in cell.items():
        other = ref.get(prompt_id)
        if other is None or other.get("collapsed"):
            continue
        a, b = split_text(row.get("text", "")), split_text(other.get("text", ""))
        n = min(len(a), len(b))
        mismatch = (a[:n] != b[:n]).nonzero()[0]
        diverge = int(mismatch[0]) if len(mismatch) else n
        out.append({"id": prompt_id, "diverge_at_token": diverge, "onset": (row.get("evidence") or {}).get("onset")})
        if len(out) == limit:
            break
    return out


def _check(threshold: Threshold, cell: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The broken-threshold flag for one cell, or None if the rule holds (or does not apply)."""
    check, limit, metric = threshold.check, threshold.value, threshold.metric
    label = metric.replace("gsm8k.", "GSM8K ").replace("repetition.collapse_rate", "collapse rate")
    if check in ("min", "max"):
        value = metrics.get(metric)
        if value is None or (value >= limit if check == "min" else value <= limit):
            return None
        words = f"{cell['id']}: {label} {value:.3f} {'<' if check == 'min' else '>'} {check} {limit:g}"
        return {"metric": metric, "check": check, "limit": limit, "value": value, "action": threshold.action,
                "message": words}
    against = "vs_baseline" if check.endswith("vs_baseline") else "vs_ab"
    delta = (cell.get(against) or {}).get(metric)
    if delta is None:
        return None
    change = -delta["diff"] if check.startswith("max_drop") else delta["diff"]
    if change <= limit:
        return None
    if delta.get("noise_floor") is not None and abs(delta["diff"]) <= delta["noise_floor"]:
        return None  # no larger than re-running the same cell moved it: not a regression
    p = delta["p_value"]
    if threshold.alpha is not None and not p < threshold.alpha:
        return None
    ref_id = cell[against]["reference"]
    ref_word = "baseline" if against == "vs_baseline" else "fix-on twin"
    test = "McNemar" if metric.startswith("gsm8k") else "Fisher"
    value = metrics.get(metric)
    words = (f"{cell['id']}: {label} {value:.3f} vs {ref_word} {ref_id} "
             f"{value - delta['diff']:.3f}, {delta['diff'] * 100:+.1f} points, {test} p = {p:.2g}")
    if threshold.alpha is not None:
        words += f" < {threshold.alpha:g}"
    return {"metric": metric, "check": check, "limit": limit, "value": value, "diff": delta["diff"],
            "p_value": p, "reference": ref_id, "action": threshold.action, "message": words}


def summarize(run_path: Path, config: MatrixConfig) -> dict[str, Any]:
    """The whole run's verdict from what is stored; the same function serves `report`."""
    run, cells = read_run_cells(run_path)
    baseline = next((c for c in cells if config.baseline and c.get("axes") == config.baseline), None)
    rows = []
    for cell in cells:
        row: dict[str, Any] = {"id": cell["id"], "axes": cell.get("axes", {}), "status": cell["status"]}
        if cell.get("error"):
            row["error"] = cell["error"]["message"]
        row["metrics"] = flat_metrics(cell)
        ok = cell["status"] == "ok"
        if ok and baseline and baseline["status"] == "ok" and baseline["id"] != cell["id"]:
            row["vs_baseline"] = compare(cell, baseline, run_path)
        wanted = twin_axes(cell.get("axes", {}), config) if ok else None
        twin = next((c for c in cells if c.get("axes") == wanted), None) if wanted else None
        if twin and twin["status"] == "ok":
            row["vs_ab"] = compare(cell, twin, run_path)
        row["flags"] = [f for t in config.thresholds if ok and (f := _check(t, row, row["metrics"]))]
        row["effective_mode"] = cell.get("effective_mode")
        row["source"] = cell.get("source")
        row["timings"] = cell.get("timings", {})
        rows.append(row)
    failed = sum(1 for r in rows if r["status"] == "error")
    not_run = sum(1 for r in rows if r["status"] not in ("ok", "error"))
    broken = sum(1 for r in rows for f in r["flags"] if f["action"] == "fail")
    warned = sum(1 for r in rows for f in r["flags"] if f["action"] == "warn")
    if run.get("status") == "interrupted":
        code = EXIT_INTERRUPTED
    elif failed or not_run:
        code = EXIT_CELL_FAILED
    elif broken:
        code = EXIT_THRESHOLD
    else:
        code = EXIT_OK
    return {
        "run_id": run["run_id"],
        "model": run["model"],
        "engine": run["engine"],
        "simulated": run.get("simulated", False),
        "status": run.get("status"),
        "started_at": run.get("started_at"),
        "finished_at": run.get("finished_at"),
        "command": run.get("command"),
        "listen_host": run.get("listen_host"),
        "baseline": baseline["id"] if baseline else None,
        "ab": config.ab.model_dump() if config.ab else None,
        "cells": rows,
        "failed_cells": failed,
        "not_run_cells": not_run,
        "broken_thresholds": broken,
        "warnings": warned,
        "exit_code": code,
    }
