"""A config's thresholds: which metric, which check (min, max, a drop or rise against the
baseline or the fix-on twin, equivalence), its margin and alpha. Split from schema.py, which
holds the rest of the config; validated against the metrics of the config's own evals.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Literal

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evalkit.config.base import StrictModel

if TYPE_CHECKING:
    from evalkit.evals.base import MetricSpec


METRICS_CONTEXT = "metrics"
"""The validation context's key holding the config's metric specs (set by `Evals`)."""


def _known_specs(info: ValidationInfo) -> list[MetricSpec]:
    """The metrics a threshold may name: its config's (the validation context), or the built-in
    evals' fixed ones for a threshold validated alone."""
    from evalkit.evals import registry

    known = info.context.get(METRICS_CONTEXT) if isinstance(info.context, dict) else None
    return registry.builtins().metrics() if known is None else known


CHECKS = ("min", "max", "max_drop_vs_baseline", "max_drop_ab", "max_rise_vs_baseline", "max_rise_ab",
          "equivalent_vs_baseline", "equivalent_ab")


class ThresholdKind(str, Enum):
    """What a check bounds, parsed once from its name: `max_drop_ab` is MAX_DROP (against the
    fix-on twin). Flags and summary.json keep the name; code asks the kind."""

    MIN = "min"
    MAX = "max"
    MAX_DROP = "max_drop"
    MAX_RISE = "max_rise"
    EQUIVALENT = "equivalent"

    @classmethod
    def of(cls, check: str) -> ThresholdKind:
        """The kind of a check name (a Threshold field, a flag's `check`); ValueError for no check."""
        return cls(check.removesuffix("_vs_baseline").removesuffix("_ab"))

    @property
    def own_value(self) -> bool:
        """Bounds a cell's own value (min, max), not its delta against a reference."""
        return self in (ThresholdKind.MIN, ThresholdKind.MAX)


