"""What `evalkit plan` says of a floor (`min`/`max` on a cell's own value) before a run: which
rule judges it, where a cell of the planned n PASSes and FAILs, and how often a cell at its
expected value fails it (issue 47 item 6).

A floor set by feel next to a healthy level (`min: 0.94` for a model that scores 0.94) fails half
the nights on the point estimate and is undecided every night by the noise rule; neither shows
until engines have run. The figures here are exact over the binomial distribution of a cell's
successes (stats/bounds.py) and state their direction: a cell at or above `pass_at` PASSes
whatever the other cells do (the adjustment's strictest step, alpha / cells), one at or below
`fail_at` FAILs; the chance of failing at the expected value is at most the unadjusted test's.
The expected value is the level `evalkit calibrate` measured (`plan --calibration`); without one
the line says it is unknown rather than assume one.
"""

from __future__ import annotations

from evalkit.config import Threshold
from evalkit.evals.base import Comparison
from evalkit.stats.bounds import decision_band, gate_chances
from evalkit.stats.multiplicity import METHOD_WORDS, Method
from evalkit.verdict.checks import OWN_ALPHA, rule_text


def floor_line(threshold: Threshold, n: int | None, cells: int, method: Method, level: float | None,
               source: str) -> str:
    """One `min`/`max` threshold in one line: its rule, its band at n over `cells` cells adjusted
    by `method`, and its chances at `level` (the measured expected value, `source` saying where
    from; None: unknown)."""
    head, spec, limit = rule_text(threshold), threshold.spec, threshold.value
    floor = threshold.check == "min"
    if spec is None or spec.comparison not in (Comparison.PAIRED, Comparison.COUNT) or not 0 <= limit <= 1:
        unit = spec.unit.describe(limit) if spec is not None else f"{limit:g}"
        return f"{head}: the point estimate against {unit} (no n to weigh its noise by)"
    if n is None:
        return f"{head}: n unknown"
    alpha = threshold.alpha or OWN_ALPHA
    way = "below" if floor else "above"
    if threshold.gate == "point":
        at_limit = gate_chances(limit, n, limit, alpha, floor, point=True).fail
        words = (f"{head}: the point estimate (gate: point, an engine CI's rule): FAIL {way} {limit:g} however "
                 f"close, a cell at the limit fails it {at_limit:.0%} of runs")
        if level is not None:
            chance = gate_chances(limit, n, level, alpha, floor, point=True).fail
            words += f"; a cell at {level:.3f} ({source}) fails it {_chance(chance)} of runs"
        return words
    adjusted = cells if method != "none" and cells > 1 else 1
    family = f", {METHOD_WORDS.get(method, method)} over {cells} cells" if adjusted > 1 else ""
    pass_at, fail_at = decision_band(limit, n, alpha / adjusted, floor)
    passes = "no share of n PASSes" if pass_at is None else f"PASS at {pass_at:.3f} or {'above' if floor else 'below'}"
    fails = "no share of n FAILs" if fail_at is None else f"FAIL at {fail_at:.3f} or {way}"
    words = (f"{head}: exact binomial, one-sided {alpha:g}{family}: at n {n} {passes}, {fails}, INCONCLUSIVE "
             f"between")
    if level is None:
        return words + "; expected value unknown (`--calibration` gives the measured one)"
    worst = gate_chances(limit, n, level, alpha, floor)  # FAIL at most: the unadjusted test's
    strict = gate_chances(limit, n, level, alpha / adjusted, floor)  # undecided at most: the strictest step's
    return (words + f"; a cell at {level:.3f} ({source}) fails it at most {_chance(worst.fail)} of runs and is "
            f"undecided at most {_chance(strict.undecided)}")


def _chance(p: float) -> str:
    """`12%`, `0.3%`, `2e-05`, `< 1e-9`: a probability a reader compares with once a night."""
    if p < 1e-9:
        return "< 1e-9"
    return f"{p:.0%}" if p >= 0.1 else f"{p:.1%}" if p >= 0.001 else f"{p:.1g}"
