"""Thresholds from measurement: what the noise of N runs of one cell supports.

Public CI projects set accuracy thresholds by guesswork and get silent or flaky nightlies. The
spread of repeated runs of one unchanged cell is the honest input: how much its score moves,
how many questions flip between runs, and from that the smallest drop the paired test can
detect at the configured alpha. `evalkit calibrate` prints the result as a YAML snippet to
paste under `thresholds:`.

The power model is stats/power.py's (`mcnemar_mde`: McNemar exact, two-sided, as verdict/deltas.py tests):
the minimum detectable drop at the measured flip rate. A suggested `min` leaves room for the
binomial noise of n questions on top of the run-to-run spread (`suggested_min`), so that one
question flipped by batch noise does not fail a nightly.

`from_history` (`evalkit calibrate --from-history`) reads the nightlies already recorded instead
of running new repeats, through the same noise model that `evalkit history judge` judges them
with (history/judge.py), so the gate it suggests is the judge's own boundary.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

from evalkit.evals.base import Comparison, MetricSpec
from evalkit.stats.power import POWER, mcnemar_mde, mcnemar_n

if TYPE_CHECKING:
    from evalkit.history.judge import Judged

DEFAULT_ALPHA = 0.01
NIGHTLY_CELLS = 12
"""Cells of a nightly matrix the suggested `min` is gated on, when the config does not say (the demo's)."""


@dataclass(frozen=True)
class MetricNoise:
    """One metric over N runs of the same cell."""

    metric: str
    values: list[float]
    n: int | None = None
    """Questions (paired metrics) or samples (counts) per run."""
    flip_rate: float | None = None
    """Paired metrics: mean share of questions whose mark differs between two runs."""
    max_pairwise_diff: float | None = None
    detectable_drop: float | None = None
    detectable_drop_full: float | None = None
    """The same at `full_n` questions (when the runs used --limit)."""
    full_n: int | None = None
    counts: list[int] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def sd(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0


def paired_noise(spec: MetricSpec, runs: Sequence[Mapping[str, bool]], values: Sequence[float], alpha: float,
                 full_n: int | None = None) -> MetricNoise:
    """`runs`: per run, question id -> mark; compared on the questions every run answered."""
    shared = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    n = len(shared)
    flips, diffs = [], []
    for a, b in combinations(runs, 2):
        flips.append(sum(a[q] != b[q] for q in shared) / n if n else 0.0)
        diffs.append(abs(sum(a[q] for q in shared) - sum(b[q] for q in shared)) / n if n else 0.0)
    flip_rate = statistics.fmean(flips) if flips else 0.0
    drop = mcnemar_mde(n, flip_rate, alpha) if n else None
    drop_full = mcnemar_mde(full_n, flip_rate, alpha) if full_n and full_n != n else None
    return MetricNoise(spec.name, list(values), n, flip_rate, max(diffs) if diffs else 0.0, drop, drop_full,
                       full_n if drop_full is not None else None)


def count_noise(spec: MetricSpec, flats: Sequence[Mapping[str, Any]]) -> MetricNoise:
    counts = [int(f[spec.count_metric or ""]) for f in flats]
    ns = [int(f[spec.n_metric or ""]) for f in flats]
    return MetricNoise(spec.name, [k / n if n else 0.0 for k, n in zip(counts, ns)], ns[0] if ns else None,
                       counts=counts)


def _floor(x: float, step: float = 0.005) -> float:
    return math.floor(x / step + 1e-9) * step


def _ceil(x: float, step: float = 0.005) -> float:
    return math.ceil(x / step - 1e-9) * step


@dataclass(frozen=True)
class MinGate:
    """A suggested `min` and the false failures it implies for a healthy cell."""

    limit: float
    per_run: float
    """Chance that one healthy run of the cell falls below `limit`."""
    per_nightly: float
    """Chance that any of `cells` healthy cells does, in one nightly."""
    cells: int


def suggested_min(noise: MetricNoise, alpha: float, cells: int = NIGHTLY_CELLS) -> MinGate:
    """A `min` a healthy cell fails in at most `alpha` of nightlies of `cells` cells.

    The room below the measured mean is TensorRT-LLM's, z(alpha_run) sqrt(2 sigma^2 / n) (stats/power.py
    `gate_room`'s formula: a run of n questions against a mean itself measured on n), with sigma^2 = p(1 - p)
    the binomial variance at the measured mean, plus the run-to-run spread: sd^2 adds to the
    variance. alpha_run = 1 - (1 - alpha)^(1 / cells) splits the nightly's rate over its cells.
    Three identical runs (sd 0) still leave the binomial room: the mean itself is not a gate.
    """
    from scipy.stats import norm

    p, n = noise.mean, noise.n or 1
    per_run_target = 1 - (1 - alpha) ** (1 / cells)
    z = float(norm.ppf(1 - per_run_target))
    spread = math.sqrt(2 * max(p * (1 - p), 1 / n) / n + noise.sd ** 2)  # 2 sigma^2 / n, plus the spread
    limit = round(_floor(min(p - z * spread, min(noise.values))), 3)
    per_run = float(norm.cdf((limit - p) / spread)) if spread else 0.0
    return MinGate(limit, per_run, 1 - (1 - per_run) ** cells, cells)


def suggested(noise: MetricNoise, spec: MetricSpec, alpha: float, cells: int = NIGHTLY_CELLS) -> list[dict[str, Any]]:
    """Threshold rules the measured noise supports, in the config's `thresholds:` shape.

    * `min` (higher is better): `suggested_min`, rounded down to half a point;
    * `max_drop_*` with `alpha`: the larger of the detectable drop and the largest swing between
      two runs, rounded up: smaller drops are either undetectable or rerun noise;
    * counts (lower is better): `max` at the worst run's rate plus one event's worth, and
      `max_rise_*` at the same margin with `alpha`.
    """
    if spec.comparison is Comparison.PAIRED:
        rules: list[dict[str, Any]] = [{"metric": spec.name, "min": suggested_min(noise, alpha, cells).limit}]
        drop = max(noise.detectable_drop or 0.0, noise.max_pairwise_diff or 0.0)
        if drop:
            for check in ("max_drop_vs_baseline", "max_drop_ab"):
                rules.append({"metric": spec.name, check: round(_ceil(drop), 3), "alpha": alpha})
        return rules
    if spec.comparison is Comparison.COUNT and noise.n:
        margin = 1 / noise.n
        rules = [{"metric": spec.name, "max": round(_ceil(max(noise.values) + margin), 3)}]
        for check in ("max_rise_vs_baseline", "max_rise_ab"):
            rules.append({"metric": spec.name, check: round(_ceil(max(noise.values) - min(noise.values) + margin), 3),
                          "alpha": alpha})
        return rules
    return []


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} points"


def yaml_snippet(header: Sequence[str], noises: Sequence[tuple[MetricSpec, MetricNoise]], alpha: float,
                 cells: int = NIGHTLY_CELLS) -> str:
    """The YAML to paste into a config: comments with the measurements, then `thresholds:`."""
    lines = [f"# {line}" for line in header]
    rules: list[dict[str, Any]] = []
    for spec, noise in noises:
        spread = f"mean {noise.mean:.4f}, sd {noise.sd:.4f}, range {min(noise.values):.4f}-{max(noise.values):.4f}"
        lines.append(f"# {spec.name}: {spread} over {len(noise.values)} runs")
        if noise.flip_rate is not None:
            lines.append(f"#   {noise.flip_rate * 100:.1f}% of {noise.n} questions flip between two runs; "
                         f"largest swing {_pct(noise.max_pairwise_diff)}")
            lines.append(f"#   smallest drop McNemar detects at alpha {alpha:g} with {POWER:.0%} power (MDE): "
                         f"{_pct(noise.detectable_drop)} at {noise.n} questions"
                         + (f", {_pct(noise.detectable_drop_full)} at {noise.full_n}" if noise.full_n else ""))
            need = mcnemar_n(0.02, noise.flip_rate, alpha)
            lines.append(f"#   a 2-point drop needs {need if need else 'out of reach'} questions at that power")
            gate = suggested_min(noise, alpha, cells)
            lines.append(f"#   min {gate.limit:g} leaves room for {noise.n} questions' binomial noise and the spread: "
                         f"a healthy run fails it {gate.per_run:.2g} of the time, a nightly of {gate.cells} cells "
                         f"{gate.per_nightly:.2g}")
        elif noise.counts:
            lines.append(f"#   events per run: {', '.join(map(str, noise.counts))} of {noise.n}")
        rules += suggested(noise, spec, alpha, cells)
    lines.append("thresholds:")
    for rule in rules:
        lines.append("  - {" + ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}"
                                          for k, v in rule.items()) + "}")
    return "\n".join(lines) + "\n"


