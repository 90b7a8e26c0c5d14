"""One lm-eval task's output -> evalkit's raw metrics and per-question records, and the hashes
of what a task's score depends on (its YAML files, its data).

Per question (one samples row per document, ``id`` = ``<task>-<doc_id>``) every score's value
is kept under ``<task>.<key>``; a score whose values are all 0/1 and average to lm-eval's own
score is marked paired (McNemar between cells), anything else (F1, BLEU, a corpus-level
aggregation) is compared as a continuous value.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evalkit.evals.base import EvalResult
from evalkit.evals.lm_eval_adapter import lm_eval_version
from evalkit.evals.lm_eval_backends import ResponseMeta, prompt_key
from evalkit.evals.lm_eval_catalogue import TaskInfo
from evalkit.store import file_hash


def files_hash(files: Iterable[Path]) -> str:
    """A task's YAML chain plus the Python helpers beside it (`!function utils.process_docs`)."""
    paths = list(dict.fromkeys(files))
    paths += sorted({py for f in paths for py in f.parent.glob("*.py")})
    return file_hash(*paths)


def data_hash(paths: list[Path]) -> str:
    """The data files' bytes (a dataset folder: every file under it, in name order)."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file()))]
    return file_hash(*files) if files else "none"


def _number(value: Any) -> float | None:
    """lm-eval writes "N/A" or nan for a stderr it cannot compute (n < 2)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def score_keys(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(evalkit key, lm-eval metric, filter) per score in lm-eval's results of one task; the key
    carries the filter only when the task has several (as `TaskInfo.keys`)."""
    pairs = [tuple(k.split(",", 1)) for k in results if "," in k and "_stderr," not in k]
    filters = {f for _, f in pairs}
    return [(m if len(filters) == 1 else f"{m}.{f}", m, f) for m, f in pairs]


def collect(out: dict[str, Any], meta: ResponseMeta, info: TaskInfo, wrapper: str) -> EvalResult:
    """Raw metrics (scores, stderrs, which are paired, n, version, shots) and one row per question."""
    results = out["results"][wrapper]
    keys = score_keys(results)
    by_doc: dict[int, dict[str, Any]] = {}
    for s in out["samples"][wrapper]:
        prompt = s["arguments"][0][0] if isinstance(s["arguments"][0], (list, tuple)) else s["arguments"][0]
        text = getattr(prompt, "prompt", prompt)
        row = by_doc.setdefault(s["doc_id"], {
            "id": f"{info.name}-{s['doc_id']}", "task": info.name, "doc_id": s["doc_id"],
            "prompt_hash": hashlib.sha256(str(text).encode()).hexdigest()[:16],
            "target": str(s["target"]), "response": s["resps"][0][0],
            **meta.by_prompt.get(prompt_key(prompt), {}),
        })
        row[f"{s['filter']}.extracted"] = s["filtered_resps"][0]
        for key, metric, filt in keys:
            if filt == s["filter"] and metric in s:
                row[f"{info.name}.{key}"] = s[metric]
    rows = [by_doc[k] for k in sorted(by_doc)]
    scores = {key: float(results[f"{m},{f}"]) for key, m, f in keys}
    paired = {}
    for key, _, _ in keys:
        values: list[Any] = [r.get(f"{info.name}.{key}") for r in rows]
        binary = bool(values) and all(v in (0, 1) for v in values)  # True/False are 0/1 too
        paired[key] = binary and abs(sum(values) / len(values) - scores[key]) < 1e-9
        if paired[key]:
            for r in rows:
                r[f"{info.name}.{key}"] = bool(r[f"{info.name}.{key}"])
    higher = out.get("higher_is_better", {}).get(wrapper, {})
    metrics: dict[str, Any] = {
        "scores": scores,
        "stderr": {key: _number(results.get(f"{m}_stderr,{f}")) for key, m, f in keys},
        "paired": paired,
        "higher_is_better": {key: bool(higher.get(m, True)) for key, m, _ in keys},
        "n": len(rows),
        "cut_by_max_gen_toks": sum(1 for r in rows if r.get("finish_reason") == "length"),
        "version": out.get("versions", {}).get(wrapper),
        "num_fewshot": out.get("n-shot", {}).get(wrapper),
        "lm_eval_version": lm_eval_version(),
    }
    return EvalResult(metrics, rows, texts=[(str(r["response"]), r.get("finish_reason")) for r in rows])
