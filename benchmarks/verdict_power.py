"""False alarms per healthy matrix and the power to catch a drop, by seeded simulation (no engines).

A 12-cell matrix like the demo's (2 parallel layouts x 3 graph modes x fix on/off; baseline
tp8-full-fixon) is drawn many times. Each trial draws the baseline's GSM8K marks (accuracy 0.94
on n questions) and, for every other cell, the marks of a healthy engine: a share of the
questions between 2% and 6% (drawn per cell) flips against the baseline, half right -> wrong and
half wrong -> right, as batch-variant numerics do. Long generations collapse at a base rate
(2%) in every cell. Then each delta threshold is checked as verdict/deltas.py checks it: McNemar exact
(two-sided) per cell against its reference, one-sided Fisher exact on the collapse counts, the
p-values of one threshold adjusted across its cells (evalkit.stats.multiplicity), FAIL when the change
is beyond the margin and the adjusted p is below alpha.

It reports, per threshold family and for the whole matrix, the share of healthy trials with ANY
FAIL: with the demo's margins (2 points, 5 points) and with no margin (a significant change
alone: the worst case, what the correction has to hold by itself), under Holm, BH and no
correction; then the power to catch a 3- and a 7-point drop in one cell (dp8-piecewise-fixoff,
checked against the baseline and its twin) next to stats/power.py's exact figure.

    python benchmarks/verdict_power.py [--trials 4000] [--n 1319] [--alpha 0.01] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom, hypergeom

from evalkit.stats.multiplicity import METHODS, Method, adjust
from evalkit.stats.power import mcnemar_power

CELLS = [f"{p}-{g}-{f}" for p in ("tp8", "dp8") for g in ("full", "piecewise", "eager") for f in ("fixon", "fixoff")]
BASELINE = "tp8-full-fixon"
BUGGY = "dp8-piecewise-fixoff"
ACCURACY = 0.94
COLLAPSE_RATE = 0.02
GENERATIONS = 64


@dataclass(frozen=True)
class Figures:
    """Share of trials with any FAIL, per (family, margin kind, method); and the buggy cell's power."""

    false_alarms: dict[tuple[str, str, str], float]
    power: dict[tuple[str, float, str], float]
    discordance: dict[str, float]
    """Mean share of discordant questions per GSM8K family in the healthy trials."""
    trials: int


def _twin(cell: str) -> str | None:
    return cell.replace("fixoff", "fixon") if cell.endswith("fixoff") else None


def _healthy_marks(rng: np.random.Generator, base: np.ndarray, drop: float = 0.0) -> np.ndarray:
    """A healthy cell's marks against `base`: a share d in [2%, 6%] flips, half each way; then a
    `drop` share of all questions goes from right to wrong."""
    d = rng.uniform(0.02, 0.06)
    right = base.mean()
    flip = np.where(base, rng.random(base.size) < d / 2 / right, rng.random(base.size) < d / 2 / (1 - right))
    marks = base ^ flip
    if drop:
        marks = marks & ~(marks & (rng.random(base.size) < drop / marks.mean()))
    return marks


def _mcnemar(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    """(a - b, two-sided exact McNemar p: 2 P(Bin(D, 1/2) <= min(a_only, b_only)) at most 1, D)."""
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(b & ~a))
    disc = a_only + b_only
    p = 1.0 if disc == 0 else min(1.0, 2 * float(binom.cdf(min(a_only, b_only), disc, 0.5)))
    return (a_only - b_only) / a.size, p, disc


def _fisher_greater(k: int, k_ref: int, n: int) -> float:
    """One-sided Fisher exact p of "the cell's rate is higher", both sides n samples."""
    return float(hypergeom.sf(k - 1, 2 * n, k + k_ref, n))


def _any_fail(changes: list[float], ps: list[float], margin: float, alpha: float, method: Method) -> bool:
    return any(c > margin and p < alpha for c, p in zip(changes, adjust(ps, method)))


