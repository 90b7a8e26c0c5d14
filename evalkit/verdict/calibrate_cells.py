"""The noise calibrate's gates will face, measured where they will face it (issue 47 item 4).

A gate that compares across cells (`max_drop_ab`, `max_drop_vs_baseline`, a consistency or
divergence rise) faces the spread between healthy cells of one run: other layouts flip ~3% of
GSM8K questions and part a few identical requests even when nothing is broken. Repeats of one
cell measure none of that (the simulator's repeats of tp8-full-fixon flip no question at all), and
gates set from them FAILed five healthy demo cells and left 65 checks INCONCLUSIVE. So:

* `CalibrationRun`: a run calibrate reads (the config's matrix run, or one repeat of a cell), its
  rows as verdict/checks.py takes them, and which of its cells are healthy;
* `unhealthy(...)`: a cell is left out when it did not run, or when some share metric of it is
  significantly worse than its fix-on twin's or the baseline's (the deltas' own McNemar or Fisher
  p-values, Holm-adjusted across the run's cells at `HEALTH_ALPHA`): no margin or threshold is
  involved, so gates pasted earlier cannot make a healthy cell count as broken;
* `floor_rules`: a `min` (`max` for a rate) below the lowest healthy cell of every run by its
  run-to-run spread, then the exact bound (stats/bounds.py) that cell still PASSes with the
  adjustment across the matrix's cells: every healthy cell PASSes it, not only the repeated one;
* `cross_cell_rules`: each delta gate's margin from the healthy pairs (cell and twin, cell and
  baseline): at least the largest change between them and the MDE of their test at the
  discordance or base rate they show, so that no healthy pair is beyond the margin or unable to
  resolve it; a value between two cells (a divergence) at twice the largest healthy one.

verdict/calibrate_check.py then judges every suggested rule on these runs before it is printed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scipy.stats import norm

from evalkit.config import MatrixConfig
from evalkit.config.thresholds import ThresholdKind
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.units import Unit
from evalkit.stats.bounds import STEP, ceiling_for, floor_for
from evalkit.stats.multiplicity import holm
from evalkit.stats.power import POWER, fisher_mde, mcnemar_mde
from evalkit.verdict.checks import OWN_ALPHA, n_of
from evalkit.verdict.summary import Delta, RunSummary

HEALTH_ALPHA = 0.01
"""A cell significantly worse than its twin or the baseline at this level (Holm across the run's
cells) is not healthy: calibrate leaves it out of every gate and says so."""
REFERENCES = {"vs_baseline": "baseline", "vs_ab": "fix-on twin"}


@dataclass(frozen=True)
class CalibrationRun:
    """A run calibrate reads: where, how it is named in the snippet, its summary rows (what
    `checks.assess_rows` judges) and the cells left out as not healthy, with why."""

    path: Path
    label: str
    rows: list[dict[str, Any]]
    specs: list[MetricSpec]
    """The metrics the run measured (its summary's)."""
    unhealthy: dict[str, str] = field(default_factory=dict)

    @property
    def healthy(self) -> list[dict[str, Any]]:
        return [row for row in self.rows if row["id"] not in self.unhealthy]


def rows_of(summary: RunSummary) -> list[dict[str, Any]]:
    """A summary's cells as the rows the checks take: each judged afresh by any thresholds."""
    return [{"id": c.id, "status": c.status, "metrics": c.metrics, "unmeasured": c.unmeasured,
             "vs_baseline": c.vs_baseline, "vs_ab": c.vs_ab} for c in summary.cells]


def read_run(path: Path, label: str, config: MatrixConfig) -> CalibrationRun:
    """A stored run judged with its config (for its deltas: the thresholds do not matter here),
    its unhealthy cells found."""
    from evalkit.verdict.deltas import summarize_run

    summary = summarize_run(path, config)
    rows, specs = rows_of(summary), summary.specs()
    return CalibrationRun(path, label, rows, specs, unhealthy(rows, specs))


def _worse(spec: MetricSpec, delta: Delta) -> float | None:
    """The delta's p-value when it moved the bad way (a drop of a score, a rise of a rate), else None."""
    if delta.diff is None or delta.p_value is None:
        return None
    return delta.p_value if (delta.diff < 0) == spec.higher_is_better and delta.diff != 0 else None


def unhealthy(rows: Sequence[Mapping[str, Any]], specs: Sequence[MetricSpec],
              alpha: float = HEALTH_ALPHA) -> dict[str, str]:
    """Cell id -> why it is left out: it did not run, or a share metric is significantly worse
    than its reference (Holm across the cells, per metric and reference, at `alpha`)."""
    out = {row["id"]: f"did not run ({row['status']})" for row in rows if row["status"] != "ok"}
    for spec in specs:
        if spec.comparison not in (Comparison.PAIRED, Comparison.COUNT):
            continue
        for against, word in REFERENCES.items():
            found = [(row["id"], d, p) for row in rows if row["status"] == "ok" and (deltas := row.get(against))
                     and (d := deltas.of(spec.name)) is not None and (p := _worse(spec, d)) is not None]
            adjusted = holm([p for *_, p in found]) if found else []
            for (cell, d, _), p_adj in zip(found, adjusted):
                if p_adj < alpha and cell not in out:
                    out[cell] = (f"{spec.display.label} {d.diff * 100:+.1f} points vs {word} "
                                 f"(Holm p {p_adj:.2g} < {alpha:g})")
    return out


@dataclass(frozen=True)
class Rule:
    """One suggested threshold: what the snippet prints, verdict/checks.py judges and a reader is
    told (`why`: what it was measured from, in a sentence)."""

    metric: str
    check: str
    value: float
    why: str
    alpha: float | None = None

    def fields(self) -> dict[str, Any]:
        """The threshold as a config's `thresholds:` entry holds it."""
        out: dict[str, Any] = {"metric": self.metric, self.check: self.value}
        return out | ({"alpha": self.alpha} if self.alpha is not None else {})

    def widened(self, step: float, unit: Unit) -> Rule:
        """One `step` less strict: a `min` lower, a `max` or a margin higher, kept in the unit's range."""
        value = self.value - step if ThresholdKind.of(self.check) is ThresholdKind.MIN else self.value + step
        if not ThresholdKind.of(self.check).own_value:
            value = max(0.0, value)
        return Rule(self.metric, self.check, round(unit.clamp(value), 9), self.why, self.alpha)


def _up(x: float, step: float = STEP) -> float:
    return round(math.ceil(x / step - 1e-9) * step, 6)


def _up_digits(x: float, digits: int = 2) -> float:
    """`x` rounded up to `digits` significant digits (a divergence's 0.000429 -> 0.00043)."""
    step = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / step - 1e-9) * step:.{digits}g}")


