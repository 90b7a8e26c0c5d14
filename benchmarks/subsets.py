"""How far a limited run's questions sit from the whole GSM8K test set, by subset rule.

For each N it prints, per rule, the mean number of solution steps (the stratified rule's
stratum, a proxy of difficulty) of the N questions asked and its distance from all 1319's mean,
and the largest gap between a stratum's share of the N and its share of all 1319: `first` is
one fixed prefix, `stratified` and `random` are summarised over `--seeds` seeds (mean, and the
95th percentile of the distance). No engine: this is about which questions are asked.

    python benchmarks/subsets.py [--sizes 50 100 200 500] [--seeds 200]
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter

from evalkit.evals.gsm8k import data_dir, solution_steps
from evalkit.evals.subsets import RULES, pick


def figures(steps: tuple[int, ...], chosen: list[int]) -> tuple[float, float]:
    """(mean steps of the chosen questions, the largest gap of a stratum's share, in points)."""
    whole, part = Counter(steps), Counter(steps[i] for i in chosen)
    gap = max(abs(part[s] / len(chosen) - whole[s] / len(steps)) for s in whole)
    return statistics.fmean(steps[i] for i in chosen), gap * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 200, 500])
    parser.add_argument("--seeds", type=int, default=200)
    args = parser.parse_args()
    steps = solution_steps(data_dir())
    full = statistics.fmean(steps)
    print(f"GSM8K test: {len(steps)} questions, mean solution steps {full:.3f}")
    print("| N | rule | mean steps | |distance| mean / p95 | largest stratum gap (points) mean / p95 |")
    print("|---|---|---|---|---|")
    for n in args.sizes:
        for rule in RULES:
            runs = [figures(steps, pick(steps, n, rule, seed)) for seed in range(1 if rule == "first" else args.seeds)]
            means, gaps = [m for m, _ in runs], sorted(g for _, g in runs)
            dist = sorted(abs(m - full) for m in means)
            p95 = int(0.95 * (len(runs) - 1))
            print(f"| {n} | {rule} | {statistics.fmean(means):.3f} | {statistics.fmean(dist):.3f} / {dist[p95]:.3f} | "
                  f"{statistics.fmean(gaps):.1f} / {gaps[p95]:.1f} |")


if __name__ == "__main__":
    main()
