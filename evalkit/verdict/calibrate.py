"""Thresholds from measurement, each one checked where it came from before it is printed.

Public CI projects set accuracy thresholds by guesswork and get silent or flaky nightlies.
`evalkit calibrate` measures the noise each gate will face and prints, as YAML to paste under
`thresholds:`, only rules that the runs it measured pass (issue 47 item 4):

* gates that compare across cells (`max_drop_*`, `max_rise_*`, a divergence between two cells)
  from the spread between the healthy cells of the config's matrix run: twins and baseline
  (verdict/calibrate_cells.py); repeats of one cell would see none of it;
* floors (`min` on a score, `max` on a rate) below the lowest healthy cell by a night's spread
  (repeats of a cell measure it; without them, the healthy pairs' flips), at the exact bound
  that cell PASSes over the matrix's cells: always a share in [0, 1], never 0 or 1 (which could
  not fail);
* every rule judged by verdict/checks.py on every run it came from (calibrate_check.py): none is
  printed that leaves a healthy cell FAIL or INCONCLUSIVE, and the snippet says what it was
  checked on and what it FAILs among the cells left out as unhealthy.

Without a matrix run to check them on, the rules are printed commented out: a floor from one cell
says nothing of the other cells it will judge, and cross-cell gates need cells to cross.

The repeats' own measurement stays in the comments (`paired_noise`, `count_noise`): how far the
cell moves between runs, the questions that flip and the drop McNemar detects at that flip rate.

`from_history` (`evalkit calibrate --from-history`) reads the nightlies already recorded instead,
through the judge of `evalkit history judge` (history/judge.py `model_floors`): each floor is its
boundary for the next night, a point-estimate boundary with the noise already in it
(`gate: point`), suggested only where it can act (inside the metric's range) and checked against
every healthy point of the series it came from.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any

from evalkit.config import MatrixConfig
from evalkit.config.cells import expand
from evalkit.config.thresholds import ThresholdKind
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.units import Unit
from evalkit.stats.power import POWER, mcnemar_mde, mcnemar_n
from evalkit.verdict.calibrate_cells import CalibrationRun, Rule, cross_cell_rules, floor_rule
from evalkit.verdict.calibrate_check import Checked, check_rules

if TYPE_CHECKING:
    from evalkit.history.judge import Judge, Judged

DEFAULT_ALPHA = 0.01
WIDTH = 96
"""A comment line's width in the snippet (a PR's code block)."""


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


@dataclass(frozen=True)
class Suggestion:
    """The rules as checked (`checked`), what could not be suggested and why (`notes`), and
    whether they were checked on a matrix run (`active`: False prints them commented out)."""

    checked: list[Checked]
    notes: list[str]
    active: bool
    runs: list[CalibrationRun]
    repeats: list[CalibrationRun]

    @property
    def kept(self) -> list[Checked]:
        return [c for c in self.checked if c.dropped is None]


def _delta_checks(config: MatrixConfig, spec: MetricSpec) -> list[str]:
    """The cross-cell checks to suggest for `spec`: a score's drop or a rate's rise against each
    reference the config has (a value between two cells: the checks the config already gates it by)."""
    if spec.comparison is Comparison.PAIRWISE:
        return [t.check for t in config.thresholds if t.metric == spec.name and not t.kind.own_value
                and t.kind is not ThresholdKind.EQUIVALENT]
    if spec.comparison not in (Comparison.PAIRED, Comparison.COUNT):
        return []
    way = "max_drop" if spec.higher_is_better else "max_rise"
    return ([f"{way}_vs_baseline"] if config.baseline else []) + ([f"{way}_ab"] if config.ab else [])


def suggest(config: MatrixConfig, specs: Sequence[MetricSpec], runs: Sequence[CalibrationRun],
            repeats: Sequence[CalibrationRun], noises: Mapping[str, MetricNoise], alphas: Mapping[str, float]) -> Suggestion:
    """Every rule the measurements support, each checked on `runs` and `repeats` (see the module)."""
    cells = len(expand(config))
    measured = [*runs, *repeats]
    rules: list[Rule] = []
    notes: list[str] = []
    for spec in specs:
        alpha = alphas.get(spec.name, DEFAULT_ALPHA)
        found: list[Rule | str] = []
        if spec.comparison in (Comparison.PAIRED, Comparison.COUNT):
            noise = noises.get(spec.name)
            found.append(floor_rule(spec, measured, noise.values if noise else [], noise.n if noise else None,
                                    cells, DEFAULT_ALPHA))
        if runs:
            found += cross_cell_rules(spec, runs, _delta_checks(config, spec), alpha)
        rules += [r for r in found if isinstance(r, Rule)]
        notes += [r for r in found if isinstance(r, str)]
    if not runs and repeats:
        notes.append("no cross-cell gate: they need healthy twins and a baseline of a matrix run")
    return Suggestion(check_rules(rules, measured, specs, config.multiplicity), notes, bool(runs), list(runs),
                      list(repeats))


def _comment(text: str) -> list[str]:
    return [f"# {line}" for line in textwrap.wrap(text, WIDTH - 2, subsequent_indent="  ")] or ["#"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} points"


def noise_lines(noises: Sequence[tuple[MetricSpec, MetricNoise]], alpha: float) -> list[str]:
    """The repeats' measurement, per metric, as comments."""
    lines: list[str] = []
    for spec, noise in noises:
        spread = f"mean {noise.mean:.4f}, sd {noise.sd:.4f}, range {min(noise.values):.4f}-{max(noise.values):.4f}"
        lines += _comment(f"{spec.name}: {spread} over {len(noise.values)} runs")
        if noise.flip_rate is not None:
            lines += _comment(f"  {noise.flip_rate * 100:.1f}% of {noise.n} questions flip between two runs; "
                              f"largest swing {_pct(noise.max_pairwise_diff)}")
            lines += _comment(f"  smallest drop McNemar detects at alpha {alpha:g} with {POWER:.0%} power (MDE): "
                              f"{_pct(noise.detectable_drop)} at {noise.n} questions"
                              + (f", {_pct(noise.detectable_drop_full)} at {noise.full_n}" if noise.full_n else ""))
            need = mcnemar_n(0.02, noise.flip_rate, alpha)
            lines += _comment(f"  a 2-point drop needs {need if need else 'out of reach'} questions at that power")
        elif noise.counts:
            lines += _comment(f"  events per run: {', '.join(map(str, noise.counts))} of {noise.n}")
    return lines


