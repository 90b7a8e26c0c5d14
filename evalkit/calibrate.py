"""Thresholds from measurement: run one cell N times, then say which thresholds its noise supports.

Public CI projects set accuracy thresholds by guesswork and get silent or flaky nightlies. The
spread of repeated runs of one unchanged cell is the honest input: how much its score moves,
how many questions flip between runs, and from that the smallest drop the paired test can
detect at the configured alpha. `evalkit calibrate` prints the result as a YAML snippet to
paste under `thresholds:`.

The power model (McNemar exact, two-sided, as verdicts.py uses): between two runs of the same
cell a share `p_d` of the n questions flips, half each way. A regression of `d` makes another
`d * n` questions wrong, so of the D = n (p_d + d) discordant questions b = n (p_d / 2 + d) went
right -> wrong. The drop is detected when the binomial test of b out of D against 1/2 rejects
at alpha; the minimum detectable drop is the smallest d with that probability >= `power`.
"""

from __future__ import annotations

import functools
import math
import shutil
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import EXIT_CELL_FAILED, ConfigError, EvalkitError
from evalkit.evals import registry
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.store.files import check_run_id, new_run_id

if TYPE_CHECKING:
    from evalkit.config import MatrixConfig
    from evalkit.run.api import MatrixRequest
    from evalkit.run.options import Progress

POWER = 0.8
STEP = 0.0005
"""Resolution of the minimum detectable drop (0.05 points)."""
DEFAULT_ALPHA = 0.01


class CalibrationFailed(EvalkitError):
    """A repeat's cell did not run: its noise cannot be measured."""

    cli_exit_code = EXIT_CELL_FAILED


def detectable_drop(n: int, flip_rate: float, alpha: float, power: float = POWER) -> float | None:
    """Smallest accuracy drop the McNemar exact test detects with probability >= `power`.

    None when no drop up to the whole question set would be (n too small). Power grows with the
    drop, so the grid of STEP-sized drops is bisected.
    """
    low, high = 0, int((1 - flip_rate) / STEP)  # detected at `high` steps, not at `low`
    if high < 1 or detection_power(n, flip_rate, high * STEP, alpha) < power:
        return None
    while high - low > 1:
        middle = (low + high) // 2
        if detection_power(n, flip_rate, middle * STEP, alpha) >= power:
            high = middle
        else:
            low = middle
    return round(high * STEP, 4)


def detection_power(n: int, flip_rate: float, drop: float, alpha: float) -> float:
    """P(McNemar p < alpha) under the model above, exactly: the number of discordant questions
    D ~ Binomial(n, flip_rate + drop), and b | D ~ Binomial(D, (flip_rate / 2 + drop) / (flip_rate + drop)).

    D is summed over, not fixed at its mean: with few discordant questions (a clean engine) the
    chance of seeing enough of them is most of the story.
    """
    import numpy as np
    from scipy.stats import binom

    share = flip_rate + drop
    if share <= 0:
        return 0.0
    q = min(1.0, (flip_rate / 2 + drop) / share)
    mean, sd = n * share, math.sqrt(n * share * (1 - share))
    ds = np.arange(max(1, int(mean - 8 * sd - 2)), min(n, int(mean + 8 * sd + 2)) + 1)
    total = 0.0
    for discordant, weight in zip(ds, binom.pmf(ds, n, share)):
        critical = _critical_count(int(discordant), alpha)
        if critical is not None:
            total += weight * binom.sf(critical - 1, discordant, q)
    return float(total)


@functools.lru_cache(maxsize=4096)
def _critical_count(discordant: int, alpha: float) -> int | None:
    """Smallest b whose two-sided exact binomial p-value against 1/2 is below alpha."""
    import numpy as np
    from scipy.stats import binom

    bs = np.arange(math.ceil(discordant / 2), discordant + 1)
    below = np.nonzero(np.minimum(1.0, 2 * binom.sf(bs - 1, discordant, 0.5)) < alpha)[0]
    return int(bs[below[0]]) if len(below) else None


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
    drop = detectable_drop(n, flip_rate, alpha) if n else None
    drop_full = detectable_drop(full_n, flip_rate, alpha) if full_n and full_n != n else None
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


def suggested(noise: MetricNoise, spec: MetricSpec, alpha: float) -> list[dict[str, Any]]:
    """Threshold rules the measured noise supports, in the config's `thresholds:` shape.

    * `min` (higher is better): the worst run, less three standard deviations, rounded down to
      half a point: a healthy rerun stays above it;
    * `max_drop_*` with `alpha`: the larger of the detectable drop and the largest swing between
      two runs, rounded up: smaller drops are either undetectable or rerun noise;
    * counts (lower is better): `max` at the worst run's rate plus one event's worth, and
      `max_rise_*` at the same margin with `alpha`.
    """
    if spec.comparison is Comparison.PAIRED:
        rules: list[dict[str, Any]] = [{"metric": spec.name, "min": round(_floor(min(noise.values) - 3 * noise.sd), 3)}]
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


