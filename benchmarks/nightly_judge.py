"""False alarms per night and detection of planted breaks by `evalkit history judge`, by seeded simulation.

A nightly of `--series` series (40: a matrix's cells times its metrics, or a dashboard's benches)
is drawn many times. Each series has `--nights` nights of history, one commit a night; a
commit's true level moves by `--across` points (sd) from the series' base, and every run of it by
`--same` more (sd): the figures issue 39 read from ATOM's dashboard (re-runs ~0.2 points, commit
to commit 0.3-0.6). A third of the nights re-run their commit once. The history itself is not
clean: `--past-breaks` of its points are broken runs, `--past-drop` points low, as real
dashboards are. Then, on the newest night:

* healthy: nothing planted; a broken verdict is a false alarm (per series, and per nightly: any of
  its series);
* drop: the newest run is `D` points low (one bad night);
* intermittent: the newest commit runs `k` times and each run fails (`--flaky-drop` points low)
  with probability 1/4, the bug class of ATOM PR #1596: caught when any of its runs is judged
  broken, named right when one is `intermittent`;
* a drop that stays: from the third-newest (or the 8th, 15th newest) night on every commit is `D`
  points lower: caught when the newest night is broken, named right when its broken episode begins
  at the first low commit, and kept when every low night from the third on is broken (a fall that
  stays down never becomes the series' level).

Beside the judge, the naive gate a team writes first: mean - z(rate) sd of the earlier points, its
sd inflated by the past breaks. Finally the time to judge --all on a history of `--timing-points`
points. Everything is judged by evalkit.history.judge itself, nothing re-implemented.

    python benchmarks/nightly_judge.py [--trials 100] [--series 40] [--nights 60] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from statistics import NormalDist

from evalkit.history.judge import Judge
from evalkit.history.series import ACCURACY, Series, SeriesPoint
from evalkit.history.verdicts import BROKEN, INTERMITTENT

BASE = 0.94


def history(rng: random.Random, args: argparse.Namespace, name: str) -> tuple[list[SeriesPoint], float]:
    """A series' healthy nights (with its past broken runs) and its base level."""
    base = BASE + rng.gauss(0, 0.01)
    points: list[SeriesPoint] = []
    for night in range(args.nights):
        commit = f"{name}-c{night:04d}"
        level = base + rng.gauss(0, args.across / 100)
        for rerun in range(2 if rng.random() < 1 / 3 else 1):
            value = level + rng.gauss(0, args.same / 100)
            if night < args.nights - 1 and rng.random() < args.past_breaks:
                value -= args.past_drop / 100
            points.append(SeriesPoint(commit, f"2026-01-01T{night:04d}{rerun}", value, f"run-{night}-{rerun}"))
    return points, base


def series(name: str, points: list[SeriesPoint]) -> Series:
    return Series(name, name, name, "accuracy", ACCURACY, "score", True, points)


Plant = Callable[[random.Random, list[SeriesPoint], float, str], list[SeriesPoint]]


def nightly(rng: random.Random, args: argparse.Namespace, plant: Plant | None, rate: float) -> list[list[str]]:
    """One nightly of args.series series, the first one planted; each series' verdicts of its newest commit's runs."""
    batch = []
    for i in range(args.series):
        points, base = history(rng, args, f"s{i}")
        if plant is not None and i == 0:
            points = plant(rng, points, base, f"s{i}")
        batch.append(series(f"s{i}", points))
    judge = Judge(batch, rate)
    out = []
    for si, s in enumerate(batch):
        newest = s.points[-1].commit
        out.append([judge.classify(si, pi)[0] for pi, p in enumerate(s.points) if p.commit == newest])
    return out


def drop(points_low: float) -> Plant:
    def plant(rng: random.Random, points: list[SeriesPoint], base: float, name: str) -> list[SeriesPoint]:
        last = points[-1]
        return [*points[:-1], SeriesPoint(last.commit, last.date, last.value - points_low / 100, last.run)]
    return plant


def flaky(runs: int, drop_points: float) -> Plant:
    def plant(rng: random.Random, points: list[SeriesPoint], base: float, name: str) -> list[SeriesPoint]:
        level = base + rng.gauss(0, 0.004)
        new = [SeriesPoint(f"{name}-new", f"2026-02-01T{k:02d}", level + rng.gauss(0, 0.002)
                           - (drop_points / 100 if rng.random() < 0.25 else 0), f"run-new-{k}") for k in range(runs)]
        return points + new
    return plant


SHIFT_NIGHTS = 3


def shift(points_low: float, nights_low: int = SHIFT_NIGHTS) -> Plant:
    def plant(rng: random.Random, points: list[SeriesPoint], base: float, name: str) -> list[SeriesPoint]:
        nights = sorted({p.commit for p in points})[-nights_low:]
        return [SeriesPoint(p.commit, p.date, p.value - points_low / 100, p.run) if p.commit in nights else p
                for p in points]
    return plant