def _checked_on(suggestion: Suggestion) -> str:
    """What the rules were judged on, in a sentence."""
    parts = []
    for run in suggestion.runs:
        left = "; ".join(f"{cell}: {why}" for cell, why in run.unhealthy.items())
        parts.append(f"run {run.path.name} ({len(run.healthy)} healthy cells"
                     + (f"; left out as not healthy: {left}" if left else "") + ")")
    if suggestion.repeats:
        parts.append(f"{len(suggestion.repeats)} repeats of {suggestion.repeats[0].rows[0]['id']}")
    return " and ".join(parts)


def _rule_text(rule: Rule) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}" for k, v in rule.fields().items()) + "}"


def snippet(header: Sequence[str], noises: Sequence[tuple[MetricSpec, MetricNoise]], suggestion: Suggestion,
            alpha: float) -> str:
    """The YAML to paste into a config: the measurements and checks as comments, then `thresholds:`."""
    lines = [line for text in header for line in _comment(text)]
    lines += noise_lines(noises, alpha)
    on = _checked_on(suggestion)
    kept = suggestion.kept
    if suggestion.active:
        lines += _comment(f"checked on {on}: no healthy cell FAILs any rule below or is left INCONCLUSIVE by it")
    else:
        lines += _comment(f"checked on {on} only: no matrix run of this config to check them on the cells they "
                          "would judge, so they are commented out; run `evalkit matrix` first (or pass --run), "
                          "then calibrate again")
    for note in suggestion.notes:
        lines += _comment(f"not suggested: {note}")
    for c in suggestion.checked:
        if c.dropped is not None:
            lines += _comment(f"dropped {_rule_text(c.rule)}: {c.dropped}")
    lines.append("thresholds:" if suggestion.active else "# thresholds:")
    for c in kept:
        caught = (f"; FAILs {', '.join(c.caught[:3])}{' ...' if len(c.caught) > 3 else ''}" if c.caught
                  else "")
        widened = f"; widened {c.widened} step{'s' if c.widened != 1 else ''} to pass them" if c.widened else ""
        lines += ["  " + line for line in _comment(f"{c.rule.why}; PASSes {c.judged} healthy cells{widened}{caught}")]
        lines.append(("  - " if suggestion.active else "  # - ") + _rule_text(c.rule))
    if not kept:
        lines.append("  []" if suggestion.active else "  # (none)")
    return "\n".join(lines) + "\n"