def from_history(judged: Sequence[Judged], header: Sequence[str]) -> str:
    """The `min` gates a history supports, by the noise model `evalkit history judge` uses (history/judge.py).

    Each series' suggested floor is exactly the boundary below which the judge calls its next night
    a regression, so the gate and the nightly's judgement agree on every cell they are given. A
    config's `min` applies to every cell, so the snippet's rule per metric is the lowest floor of
    the cells given (`--cell` narrows it to one); each cell's own floor is a comment above it.
    """
    lines = [f"# {line}" for line in header]
    lowest: dict[str, float] = {}
    for j in judged:
        s, ref = j.series, j.reference
        noise = (f"noise {_sd(j.noise.same_commit, s.scale)} same commit, {_sd(j.noise.across_commits, s.scale)} "
                 f"across commits")
        if ref is None:
            lines.append(f"# {s.name}: {len(s.points)} points, no floor to suggest yet ({noise})")
            continue
        floor = ref.floor(s.bigger_is_better)
        lines.append(f"# {s.name}: level {ref.level:.4f} (median of the last {ref.window}), {noise}; "
                     f"floor {floor:.6f}" + (f" (now {s.floor:g})" if s.floor is not None else ""))
        if s.bigger_is_better:
            lowest[s.metric] = min(floor, lowest.get(s.metric, floor))
    lines.append("thresholds:")
    lines += [f"  - {{metric: {metric}, min: {math.floor(floor * 1e6) / 1e6!r}}}" for metric, floor in lowest.items()]
    return "\n".join(lines) + "\n"


def _sd(sd: float | None, scale: float) -> str:
    return "-" if sd is None else f"{sd * scale:.2f} points"
