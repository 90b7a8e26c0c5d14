"""How likely one cell's long generations are under another cell's model (divergence `generations`).

Token soup written in one script ("diaeftry Sransself") has nothing the text signals of the
collapse detector can see, but a healthy model finds it far less likely than its own output. The
divergence eval already scores texts teacher-forced; with ``generations: N`` a cell also scores,
with the same requests, long generations of the repetition eval:

* those of every other cell of the run that finished its repetition eval before this cell's
  divergence eval ran (up to N per cell, the collapsed ones first, then in prompt order);
* its own generation for each of those prompts, the healthy reference.

Each scored text's mean per-token logprob goes to ``divergence.generations.jsonl`` in the scoring
cell's folder, one row per (cell, prompt). Between a cell and its reference, `rise` reads the
reference's file: for the prompts scored both ways, the mean over prompts of (the reference's own
text's mean logprob - this cell's text's), in nats per token: how much less likely this cell's
outputs are under the reference's model than the reference's own outputs (~0 for a healthy cell,
several nats for soup). Only a reference that ran after the cell can say; otherwise, or where the
reference scored nothing (its engine serves no logprobs, as ATOM's does not), the comparison is
refused, "not checked", never passed. The plan runs the baseline cell last when the setting is on
(`capabilities.ReadsEarlierCells`); cells run in parallel may still overlap it.

The generation is scored alone, as a document (its prompt is not sent): both texts of a pair are
scored the same way, so the difference is the model's view of the text, not of the prompt.

Per text the row also holds ``worst_nll``, the repetition eval's model-signal statistic (the
worst 64-token window's NLL, evals/model_signal.py) under the reference's model, and `rise` names
the cell's texts whose worst window exceeds the median of the reference's own by the signal's
margin (``improbable``): the baseline's per-sample view of what each cell's own engine judged.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from evalkit.evals.base import EvalContext
from evalkit.evals.model_signal import ModelSignalSettings, worst_window
from evalkit.evals.prompts import Prompt
from evalkit.store.files import read_jsonl

FILE = "divergence.generations.jsonl"
SOURCE = "repetition"
"""The eval whose generations are scored (its samples' ``text`` and ``collapsed``)."""


def _picked(rows: Iterable[Mapping[str, Any]], n: int) -> list[Mapping[str, Any]]:
    """Up to ``n`` rows with text: the collapsed ones first, then the others, each in file order."""
    rows = [row for row in rows if row.get("text")]
    return ([row for row in rows if row.get("collapsed")] + [row for row in rows if not row.get("collapsed")])[:n]


def texts_to_score(ctx: EvalContext, n: int) -> list[tuple[str, Mapping[str, Any]]]:
    """(cell id, repetition sample) to score in this cell: up to ``n`` of every other cell whose
    repetition samples exist in the run folder, and this cell's own for each of their prompts."""
    own_result = ctx.earlier.get(SOURCE)
    if own_result is None:
        return []
    me = ctx.cell_dir.name
    picked: list[tuple[str, Mapping[str, Any]]] = []
    for cell_dir in sorted(path for path in ctx.run_dir.iterdir() if path.is_dir() and path.name != me):
        samples = cell_dir / f"{SOURCE}.samples.jsonl"
        if samples.is_file():
            picked += [(cell_dir.name, row) for row in _picked(read_jsonl(samples), n)]
    wanted = {row["id"] for _, row in picked}
    own = [(me, row) for row in own_result.samples if row["id"] in wanted and row.get("text")]
    return own + picked


def score_generations(ctx: EvalContext, n: int,
                      score: Callable[[list[Prompt]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Score the generations `texts_to_score` picks with ``score`` (the divergence eval's
    teacher-forced requests, rows in the order given); one row per text: its cell, prompt id,
    whether the detector called it collapsed, positions scored, mean logprob and worst-window NLL."""
    chosen = texts_to_score(ctx, n)
    if not chosen:
        return []
    items = [Prompt(f"{cell}/{row['id']}", "generation", str(row["text"])) for cell, row in chosen]
    out = []
    window = ModelSignalSettings().window
    for (cell, row), scored in zip(chosen, score(items)):
        values = [v for v in scored["logprobs"] if v is not None]
        out.append({"cell": cell, "id": row["id"], "collapsed": bool(row.get("collapsed")), "n_tokens": len(values),
                    "mean_logprob": math.fsum(values) / len(values) if values else None,
                    "worst_nll": worst_window([-v for v in values], window)[0] if values else None})
    return out


@functools.lru_cache(maxsize=8)
def _rows(path: Path, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    return tuple(read_jsonl(path))


def rise(this_dir: Path, ref_dir: Path) -> dict[str, Any]:
    """The pairwise value of ``divergence.generation_nll_rise``: this cell's generations under the
    reference's model against the reference's own (module docstring), or a refusal saying why
    it was not checked."""
    this, ref = this_dir.name, ref_dir.name
    path = ref_dir / FILE
    if not path.is_file():
        return {"diff": None, "p_value": None,
                "refused": f"not checked: {ref} scored no generations (no logprobs served, or divergence.generations off there)"}
    rows = _rows(path, path.stat().st_mtime_ns)
    theirs = {row["id"]: row for row in rows if row["cell"] == this and row["mean_logprob"] is not None}
    own = {row["id"]: row for row in rows if row["cell"] == ref and row["mean_logprob"] is not None}
    shared = [pid for pid in theirs if pid in own]
    if not shared:
        return {"diff": None, "p_value": None,
                "refused": f"not checked: {ref} ran before {this}'s generations existed, so its model never scored them"}
    gaps = [own[pid]["mean_logprob"] - theirs[pid]["mean_logprob"] for pid in shared]
    value = math.fsum(gaps) / len(gaps)
    collapsed = [gap for pid, gap in zip(shared, gaps) if theirs[pid]["collapsed"]]
    own_worst = [own[pid]["worst_nll"] for pid in shared if own[pid].get("worst_nll") is not None]
    line = statistics.median(own_worst) + ModelSignalSettings().margin if own_worst else None
    improbable = [pid for pid in shared if line is not None and (theirs[pid].get("worst_nll") or 0) > line]
    return {"diff": value, "value": value, "p_value": None, "texts": len(shared),
            "mean_logprob": math.fsum(theirs[pid]["mean_logprob"] for pid in shared) / len(shared),
            "ref_mean_logprob": math.fsum(own[pid]["mean_logprob"] for pid in shared) / len(shared),
            "collapsed_texts": len(collapsed), "collapsed_rise": math.fsum(collapsed) / len(collapsed) if collapsed else None,
            "improbable": improbable, "improbable_line": line,
            "least_likely": sorted(({"id": pid, "rise": gap} for pid, gap in zip(shared, gaps)), key=lambda w: -w["rise"])[:5]}