def from_history(judge: Judge, judged: Sequence[Judged], header: Sequence[str]) -> str:
    """The floors a history supports, by the judge `evalkit history judge` uses (history/judge.py).

    Each series' floor is exactly the boundary below which the judge calls its next night a
    regression: a point-estimate boundary with the noise already in it, so the rule says `gate:
    point`. A config's `min` (a rate's `max`) applies to every cell, so the snippet's rule per
    metric is the loosest floor of the cells given (`--cell` narrows it to one); each cell's own is
    a comment above it. A series whose floor cannot act (outside the metric's range, noise known
    to too few points) is said, with the nights it still needs, and suggests nothing. Every rule
    is checked against the healthy points of the series it came from: none lies beyond it."""
    lines = [line for text in header for line in _comment(text)]
    loosest: dict[str, tuple[float, bool]] = {}
    for j in judged:
        s, ref, unit = j.series, j.reference, j.series.measure
        noise = (f"noise {_sd(j.noise.same_commit, unit)} same commit, {_sd(j.noise.across_commits, unit)} across "
                 f"commits")
        if ref is None:
            short = j.shortfall
            needed = "" if short is None else (f"; {short.needed} more nights would give one" if short.needed
                                               else "; no number of nights would at this noise")
            lines += _comment(f"{s.name}: {len(s.points)} points, no floor that can act "
                              f"({short.why if short else 'none yet'}{needed}; {noise})")
            continue
        floor = unit.clamp(ref.floor(s.bigger_is_better))
        lines += _comment(f"{s.name}: level {unit.describe(ref.level)} ({ref.basis}, {ref.window} points), {noise}; "
                          f"floor {floor:.6g}" + (f" (now {s.floor:g})" if s.floor is not None else ""))
        current = loosest.get(s.metric)
        if current is None or (floor < current[0] if s.bigger_is_better else floor > current[0]):
            loosest[s.metric] = (floor, s.bigger_is_better)
    lines.append("thresholds:")
    for metric, (floor, bigger) in loosest.items():
        limit = math.floor(floor * 1e6) / 1e6 if bigger else math.ceil(floor * 1e6) / 1e6
        beyond = [p for k in judged if k.series.metric == metric
                  for p, ok in zip(k.series.points, _healthy(judge, k)) if ok and (p.value < limit if bigger else p.value > limit)]
        points = sum(sum(_healthy(judge, k)) for k in judged if k.series.metric == metric)
        if beyond:
            lines += ["  " + x for x in _comment(f"not suggested: {metric} {limit:g}: {len(beyond)} healthy points lie "
                                                 f"beyond it (the first {beyond[0].value:g} at {beyond[0].commit[:10]})")]
            continue
        lines += ["  " + x for x in _comment(f"checked: none of the {points} healthy points of its series lies beyond it")]
        lines.append(f"  - {{metric: {metric}, {'min' if bigger else 'max'}: {limit!r}, gate: point}}")
    return "\n".join(lines) + "\n"


def _healthy(judge: Judge, judged: Judged) -> list[bool]:
    """The judge's healthy points of a judged series (its own index in the judge's series)."""
    return judge.healthy(judge.series.index(judged.series))


def _sd(sd: float | None, unit: Unit) -> str:
    return "-" if sd is None else unit.describe_change(sd, signed=False)