def naive_alarm(points: list[SeriesPoint], rate: float) -> bool:
    """The naive gate: the newest point below mean - z sd of all the earlier points, at the judge's per-series rate."""
    earlier = [p.value for p in points[:-1]]
    z = NormalDist().inv_cdf(1 - rate)
    return points[-1].value < statistics.fmean(earlier) - z * statistics.stdev(earlier)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100, help="Nightlies per scenario.")
    parser.add_argument("--series", type=int, default=40)
    parser.add_argument("--nights", type=int, default=60)
    parser.add_argument("--same", type=float, default=0.2, help="Points (sd) a re-run of one commit moves.")
    parser.add_argument("--across", type=float, default=0.4, help="Points (sd) a commit's level moves.")
    parser.add_argument("--past-breaks", type=float, default=0.03, help="Share of history points that are broken runs.")
    parser.add_argument("--past-drop", type=float, default=6.0, help="Points a past broken run is low.")
    parser.add_argument("--flaky-drop", type=float, default=6.0)
    parser.add_argument("--rate", type=float, default=0.01,
                        help="The judge's false-alarm rate per nightly (split over its series).")
    parser.add_argument("--timing-points", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"{args.trials} nightlies of {args.series} series, {args.nights} nights each; noise {args.same} points same "
          f"commit, {args.across} across commits; {args.past_breaks:.0%} of past runs broken by {args.past_drop} points; "
          f"false-alarm rate {args.rate:g} per nightly; seed {args.seed}\n")

    healthy = [nightly(rng, args, None, args.rate) for _ in range(args.trials)]
    per_series = [verdicts[-1] in BROKEN for night in healthy for verdicts in night]
    per_night = [any(verdicts[-1] in BROKEN for verdicts in night) for night in healthy]
    print("| healthy history | false alarms |\n|---|---|")
    print(f"| per series-night | {statistics.fmean(per_series):.2%} ({sum(per_series)} of {len(per_series)}) |")
    print(f"| per nightly of {args.series} series (any) | {statistics.fmean(per_night):.1%} |")

    print("\n| planted on the newest night | caught | named right | naive mean - z sd gate |\n|---|---|---|---|")
    for points_low in (1.0, 1.5, 2.0, 3.0, 5.0):
        caught: list[bool] = []
        naive: list[bool] = []
        for _ in range(args.trials):
            plant = drop(points_low)
            points, base = history(rng, args, "s0")
            planted = plant(rng, points, base, "s0")
            others = [series(f"s{i}", history(rng, args, f"s{i}")[0]) for i in range(1, args.series)]
            judge = Judge([series("s0", planted), *others], args.rate)
            caught.append(judge.classify(0, len(planted) - 1)[0] in BROKEN)
            naive.append(naive_alarm(planted, judge.rate))
        print(f"| one run {points_low:g} points low | {statistics.fmean(caught):.0%} | (regression) | "
              f"{statistics.fmean(naive):.0%} |")
    for runs in (1, 2, 4, 8):
        verdicts = [nightly(rng, args, flaky(runs, args.flaky_drop), args.rate)[0] for _ in range(args.trials)]
        hit = statistics.fmean(any(v in BROKEN for v in vs) for vs in verdicts)
        called = statistics.fmean(INTERMITTENT in vs for vs in verdicts)
        print(f"| a 1-in-4 failure ({args.flaky_drop:g} points), commit run {runs}x | {hit:.0%} | "
              f"{called:.0%} intermittent | - |")
    for points_low, nights_low in ((1.5, SHIFT_NIGHTS), (3.0, SHIFT_NIGHTS), (2.0, 8), (20.0, 15)):
        shifted: list[bool] = []
        named: list[bool] = []
        every_night: list[bool] = []
        for _ in range(args.trials):
            points, base = history(rng, args, "s0")
            planted = shift(points_low, nights_low)(rng, points, base, "s0")
            others = [series(f"s{i}", history(rng, args, f"s{i}")[0]) for i in range(1, args.series)]
            judge = Judge([series("s0", planted), *others], args.rate)
            verdict, _, first = judge.classify(0, len(planted) - 1)
            first_low = sorted({p.commit for p in planted})[-nights_low]
            shifted.append(verdict in BROKEN)
            named.append(verdict in BROKEN and first is not None and planted[first].commit == first_low)
            low = [i for i, p in enumerate(planted) if p.commit >= first_low]
            every_night.append(all(judge.classify(0, i)[0] in BROKEN for i in low[SHIFT_NIGHTS - 1:]))
        print(f"| a {points_low:g}-point drop that stays, its night {nights_low} | {statistics.fmean(shifted):.0%} | "
              f"{statistics.fmean(named):.0%} at its first commit; {statistics.fmean(every_night):.0%} broken every night "
              f"from its {SHIFT_NIGHTS}rd | - |")

    per_series_points = args.timing_points // args.series
    batch = [series(f"s{i}", history(rng, argparse.Namespace(**{**vars(args), "nights": per_series_points}),
                                     f"s{i}")[0][:per_series_points]) for i in range(args.series)]
    total = sum(len(s.points) for s in batch)
    start = time.perf_counter()
    Judge(batch, args.rate).judge(every=True)
    every = time.perf_counter() - start
    start = time.perf_counter()
    Judge(batch, args.rate).judge()
    newest = time.perf_counter() - start
    print(f"\njudging {total} points in {args.series} series: --all {every:.2f} s, newest only {newest:.2f} s")


if __name__ == "__main__":
    main()
