"""Before spending engine-hours: what each threshold of a config could detect at its n.

`evalkit plan` prints, per threshold, the n it will be checked on (questions, generations; a
`--limit` caps them, as the run would), the MDE at the threshold's alpha and power (stats/power.py), and
the n its margin needs. The MDE depends on what the engine does between two runs: the share of
questions that flip (paired marks) and the base rate of events (counts). Measured values come from
`evalkit calibrate` (its calibrate.json); otherwise the stated assumptions below are used, and the
lines say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig, Threshold
from evalkit.config.cells import expand
from evalkit.config.thresholds import ThresholdKind
from evalkit.evals.base import Comparison, Eval
from evalkit.evals.evalset import EvalSet
from evalkit.evals.prompts import load_prompt_set
from evalkit.stats.power import (
    equivalence_margin,
    equivalence_n,
    fisher_mde,
    fisher_n,
    mcnemar_mde,
    mcnemar_n,
)
from evalkit.verdict.checks import rule_text
from evalkit.verdict.floors import floor_line

ASSUMED_DISCORDANCE = 0.03
"""Share of questions flipping between two healthy cells when nothing was measured: about what
batch-variant numerics flip (the simulator's ~3% per layout, README "What the demo prints")."""
ASSUMED_BASE_RATE = 0.0
"""Events (collapses) per sample in a healthy cell when nothing was measured: none, the most
optimistic MDE (a real base rate makes it larger)."""


@dataclass(frozen=True)
class Noise:
    """What the MDEs assume: per metric, the discordance or base rate, and where it came from."""

    discordance: dict[str, float]
    base_rate: dict[str, float]
    source: str
    level: dict[str, float] = field(default_factory=dict)
    """Per metric, the calibrated cell's mean: the expected value a floor's line weighs."""


def noise_from(calibration: Path | None) -> Noise:
    """The measured noise of a calibrate.json, or none (the assumptions apply)."""
    if calibration is None:
        return Noise({}, {}, "assumed")
    from evalkit.store import read_json

    found = read_json(calibration)
    disc = {m["metric"]: m["flip_rate"] for m in found.get("metrics", []) if m.get("flip_rate") is not None}
    rates = {m["metric"]: sum(m["values"]) / len(m["values"]) for m in found.get("metrics", [])
             if m.get("counts") and m.get("values")}
    level = {m["metric"]: sum(m["values"]) / len(m["values"]) for m in found.get("metrics", []) if m.get("values")}
    return Noise(disc, rates, f"measured by calibrate ({calibration})", level)


def planned_n(config: MatrixConfig, metric: str, limit: int | None) -> int | None:
    """Questions or samples the metric's eval will score per cell: its `count` or `limit`
    setting, else all its data holds (`data_size`), capped by --limit (as the run caps them)."""
    ev = config.evals.evalset.eval_of(metric)
    if ev is None:
        return None
    settings = getattr(config.evals, ev.name, None)
    n = getattr(settings, "count", None) or getattr(settings, "limit", None) or data_size(ev, settings)
    if n is None:
        return limit
    return min(n, limit) if limit else n


def data_size(ev: Eval, settings: Any | None = None) -> int | None:
    """The most questions or samples `ev` can score per cell: its fixed size (GSM8K's 1319), else
    the prompt set its settings (or their default) name: the repetition check's 72 long prompts.
    No n a verdict asks for may exceed it (issue 38: "n 1502" on 1319 questions)."""
    if ev.size is not None:
        return ev.size
    field = ev.settings_model.model_fields.get("prompt_set")
    name = getattr(settings, "prompt_set", None) or (field.default if field is not None else None)
    return len(load_prompt_set(name).prompts) if isinstance(name, str) else None


def _pts(x: float | None) -> str:
    return "out of reach" if x is None else f"{x * 100:.1f} points"


def _needed(n: int | None) -> str:
    return "out of reach" if n is None else str(n)


def threshold_line(threshold: Threshold, n: int | None, noise: Noise, evals: EvalSet) -> str:
    """One threshold's power at n, in one line (`evals`: its config's, which know their data's size)."""
    head = rule_text(threshold)
    spec = threshold.spec
    if n is None or spec is None:
        return f"{head}: n unknown"
    alpha, power, margin = threshold.alpha, threshold.power, threshold.value
    if alpha is None or spec.comparison not in (Comparison.PAIRED, Comparison.COUNT):
        return f"{head}: no test (a change beyond {spec.unit.describe_change(margin, signed=False)} and the noise floor fails)"
    target = threshold.detects or margin  # a detect-only check is powered for the change it exists to catch
    if spec.comparison is Comparison.PAIRED:
        d = noise.discordance.get(threshold.metric, ASSUMED_DISCORDANCE)
        what = f"{d:.1%} of questions flipping between healthy runs ({'assumed' if threshold.metric not in noise.discordance else 'measured'})"
        if threshold.kind is ThresholdKind.EQUIVALENT:
            mde, needed = equivalence_margin(n, d, alpha, power), equivalence_n(margin, d, alpha, power)
            kind = "smallest margin TOST shows"
        else:
            mde, needed = mcnemar_mde(n, d, alpha, power), mcnemar_n(target, d, alpha, power)
            kind = "MDE"
    else:
        r = noise.base_rate.get(threshold.metric, ASSUMED_BASE_RATE)
        what = f"base rate {r:.1%} ({'assumed' if threshold.metric not in noise.base_rate else 'measured'})"
        mde, needed, kind = fisher_mde(n, n, r, alpha, power), fisher_n(target, r, alpha, power), "MDE"
    bar = threshold.detects if threshold.detects is not None else margin * threshold.inconclusive_factor
    verdict = "INCONCLUSIVE expected on a healthy cell" if mde is None or mde > bar else "a healthy cell can PASS"
    if threshold.detects is not None:
        verdict = f"detect-only, the {_pts(threshold.detects)} it exists to catch {_n_asked(needed, threshold, evals)}: {verdict}"
    else:
        verdict = f"margin {_pts(margin)} {_n_asked(needed, threshold, evals)}; {verdict}"
    return f"{head}: n {n}, {kind} {_pts(mde)} at power {power:.0%} ({what}); {verdict}"


def _n_asked(needed: int | None, threshold: Threshold, evals: EvalSet) -> str:
    """`needs n 180`, or that the n is more than the eval's data holds (never an n it cannot have)."""
    ev = evals.eval_of(threshold.metric)
    size = data_size(ev) if ev is not None else None
    if needed is not None and size is not None and needed > size:
        return f"would need n {needed}, more than the {size} the data holds"
    return f"needs n {_needed(needed)}"


def plan_lines(config: MatrixConfig, limit: int | None, noise: Noise) -> list[str]:
    """The power section of `evalkit plan`: a header, then a line per threshold."""
    if not config.thresholds:
        return []
    head = (f"# power per threshold ({'--limit ' + str(limit) if limit else 'full evals'}; noise {noise.source}; "
            f"p-values adjusted across cells: {config.multiplicity})")
    cells = len(expand(config))
    return [head, *(f"#   {line}" for t in config.thresholds
                    for line in [floor_line(t, planned_n(config, t.metric, limit), cells, config.multiplicity,
                                            noise.level.get(t.metric), noise.source) if t.kind.own_value
                                 else threshold_line(t, planned_n(config, t.metric, limit), noise, config.evals.evalset)])]
