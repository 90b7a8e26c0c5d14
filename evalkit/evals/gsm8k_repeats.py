"""GSM8K run again on the same engine (`evals.gsm8k.repeats`): every run, the worst, the spread,
and the questions that flip between runs (the noise floor).

A bug that shows in some runs only (ATOM's DP-attention + PIECEWISE + speculative entry failed
one nightly in four, issue 39) passes a single run most nights; the worst of k runs sees it with
probability 1 - (1 - p)^k (`stats.power.repeats_needed`, which `evalkit plan` prints). The
repeats share the cell's engine: a failure that comes with an engine start, not with a run, is
caught by re-running the cell (`evalkit calibrate`), not by these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from evalkit.evals.base import Comparison, EvalContext, EvalResult, MetricDisplay, MetricSpec
from evalkit.evals.units import SHARE
from evalkit.store.files import write_jsonl

SHORT = {"strict": "strict-match", "flexible": "flexible-extract"}
"""Both lm-eval filters: the short key of their metrics, their name in a samples row."""


def repeat(run: Callable[[EvalContext], EvalResult], repeats: int, ctx: EvalContext, first: EvalResult) -> dict[str, Any]:
    """Run GSM8K again on the same engine: every run's accuracy (whose worst and spread `flat`
    reports, `repeat_figures`) and the questions that flip between runs, the noise floor.

    Several real configuration bugs were nondeterministic, and so are some healthy engines: a
    delta no larger than re-running the same cell is not a regression, and a bug that shows in
    one run in four is seen by the worst of eight runs 89.99% of the time, of nine 92.5%
    (stats/power.py `repeats_needed`).
    """
    from evalkit.stats.tests import noise_floor

    runs = [first]
    for i in range(2, repeats + 1):
        result = run(dataclasses.replace(ctx, progress=ctx.progress.labelled(f"gsm8k repeat {i}")))
        write_jsonl(ctx.cell_dir / f"gsm8k.repeat{i}.samples.jsonl", result.samples)
        runs.append(result)
    floors = {}
    for short, name in SHORT.items():
        marks = [{row["id"]: row[f"{name}.correct"] for row in r.samples} for r in runs]
        ids = [row["id"] for row in first.samples if all(m.get(row["id"]) is not None for m in marks)]  # scored in all
        floors[short] = noise_floor([[bool(m[i]) for i in ids] for m in marks], ids=ids).to_dict()
    return {"n": len(runs), "accuracy": [{"strict": r.metrics["strict"], "flexible": r.metrics["flexible"]} for r in runs],
            "noise_floor": floors}


def repeat_figures(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's repeats as flat metrics: how many, and per filter every run's accuracy, the worst
    and the spread (best - worst); {} without repeats. Read from the runs' accuracies, so runs
    stored before the worst was reported get it too."""
    runs = (raw.get("repeats") or {}).get("accuracy") or []
    if len(runs) < 2:
        return {}
    out: dict[str, Any] = {"gsm8k.repeats": len(runs)}
    for short in SHORT:
        every = [float(run[short]) for run in runs]
        out |= {f"gsm8k.{short}_repeats": every, f"gsm8k.{short}_worst": min(every),
                f"gsm8k.{short}_spread": max(every) - min(every)}
    return out


def _worst_text(flat: Mapping[str, Any]) -> str:
    worst, every = flat.get("gsm8k.flexible_worst"), flat.get("gsm8k.flexible_repeats")
    if worst is None or not every:
        return "-"
    return (f"{worst:.3f} of {len(every)} (spread {flat['gsm8k.flexible_spread'] * 100:.1f} pts: "
            f"{' '.join(f'{v:.3f}' for v in every)})")


WORST = MetricSpec(
    "gsm8k.flexible_worst", Comparison.CONTINUOUS,
    MetricDisplay("GSM8K flexible, worst repeat", key="flexible_worst", column="GSM8K worst repeat (spread: every run)",
                  text=_worst_text), unit=SHARE)
"""With `repeats`: the lowest flexible accuracy of the cell's runs, which a `min` threshold gates
(an intermittent failure lowers the worst run, not the first)."""