class Threshold(StrictModel):
    """One rule; exactly one of the checks is set.

    `min`/`max` bound a cell's own value; `max_drop_*`/`max_rise_*` bound its delta against the
    baseline cell or against its fix-on twin (`ab`), in absolute units (0.02 = 2 points);
    `equivalent_*` passes only when the paired difference is shown to lie inside +-margin (two
    one-sided tests at `alpha`: the contract "must not move"). A `min`/`max` on a share is judged
    against its sampling noise at `alpha` (0.05 unless set), or on the point estimate with
    `gate: point`. Every check is PASS, FAIL or
    INCONCLUSIVE (verdict/checks.py): a tested delta that is not significant is INCONCLUSIVE when the
    smallest drop its test could see with probability `power` (its MDE) exceeds the margin
    times `inconclusive_factor`, or, for a detect-only check (`detects`), the change it exists to
    catch: a margin a run cannot resolve (64 generations and a 5-point collapse margin) still
    PASSES a healthy cell when the run could have seen the bug class the check is for.
    """

    metric: str = Field(description="A registered eval's metric, e.g. gsm8k.flexible.")
    min: float | None = None
    max: float | None = None
    max_drop_vs_baseline: float | None = Field(None, ge=0)
    max_drop_ab: float | None = Field(None, ge=0)
    max_rise_vs_baseline: float | None = Field(None, ge=0)
    max_rise_ab: float | None = Field(None, ge=0)
    equivalent_vs_baseline: float | None = Field(None, gt=0)
    equivalent_ab: float | None = Field(None, gt=0)
    alpha: float | None = Field(None, gt=0, lt=1, description="Count a delta only when p < alpha "
                                "(the family-adjusted p, see `multiplicity`).")
    power: float = Field(0.8, gt=0, lt=1, description="Power at which the check's MDE is reported.")
    inconclusive_factor: float = Field(2.0, ge=1, description="A non-significant check is INCONCLUSIVE when its "
                                       "MDE exceeds the margin times this (NeMo Evaluator uses 2; 1 is strict).")
    detects: float | None = Field(None, gt=0, description="Detect-only: the change the check exists to catch (0.2 = "
                                  "20 points, at least the margin); not significant, it PASSES when its MDE is within it.")
    action: Literal["fail", "warn"] = "fail"
    gate: Literal["noise", "point"] = Field(
        "noise", description="`min`/`max` only: `noise` (default) FAILs a value beyond the limit by more than its "
        "sampling noise at alpha (exact binomial from the cell's n), PASSes one inside by more, INCONCLUSIVE "
        "between; `point` FAILs on the point estimate alone, as an engine CI's accuracy gate does (ATOM's catalog).")
    _spec: MetricSpec | None = PrivateAttr(None)

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str, info: ValidationInfo) -> str:
        names = [spec.name for spec in _known_specs(info)]
        if metric not in names:
            raise ValueError(f"unknown metric (known: {', '.join(names)})")
        return metric

    @model_validator(mode="after")
    def _one_check(self, info: ValidationInfo) -> Threshold:
        set_checks = [c for c in CHECKS if getattr(self, c) is not None]
        if len(set_checks) != 1:
            raise ValueError(f"set exactly one of {', '.join(CHECKS)} (got {set_checks or 'none'})")
        from evalkit.evals.evalset import spec_named

        spec = spec_named(self.metric, _known_specs(info))
        self._fits_pairwise(set_checks[0], spec)
        self._fits_equivalence(set_checks[0], spec)
        self._fits_detects(set_checks[0])
        self._fits_gate(set_checks[0])
        self._fits_unit(set_checks[0], spec)
        self._spec = spec
        return self

    def _fits_equivalence(self, check: str, spec: MetricSpec | None) -> None:
        """Two one-sided tests need paired marks (the shared questions) and a level."""
        from evalkit.evals.base import Comparison

        if ThresholdKind.of(check) is not ThresholdKind.EQUIVALENT:
            return
        if spec is None or spec.comparison is not Comparison.PAIRED:
            raise ValueError(f"{check}: {self.metric} is not scored per question (equivalence is tested on paired marks)")
        if self.alpha is None or self.alpha >= 0.5:
            raise ValueError(f"{check}: set alpha (below 0.5): two one-sided tests at alpha, a {{1 - 2 alpha}} interval")

    def _fits_detects(self, check: str) -> None:
        """Detect-only needs a test (a p and an MDE) on a drop or rise, and a change to catch at least the margin."""
        if self.detects is not None and (check.startswith("equivalent") or self.kind.own_value or self.alpha is None):
            raise ValueError(f"detects: only a max_drop_* or max_rise_* check with alpha can be detect-only (got {check})")
        if self.detects is not None and self.detects < getattr(self, check):
            raise ValueError(f"detects: {self.detects:g} is below the margin {check}: {getattr(self, check):g}")

    def _fits_unit(self, check: str, spec: MetricSpec | None) -> None:
        """A limit the metric can never reach, or a margin larger than any change it can make,
        is a mistake a whole matrix of engine starts would only reveal as 12 FAILs (`min: 90` on a
        share) or as a check that can never fail: bad input here, named in the metric's unit
        (evals/units.py). A `min`/`max` must lie in the unit's range; a margin (`max_drop_*`,
        `max_rise_*`, `equivalent_*`) and `detects` within the largest change it can make."""
        if spec is None:
            return
        unit = spec.unit
        why = unit.check(self.value) if ThresholdKind.of(check).own_value else unit.check_change(getattr(self, check))
        if why is not None:
            raise ValueError(f"{self.metric} {why}")
        if self.detects is not None and (why := unit.check_change(self.detects)) is not None:
            raise ValueError(f"detects: {self.metric} {why}")

    def _fits_gate(self, check: str) -> None:
        """`gate` says how a cell's own value is held to a limit; a delta is always tested."""
        if self.gate == "point" and not ThresholdKind.of(check).own_value:
            raise ValueError(f"gate: point applies to min and max only (got {check})")

    def _fits_pairwise(self, check: str, spec: MetricSpec | None) -> None:
        """A metric measured between two cells (PAIRWISE) has no value of its own and no p-value,
        and moves one way only from the reference against itself (a divergence rises from 0, an
        agreement drops from 1): other rules could never break, and would pass silently."""
        from evalkit.evals.base import Comparison

        if spec is None or spec.comparison is not Comparison.PAIRWISE:
            return
        way = ThresholdKind.MAX_DROP if spec.higher_is_better else ThresholdKind.MAX_RISE
        if ThresholdKind.of(check) is not way:
            raise ValueError(f"{check}: {self.metric} is measured between two cells: use {way.value}_vs_baseline "
                             f"or {way.value}_ab")
        if self.alpha is not None:
            raise ValueError(f"alpha: {self.metric} has no test (a value between two cells, with a noise floor "
                             "from repeats instead)")

    @property
    def spec(self) -> MetricSpec | None:
        """The metric's spec as the threshold's config reports it (kind, label, n), resolved when
        validated: the checks read it here, never from what another config made known."""
        return self._spec

    @property
    def check(self) -> str:
        return next(c for c in CHECKS if getattr(self, c) is not None)

    @property
    def kind(self) -> ThresholdKind:
        return ThresholdKind.of(self.check)

    @property
    def value(self) -> float:
        return float(getattr(self, self.check))