def _levels(runs: Sequence[CalibrationRun], spec: MetricSpec) -> list[tuple[float, int, str]]:
    """(value, n, where) of the metric in every healthy cell of `runs`, n from its eval's count."""
    out = []
    for run in runs:
        for row in run.healthy:
            value, n = row["metrics"].get(spec.name), n_of(spec, row["metrics"])
            if isinstance(value, (int, float)) and n:
                out.append((float(value), n, f"{row['id']} ({run.label})"))
    return out


def run_sd(spec: MetricSpec, repeats: Sequence[float], repeat_n: int | None, n: int,
           pairs: Sequence[Delta]) -> tuple[float, str]:
    """How far one night of a healthy cell may land from another, as a share at n, and from what:
    the repeats' sd (scaled from their n to n), else the healthy pairs' flips (a share d of
    questions flipping between two runs moves one by sqrt(d / 2n)) or a rate's binomial sd."""
    if len(repeats) > 1 and repeat_n:
        return statistics.stdev(repeats) * math.sqrt(repeat_n / n), f"{len(repeats)} repeats"
    flips = [((d.right_only_in_cell or 0) + (d.right_only_in_reference or 0)) / d.n for d in pairs if d.n]
    if flips:
        return math.sqrt(max(flips) / (2 * n)), "the healthy pairs' flips"
    rates = [d.rate_reference for d in pairs if d.rate_reference is not None]
    rate = max([*rates, 1 / n])
    return math.sqrt(rate * (1 - rate) / n), "binomial noise"


def floor_rule(spec: MetricSpec, runs: Sequence[CalibrationRun], repeats: Sequence[float], repeat_n: int | None,
               cells: int, nightly_alpha: float) -> Rule | str:
    """The `min` (a score) or `max` (a rate) every healthy cell of `runs` PASSes with room for one
    night's spread: each cell's value moved the bad way by z x its run-to-run sd (z for
    `nightly_alpha` split over `cells`), then its exact bound at the threshold's alpha over `cells`
    (stats/bounds.py). A sentence instead when no floor acts (0, or 1 for a rate)."""
    levels = _levels(runs, spec)
    if not levels:
        return f"{spec.name}: no healthy cell measured it"
    floor = spec.higher_is_better
    worst, n, where = min(levels) if floor else max(levels)
    pairs = [d for run in runs for row in run.healthy for against in REFERENCES
             if (ds := row.get(against)) is not None and (d := ds.of(spec.name)) is not None]
    sd, source = run_sd(spec, repeats, repeat_n, n, pairs)
    z = float(norm.ppf(1 - (1 - (1 - nightly_alpha) ** (1 / cells))))
    limits = []
    for value, cell_n, _ in levels:
        moved = value - z * sd if floor else value + z * sd
        k = math.floor(moved * cell_n + 1e-9) if floor else math.ceil(moved * cell_n - 1e-9)
        k = min(cell_n, max(0, k))
        each = OWN_ALPHA / cells
        limits.append(floor_for(k, cell_n, each) if floor else ceiling_for(k, cell_n, each))
    limit = spec.unit.clamp(min(limits) if floor else max(limits))
    if (floor and limit <= 0) or (not floor and limit >= 1):
        return (f"{spec.name}: no {'min' if floor else 'max'} acts at n {n}: the {'lowest' if floor else 'highest'} "
                f"healthy cell, {where} at {worst:.3f}, is within its noise of {'0' if floor else '1'}")
    way = "lowest" if floor else "highest"
    why = (f"{way} healthy cell {where} {worst:.3f} of {n}; {'less' if floor else 'plus'} {z:.1f} x a night's sd "
           f"{sd * 100:.2f} points ({source}); then the exact bound it PASSes at {OWN_ALPHA:g} over {cells} cells")
    return Rule(spec.name, "min" if floor else "max", round(limit, 6), why)