def simulate(trials: int, n: int, alpha: float, seed: int, drops: tuple[float, ...] = (0.03, 0.07)) -> Figures:
    """The figures above, from `trials` healthy matrices and `trials` per drop with one bad cell."""
    rng = np.random.default_rng(seed)
    margins = {"gsm8k": 0.02, "collapse": 0.05}
    counts: dict[tuple[str, str, str], int] = {}
    caught: dict[tuple[str, float, str], int] = {}
    discordant: dict[str, list[int]] = {}
    for drop in (0.0, *drops):
        for _ in range(trials):
            base = rng.random(n) < ACCURACY
            marks = {c: base if c == BASELINE else _healthy_marks(rng, base, drop if c == BUGGY else 0.0)
                     for c in CELLS}
            collapsed = {c: int(rng.binomial(GENERATIONS, COLLAPSE_RATE)) for c in CELLS}
            fams: dict[str, tuple[list[float], list[float], list[str]]] = {}
            for cell in CELLS:
                for family, ref in (("vs_baseline", BASELINE if cell != BASELINE else None), ("ab", _twin(cell))):
                    if ref is None:
                        continue
                    diff, p, disc = _mcnemar(marks[cell], marks[ref])
                    if drop == 0.0:
                        discordant.setdefault(f"gsm8k {family}", []).append(disc)
                    change, ps, ids = fams.setdefault(f"gsm8k {family}", ([], [], []))
                    change.append(-diff), ps.append(p), ids.append(cell)
                    rise = (collapsed[cell] - collapsed[ref]) / GENERATIONS
                    change, ps, ids = fams.setdefault(f"collapse {family}", ([], [], []))
                    change.append(rise), ps.append(_fisher_greater(collapsed[cell], collapsed[ref], GENERATIONS))
                    ids.append(cell)
            for method in METHODS:
                if drop == 0.0:
                    any_at = {"margin": False, "no margin": False}
                    for family, (changes, ps, _) in fams.items():
                        margin = margins[family.split()[0]]
                        for kind, m in (("margin", margin), ("no margin", 0.0)):
                            hit = _any_fail(changes, ps, m, alpha, method)
                            counts[(family, kind, method)] = counts.get((family, kind, method), 0) + hit
                            any_at[kind] |= hit
                    for kind, hit in any_at.items():
                        counts[("whole matrix", kind, method)] = counts.get(("whole matrix", kind, method), 0) + hit
                else:
                    for family in ("gsm8k vs_baseline", "gsm8k ab"):
                        changes, ps, ids = fams[family]
                        adjusted = adjust(ps, method)
                        i = ids.index(BUGGY)
                        hit = changes[i] > margins["gsm8k"] and adjusted[i] < alpha
                        caught[(family, drop, method)] = caught.get((family, drop, method), 0) + hit
    return Figures({k: v / trials for k, v in counts.items()}, {k: v / trials for k, v in caught.items()},
                   {k: float(np.mean(v)) / n for k, v in discordant.items()}, trials)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=4000)
    parser.add_argument("--n", type=int, default=1319)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    fig = simulate(args.trials, args.n, args.alpha, args.seed)
    print(f"healthy 12-cell matrices: {args.trials} trials, GSM8K n={args.n} (accuracy {ACCURACY}, 2-6% discordant), "
          f"{GENERATIONS} generations (collapse rate {COLLAPSE_RATE}), alpha {args.alpha}, seed {args.seed}")
    print("share of matrices with ANY false FAIL")
    print(f"| {'family':<22} | {'margin':<9} | " + " | ".join(f"{m:>6}" for m in METHODS) + " |")
    families = sorted({k[0] for k in fig.false_alarms}, key=lambda f: (f == "whole matrix", f))
    for family in families:
        for kind in ("margin", "no margin"):
            print(f"| {family:<22} | {kind:<9} | "
                  + " | ".join(f"{fig.false_alarms[(family, kind, m)]:>6.4f}" for m in METHODS) + " |")
    print("power to catch a drop in dp8-piecewise-fixoff (margin 2 points), simulated per correction; next to it "
          "stats/power.py's exact figure for one test at alpha and the family's mean discordance ("
          + ", ".join(f"{f}: {d:.1%}" for f, d in sorted(fig.discordance.items())) + ")")
    for (family, drop, method), share in sorted(fig.power.items()):
        exact = mcnemar_power(args.n, fig.discordance[family], drop, args.alpha)
        print(f"| {family:<18} | drop {drop * 100:.0f} points | {method:<4} | {share:.3f} | exact {exact:.3f} |")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
