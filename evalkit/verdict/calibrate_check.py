"""Every rule `evalkit calibrate` suggests, judged on the runs it came from before it is printed.

A suggestion is a claim: "a healthy night passes this". It is checked the way the nightly will
check it, by verdict/checks.py on the runs' own rows (their deltas as stored, the adjustment
across cells the config asks for), rule by rule (a threshold's family is its own cells). A rule
that leaves a healthy cell FAIL or INCONCLUSIVE is widened one step at a time (half a point for a
share, a quarter of itself for a value between two cells) and checked again; one still not
passing after `MAX_STEPS` is dropped and the snippet says why. What each rule FAILs among the
cells left out as unhealthy is what it catches, and the snippet says that too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from evalkit.config import Threshold
from evalkit.config.thresholds import METRICS_CONTEXT, ThresholdKind
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.evalset import spec_named
from evalkit.stats.bounds import STEP
from evalkit.stats.multiplicity import Method
from evalkit.verdict.calibrate_cells import CalibrationRun, Rule
from evalkit.verdict.checks import FAIL, INCONCLUSIVE, Evidence, assess_rows

MAX_STEPS = 200
"""Widening steps before a rule is dropped: a share's whole range (a floor widened to its range's
edge could no longer fail, and is dropped there)."""


@dataclass(frozen=True)
class Checked:
    """A rule as judged on the runs: outcomes on their healthy cells, the unhealthy cells it
    FAILs (`caught`, "cell (run)"), how many steps it was widened, and why it was dropped (None: kept)."""

    rule: Rule
    healthy: dict[str, int]
    caught: list[str] = field(default_factory=list)
    widened: int = 0
    dropped: str | None = None

    @property
    def judged(self) -> int:
        """Healthy cells it was checked on."""
        return sum(self.healthy.values())


def judge(rule: Rule, runs: Sequence[CalibrationRun], specs: Sequence[MetricSpec],
          method: Method) -> tuple[Counter[str], list[str], list[str]]:
    """(outcomes on healthy cells, the healthy cells not PASSing, the unhealthy cells FAILing) of one rule."""
    threshold = Threshold.model_validate(rule.fields(), context={METRICS_CONTEXT: list(specs)})
    healthy: Counter[str] = Counter()
    bad, caught = [], []
    for run in runs:
        found = assess_rows([threshold], [Evidence.of(row) for row in run.rows], method)
        for row, records in zip(run.rows, found):
            for record in records:
                where = f"{row['id']} ({run.label})"
                if row["id"] in run.unhealthy:
                    caught += [where] if record.outcome == FAIL else []
                    continue
                healthy[record.outcome] += 1
                if record.outcome in (FAIL, INCONCLUSIVE):
                    bad.append(f"{where} {record.outcome}")
    return healthy, bad, caught


def check_rules(rules: Sequence[Rule], runs: Sequence[CalibrationRun], specs: Sequence[MetricSpec],
                method: Method) -> list[Checked]:
    """Each rule judged on `runs`, widened until no healthy cell FAILs or is INCONCLUSIVE (or dropped)."""
    out = []
    for rule in rules:
        spec = spec_named(rule.metric, list(specs))
        assert spec is not None, "a suggested rule names a metric of the runs"
        steps, current = 0, rule
        while True:
            healthy, bad, caught = judge(current, runs, specs, method)
            if not bad:
                out.append(Checked(current, dict(healthy), caught, steps))
                break
            if steps == MAX_STEPS:
                out.append(Checked(rule, dict(healthy), caught, steps,
                                   f"still {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} after widening it "
                                   f"{steps} steps"))
                break
            step = current.value / 4 if spec.comparison is Comparison.PAIRWISE else STEP
            wider = current.widened(step, spec.unit)
            if wider.value == current.value or ThresholdKind.of(wider.check).own_value and wider.value in (
                    spec.unit.low, spec.unit.high):
                out.append(Checked(rule, dict(healthy), caught, steps,
                                   f"still {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} at {current.value:g}, "
                                   f"and a wider one could not fail"))
                break
            current, steps = wider, steps + 1
    return out