def cross_cell_rules(spec: MetricSpec, runs: Sequence[CalibrationRun], checks: Sequence[str], alpha: float,
                     power: float = POWER) -> list[Rule | str]:
    """Each of `checks` (e.g. `max_drop_ab`) on `spec` with a margin from the healthy pairs of
    `runs` (both cells healthy): at least the largest change between them and their test's MDE
    at their n and discordance (a score) or base rate (a rate); a value between two cells at
    twice the largest healthy one. A sentence where no healthy pair was measured."""
    out: list[Rule | str] = []
    for check in checks:
        against = "vs_baseline" if check.endswith("vs_baseline") else "vs_ab"
        healthy_ids = {(run.label, row["id"]) for run in runs for row in run.healthy}
        pairs = [(row["id"], d) for run in runs for row in run.healthy
                 if (ds := row.get(against)) is not None and (run.label, ds.reference) in healthy_ids
                 and (d := ds.of(spec.name)) is not None and d.diff is not None and not d.refused and not d.differs]
        if not pairs:
            out.append(f"{spec.name} {check}: no healthy pair against the {REFERENCES[against]} was measured")
            continue
        bad = -1 if spec.higher_is_better else 1
        changes = [bad * (d.diff or 0.0) for _, d in pairs]
        if spec.comparison is Comparison.PAIRWISE:  # no test: beyond the margin (and the noise floor) fails
            if max(changes) <= 0:
                out.append(f"{spec.name} {check}: every healthy pair measured 0: no margin to set from them")
                continue
            out.append(Rule(spec.name, check, _up_digits(2 * max(changes)),
                            f"twice the largest value between two healthy cells ({_pairs(len(pairs))} against the "
                            f"{REFERENCES[against]}, largest {max(changes):.3g}; no test, no night-to-night noise "
                            "measured for it)"))
            continue
        mdes = [_mde(spec, d, alpha, power) for _, d in pairs]
        if any(m is None for m in mdes):
            out.append(f"{spec.name} {check}: no change is detectable at the healthy pairs' n (raise the eval's count)")
            continue
        worst_change, worst_mde = max(changes), max(m for m in mdes if m is not None)
        margin = _up(max(worst_change, worst_mde))
        if (why_not := spec.unit.check_change(margin)) is not None:
            out.append(f"{spec.name} {check}: {why_not}")
            continue
        test = "McNemar" if spec.comparison is Comparison.PAIRED else "Fisher"
        way = "drop" if spec.higher_is_better else "rise"
        seen = f"largest {way} {worst_change * 100:.1f} points" if worst_change > 0 else f"no {way}"
        out.append(Rule(spec.name, check, margin, f"{_pairs(len(pairs))} against the {REFERENCES[against]}: "
                                                  f"{seen}, {test} MDE {worst_mde * 100:.1f} points at alpha {alpha:g}",
                        alpha))
    return out


def _pairs(n: int) -> str:
    return f"{n} healthy pair{'s' if n != 1 else ''}"


def _mde(spec: MetricSpec, d: Delta, alpha: float, power: float) -> float | None:
    """The MDE of one healthy pair's test: McNemar at its discordance, Fisher at its base rate."""
    if spec.comparison is Comparison.PAIRED and d.n:
        flips = (d.right_only_in_cell or 0) + (d.right_only_in_reference or 0)
        return mcnemar_mde(d.n, flips / d.n, alpha, power)
    if spec.comparison is Comparison.COUNT and d.n and d.n_reference and d.rate_reference is not None:
        return fisher_mde(d.n, d.n_reference, float(d.rate_reference), alpha, power)
    return None