def yaml_snippet(header: Sequence[str], noises: Sequence[tuple[MetricSpec, MetricNoise]], alpha: float) -> str:
    """The YAML to paste into a config: comments with the measurements, then `thresholds:`."""
    lines = [f"# {line}" for line in header]
    rules: list[dict[str, Any]] = []
    for spec, noise in noises:
        spread = f"mean {noise.mean:.4f}, sd {noise.sd:.4f}, range {min(noise.values):.4f}-{max(noise.values):.4f}"
        lines.append(f"# {spec.name}: {spread} over {len(noise.values)} runs")
        if noise.flip_rate is not None:
            lines.append(f"#   {noise.flip_rate * 100:.1f}% of {noise.n} questions flip between two runs; "
                         f"largest swing {_pct(noise.max_pairwise_diff)}")
            lines.append(f"#   smallest drop McNemar detects at alpha {alpha:g} with {POWER:.0%} power: "
                         f"{_pct(noise.detectable_drop)} at {noise.n} questions"
                         + (f", {_pct(noise.detectable_drop_full)} at {noise.full_n}" if noise.full_n else ""))
        elif noise.counts:
            lines.append(f"#   events per run: {', '.join(map(str, noise.counts))} of {noise.n}")
        rules += suggested(noise, spec, alpha)
    lines.append("thresholds:")
    for rule in rules:
        lines.append("  - {" + ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}"
                                          for k, v in rule.items()) + "}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Running the repeats


@dataclass(frozen=True)
class Calibration:
    """N runs of one cell and what they support."""

    cell: str
    path: Path
    """The calibration folder: one run folder per repeat (``repeat-1`` ...) and calibrate.json."""
    runs: list[Path]
    noises: list[tuple[MetricSpec, MetricNoise]]
    alphas: dict[str, float]
    yaml: str

    def to_dict(self) -> dict[str, Any]:
        return {"cell": self.cell, "path": str(self.path), "runs": [str(r) for r in self.runs],
                "metrics": [asdict(n) | {"mean": n.mean, "sd": n.sd, "alpha": self.alphas[s.name],
                                         "suggested": suggested(n, s, self.alphas[s.name])}
                            for s, n in self.noises],
                "yaml": self.yaml}


def _alpha(config: MatrixConfig, metric: str, default: float | None) -> float:
    """`--alpha`, else the smallest alpha the config's thresholds use for the metric, else 0.01."""
    if default is not None:
        return default
    alphas = [t.alpha for t in config.thresholds if t.metric == metric and t.alpha is not None]
    return min(alphas) if alphas else DEFAULT_ALPHA


def run_calibration(request: MatrixRequest, cell_id: str, repeats: int, alpha: float | None = None,
                    name: str | None = None, progress: Progress | None = None) -> Calibration:
    """Run `cell_id` of the request's config `repeats` times (each its own engine start), then
    measure its noise; repeats already finished in the calibration folder are kept (resume)."""
    from evalkit.config import resolve_config
    from evalkit.matrix import expand
    from evalkit.run.api import run_matrix
    from evalkit.store import read_json, write_json
    from evalkit.verdicts import flat_metrics, marks

    if repeats < 2:
        raise ConfigError(f"--repeats {repeats}: calibrating needs at least 2 runs of the cell")
    config, config_path = resolve_config(request.model, request.config_path)
    cell = next((c for c in expand(config) if c.id == cell_id), None)
    if cell is None:
        raise ConfigError(f"--cell {cell_id}: not a cell of {config_path} (cells: {', '.join(c.id for c in expand(config))})")
    folder = request.results_dir / check_run_id(name or new_run_id(f"calibrate-{config_path.stem}-{cell_id}"))
    selection = ",".join(f"{axis}={value}" for axis, value in cell.axes.items())
    runs = []
    for i in range(1, repeats + 1):
        run_id = f"repeat-{i}"
        done = folder / run_id / "summary.json"
        if not (done.is_file() and read_json(done).get("status") == "complete"):
            if (folder / run_id).exists():
                shutil.rmtree(folder / run_id)  # an interrupted repeat is run again whole
            run_matrix(replace(request, config_path=config_path, model=None, only=(selection,) if selection else (),
                               run_id=run_id, resume=None, results_dir=folder, history=False), progress)
        record = read_json(folder / run_id / cell.id / "cell.json")
        if record.get("status") != "ok":
            message = (record.get("error") or {}).get("message", record.get("status"))
            raise CalibrationFailed(f"{folder / run_id}: cell {cell.id} did not run ({message}); "
                                    "calibrate on a cell that runs")
        runs.append(folder / run_id)
    records = [read_json(run / cell.id / "cell.json") for run in runs]
    flats = [flat_metrics(r) for r in records]
    noises, alphas = [], {}
    for ev in registry.evals():
        for spec in ev.metrics:
            if any(spec.name not in f for f in flats):
                continue
            alphas[spec.name] = _alpha(config, spec.name, alpha)
            if spec.comparison is Comparison.PAIRED:
                per_run = [marks(run / cell.id, spec) for run in runs]
                noises.append((spec, paired_noise(spec, per_run, [f[spec.name] for f in flats], alphas[spec.name],
                                                  full_n=ev.size)))
            elif spec.comparison is Comparison.COUNT:
                noises.append((spec, count_noise(spec, flats)))
    n = {noise.n for _, noise in noises if noise.flip_rate is not None}
    header = [f"evalkit calibrate: {repeats} runs of {cell.id} ({config_path.name}, model {config.model})",
              f"{folder}" + (f"; {', '.join(map(str, sorted(n)))} questions per run" if n else "")]
    snippet = yaml_snippet(header, noises, min(alphas.values(), default=DEFAULT_ALPHA))
    calibration = Calibration(cell.id, folder, runs, noises, alphas, snippet)
    write_json(folder / "calibrate.json", calibration.to_dict())
    return calibration
