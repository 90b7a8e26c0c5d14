"""Each threshold on each cell: PASS, FAIL or INCONCLUSIVE, with its MDE, p and adjusted p.

A check that found nothing is only a pass if it could have found something. Per threshold and
cell (the summary row's `checks`, one record each):

* a delta against a reference (`max_drop_*`, `max_rise_*`) with `alpha` FAILS when the change is
  beyond the margin (and beyond the noise floor of repeats) and its p-value, adjusted across the
  cells the threshold is checked on (stats/multiplicity.py, `multiplicity:` in the config), is below
  alpha. Otherwise it is INCONCLUSIVE when its test could not have seen a change of the margin:
  its MDE (stats/power.py: from its n and the observed discordance for paired marks, the reference's
  rate for counts) exceeds margin x `inconclusive_factor`, or the change is beyond the margin
  without significance; else PASS. A detect-only threshold (`detects`, the change it exists to
  catch) is FAIL as above, else PASS when its test could have seen that change (MDE <= detects),
  else INCONCLUSIVE: a margin smaller than the run resolves no longer leaves healthy cells
  INCONCLUSIVE every night, and the bug class is still caught. Without a test (no alpha, a continuous value, a value between
  two cells) the MDE is the noise floor of repeats when known;
* `equivalent_*` PASSES when two one-sided tests show the paired difference inside +-margin
  (adjusted p below alpha), FAILS when it is shown beyond the margin, else INCONCLUSIVE;
* `min`/`max` on a share with a known n (`gate: noise`, the default) are tested like the rest:
  exact one-sided binomial tests of the cell's k of n against the limit (stats/bounds.py), "beyond
  the limit" (`p`) and "inside it" (`p_equivalent`), each adjusted across the cells; FAIL when
  beyond is shown at alpha (0.05 when the threshold sets none), PASS when inside is, else
  INCONCLUSIVE: the limit lies within the cell's sampling noise (`ci`: the exact bounds at the
  level the adjustment could use, alpha / cells each side). `gate: point`, and a value with no n
  (a throughput), FAIL strictly beyond the limit and PASS otherwise, as an engine CI's gate does;
* NOT_CHECKED: the cell lacks the metric for a known reason, the two setups differ, the two cells
  ran differently beyond what the comparison expects (`differs`, store/comparability.py), or they
  scored no question in common.

`flags` (broken or warned) stay what they were: a FAIL or a NOT_CHECKED makes one, with the same
message as before plus the adjusted p-value when it differs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.config import Threshold
from evalkit.config.thresholds import ThresholdKind
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.evalset import eval_name
from evalkit.stats.bounds import bound_test, clopper_pearson
from evalkit.stats.multiplicity import METHOD_WORDS, Method, adjust
from evalkit.stats.power import (
    equivalence_margin,
    equivalence_n,
    fisher_mde,
    fisher_n,
    mcnemar_mde,
    mcnemar_n,
)
from evalkit.stats.tests import paired_equivalence
from evalkit.verdict.summary import CheckRecord, Delta, Deltas, Flag

PASS, FAIL, INCONCLUSIVE, NOT_CHECKED = "PASS", "FAIL", "INCONCLUSIVE", "NOT_CHECKED"
OUTCOMES = (FAIL, INCONCLUSIVE, PASS, NOT_CHECKED)
UNDECIDED = "UNDECIDED"
"""A delta's check between `assess` and `decide` (its family's adjusted p decides it): never written."""
OWN_ALPHA = 0.05
"""The one-sided level of a `min`/`max` check's binomial tests when the threshold sets no alpha."""
_TEST_NAMES = {Comparison.PAIRED: "McNemar", Comparison.COUNT: "Fisher"}


def rule_text(threshold: Threshold) -> str:
    """`gsm8k.flexible max_drop_vs_baseline 0.02 alpha 0.01`: a threshold in one line."""
    alpha = f" alpha {threshold.alpha:g}" if threshold.alpha is not None else ""
    detects = f" detects {threshold.detects:g}" if threshold.detects is not None else ""
    gate = " gate point" if threshold.gate == "point" else ""
    return f"{threshold.metric} {threshold.check} {threshold.value:g}{alpha}{detects}{gate}"


def _against(check: str) -> str:
    return "vs_baseline" if check.endswith("vs_baseline") else "vs_ab"


@dataclass(frozen=True)
class Evidence:
    """What the thresholds read of one cell, and nothing else: its figures, why a missing one is
    missing, and its deltas against each reference. The matrix's cells, a comparison's cells
    against run A, a bisect's bad end and calibrate's healthy cells are all judged from one of
    these; judging returns records and changes nothing it reads."""

    id: str
    ok: bool
    """The cell ran and was scored (a cell that did not is never judged)."""
    metrics: Mapping[str, Any]
    """Flat metrics under dotted names (`Eval.flat`)."""
    unmeasured: Mapping[str, str] = field(default_factory=dict)
    """Metric -> why the cell has no value for it (said as NOT_CHECKED)."""
    vs_baseline: Deltas | None = None
    vs_ab: Deltas | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Evidence:
        """From a summary-shaped row (`id`, `status`, `metrics`, `unmeasured`, `vs_baseline`, `vs_ab`)."""
        return cls(id=row["id"], ok=row["status"] == "ok", metrics=row["metrics"],
                   unmeasured=row.get("unmeasured") or {}, vs_baseline=row.get("vs_baseline"),
                   vs_ab=row.get("vs_ab"))

    def against(self, check: str) -> Deltas | None:
        """The deltas a delta check reads: against the baseline or the fix-on twin."""
        return self.vs_baseline if _against(check) == "vs_baseline" else self.vs_ab


@functools.lru_cache(maxsize=4096)
def _paired_mde(n: int, discordant: int, alpha: float, power: float) -> float | None:
    return mcnemar_mde(n, discordant / n, alpha, power) if n else None


@functools.lru_cache(maxsize=4096)
def _count_mde(n: int, n_ref: int, base_rate: float, alpha: float, power: float) -> float | None:
    return fisher_mde(n, n_ref, base_rate, alpha, power)


def assess(threshold: Threshold, index: int, cell: Evidence) -> CheckRecord | None:
    """The check record of `threshold` (the config's `index`-th) on one cell, before the
    family adjustment (`decide` finishes it); None when the threshold does not apply to the cell
    (a delta against a reference the cell does not have, e.g. the baseline itself)."""
    check, metric, metrics = threshold.check, threshold.metric, cell.metrics
    spec = threshold.spec
    base = CheckRecord(threshold=index, rule=rule_text(threshold), metric=metric, check=check, margin=threshold.value,
                       action=threshold.action, alpha=threshold.alpha, power=threshold.power,
                       factor=threshold.inconclusive_factor, detects=threshold.detects, reference=None,
                       value=metrics.get(metric), diff=None, n=None, p=None, p_adj=None, mde=None, n_needed=None,
                       outcome=UNDECIDED)
    if threshold.kind.own_value:
        if metrics.get(metric) is None:
            reason = cell.unmeasured.get(metric)
            return base.updated(outcome=NOT_CHECKED, why=reason) if reason else None
        return base.updated(**_own_value(threshold, metrics))
    deltas = cell.against(check)
    delta = deltas.of(metric) if deltas is not None else None
    if deltas is None or delta is None:
        reason = cell.unmeasured.get(metric) if metrics.get(metric) is None else None
        return base.updated(outcome=NOT_CHECKED, why=reason) if reason else None
    base = base.updated(reference=deltas.reference)
    if delta.differs or delta.setup_differs or delta.refused:
        why = (f"ran differently: {'; '.join(delta.differs)}" if delta.differs
               else f"eval setup differs ({', '.join(delta.setup_differs)})" if delta.setup_differs else delta.refused)
        refusal = {k: v for k, v in (("differs", delta.differs), ("setup_differs", delta.setup_differs),
                                     ("refused", delta.refused)) if v}
        return base.updated(outcome=NOT_CHECKED, why=why, **refusal)
    base = base.updated(diff=delta.diff, n=delta.n, noise_floor=delta.noise_floor)
    if spec is not None and spec.comparison is Comparison.PAIRWISE:
        base = base.updated(between=delta.value if "value" in delta.model_fields_set else delta.diff)
    if threshold.kind is ThresholdKind.EQUIVALENT:
        return base.updated(**_equivalence(threshold, delta))
    tested = threshold.alpha is not None and delta.p_value is not None
    # p_value: shown in the flag's words even when no alpha asks for a test
    base = base.updated(p=delta.p_value if tested else None, p_value=delta.p_value)
    if not tested or threshold.alpha is None:
        # an alpha with no test: never significant
        return base.updated(mde=delta.noise_floor, untestable=threshold.alpha is not None)
    if spec is not None and spec.comparison is Comparison.PAIRED and delta.n:
        discordant = (delta.right_only_in_cell or 0) + (delta.right_only_in_reference or 0)
        return base.updated(discordance=discordant / delta.n,
                            mde=_paired_mde(delta.n, discordant, threshold.alpha, threshold.power))
    if (spec is not None and spec.comparison is Comparison.COUNT and delta.n and delta.n_reference
            and delta.rate_reference is not None):
        return base.updated(base_rate=delta.rate_reference, n_reference=delta.n_reference,
                            mde=_count_mde(delta.n, delta.n_reference, delta.rate_reference, threshold.alpha,
                                           threshold.power))
    return base


def _own_value(threshold: Threshold, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A `min`/`max` check's figures: a share with a known n under `gate: noise` gets its two
    one-sided p-values and waits for the family's adjustment (`decide`); `gate: point`, or a
    value with no n, is decided here on the point estimate."""
    value, limit = metrics[threshold.metric], threshold.value
    floor = threshold.check == "min"
    n = n_of(threshold.spec, metrics)
    if threshold.gate == "point" or not n or not 0 <= value <= 1 or not 0 <= limit <= 1:
        broken = value < limit if floor else value > limit
        return {"outcome": FAIL if broken else PASS, "n": n}
    test = bound_test(round(value * n), n, limit)
    return {"n": n, "alpha": threshold.alpha or OWN_ALPHA, "p": test.beyond(floor), "p_equivalent": test.inside(floor)}


def _own_decided(record: CheckRecord, p_adj: float | None, p_inside_adj: float | None) -> CheckRecord:
    """A noise-gated `min`/`max` from its adjusted p-values: PASS when inside the limit is shown,
    FAIL when beyond is, else INCONCLUSIVE; `ci` the exact bounds at alpha / (the cells adjusted
    together) each side, which every INCONCLUSIVE cell's limit lies within whatever the method."""
    alpha, n, value = record.alpha or OWN_ALPHA, record.n, record.value
    assert n is not None and value is not None, "assess sets n and the value of a noise-gated check"
    if p_inside_adj is not None and p_inside_adj < alpha:
        outcome = PASS
    elif p_adj is not None and p_adj < alpha:
        outcome = FAIL
    else:
        outcome = INCONCLUSIVE
    each = alpha / (record.family if record.multiplicity != "none" and record.family > 1 else 1)
    low, high = clopper_pearson(round(value * n), n, each)
    return record.updated(p_adj=p_adj, p_equivalent_adj=p_inside_adj, outcome=outcome, ci=[low, high],
                          ci_level=1 - 2 * each)


def n_of(spec: MetricSpec | None, metrics: Mapping[str, Any]) -> int | None:
    """The n behind a share: a count's `n_metric`, else the eval's `<eval>.n_eff` (GSM8K's scored
    questions: an unscorable one is no evidence) or `<eval>.n`."""
    if spec is None or spec.comparison not in (Comparison.PAIRED, Comparison.COUNT):
        return None
    ev = eval_name(spec.name)
    n = metrics.get(spec.n_metric or "") or metrics.get(f"{ev}.n_eff", metrics.get(f"{ev}.n"))
    return int(n) if isinstance(n, (int, float)) and n > 0 else None


def _equivalence(threshold: Threshold, delta: Delta) -> dict[str, Any]:
    """TOST on the paired marks; `p` is the p-value of "moved beyond the margin", `p_equivalent`
    that of "inside it"."""
    alpha = threshold.alpha or OWN_ALPHA
    n, f, g = delta.n or 0, delta.right_only_in_cell or 0, delta.right_only_in_reference or 0
    both = delta.both_right
    if both is None:  # stored before both_right: the cell's share and its flips give it
        both = round(((delta.model_extra or {}).get("acc_cell") or 0) * n) - f
    eq = paired_equivalence(both, f, g, n - both - f - g, threshold.value, alpha)
    return {"p": eq.p_outside, "p_equivalent": eq.p_equivalent, "ci": [eq.low, eq.high], "ci_level": eq.confidence,
            "discordance": (f + g) / n, "mde": equivalence_margin(n, (f + g) / n, alpha, threshold.power)}


def decide(record: CheckRecord, p_adj: float | None, p_equivalent_adj: float | None = None) -> CheckRecord:
    """The record's outcome from its adjusted p-value(s) (None: not tested). See the module docstring."""
    kind = ThresholdKind.of(record.check)
    if record.outcome != UNDECIDED:  # NOT_CHECKED, or a min/max decided on its point estimate
        return record
    if kind.own_value:
        return _own_decided(record, p_adj, p_equivalent_adj)
    alpha, factor = record.alpha, record.factor or 1
    margin, diff = record.margin, record.diff
    assert margin is not None and diff is not None, "assess sets both on a delta's check"
    if kind is ThresholdKind.EQUIVALENT:
        if p_equivalent_adj is not None and alpha is not None and p_equivalent_adj < alpha:
            outcome = PASS
        elif p_adj is not None and alpha is not None and p_adj < alpha:
            outcome = FAIL
        else:
            outcome = INCONCLUSIVE
        return _with_n_needed(record.updated(p_adj=p_adj, p_equivalent_adj=p_equivalent_adj, outcome=outcome))
    change = -diff if kind is ThresholdKind.MAX_DROP else diff
    floor = record.noise_floor
    beyond = change > margin and not (floor is not None and abs(diff) <= floor)
    # untested: the observed change decides, unless the threshold asked for a test it cannot have
    significant = (alpha is not None and p_adj < alpha) if p_adj is not None else not record.untestable
    mde = record.mde
    if beyond and significant:
        outcome = FAIL
    elif record.detects is not None:
        outcome = PASS if p_adj is not None and mde is not None and mde <= record.detects else INCONCLUSIVE
    elif beyond or (p_adj is not None and (mde is None or mde > margin * factor)) or p_adj is None and mde is not None and mde > margin * factor:
        outcome = INCONCLUSIVE
    else:
        outcome = PASS
    return _with_n_needed(record.updated(p_adj=p_adj, outcome=outcome))


def _with_n_needed(record: CheckRecord) -> CheckRecord:
    """An INCONCLUSIVE tested check says how many questions (or samples) its margin needs (a
    detect-only check: the change it exists to catch)."""
    alpha, power, margin = record.alpha, record.power, record.detects or record.margin
    if record.outcome != INCONCLUSIVE or alpha is None or power is None or margin is None:
        return record
    if ThresholdKind.of(record.check) is ThresholdKind.EQUIVALENT and record.discordance is not None:
        return record.updated(n_needed=equivalence_n(margin, record.discordance, alpha, power))
    if record.discordance is not None:
        return record.updated(n_needed=mcnemar_n(margin, record.discordance, alpha, power))
    if record.base_rate is not None:
        return record.updated(n_needed=fisher_n(margin, record.base_rate, alpha, power))
    return record


def family(records: Sequence[CheckRecord], method: Method) -> list[CheckRecord]:
    """One threshold's records over the cells: their p-values adjusted together, then decided."""
    tested = [i for i, r in enumerate(records) if r.p is not None and r.outcome != NOT_CHECKED]
    adjusted = dict(zip(tested, adjust([p for i in tested if (p := records[i].p) is not None], method)))
    equivalent = [i for i in tested if records[i].p_equivalent is not None]
    adjusted_eq = dict(zip(equivalent, adjust([p for i in equivalent if (p := records[i].p_equivalent) is not None],
                                              method)))
    return [decide(r.updated(family=len(tested), multiplicity=method), adjusted.get(i), adjusted_eq.get(i))
            for i, r in enumerate(records)]


def assess_rows(thresholds: Sequence[Threshold], cells: Sequence[Evidence], method: Method,
                one_reference: bool = False) -> list[list[CheckRecord]]:
    """`thresholds` on every cell that ran, each threshold's p-values adjusted across the cells it
    is checked on: each cell's check records, in the order of `cells` (record `threshold` is the
    index in `thresholds`; a cell that did not run has none). The matrix's cells, a comparison's
    cells against the earlier run, a bisect's bad end and calibrate's cells are judged by this one
    function. `one_reference`: the cells have one reference (`against_one_reference`), which the
    rules then do not call the baseline (`max_drop 0.02`; the report names the reference)."""
    out: list[list[CheckRecord]] = [[] for _ in cells]
    for index, threshold in enumerate(thresholds):
        found = [(i, r) for i, cell in enumerate(cells) if cell.ok and (r := assess(threshold, index, cell)) is not None]
        for (i, _), record in zip(found, family([r for _, r in found], method)):
            if one_reference:
                record = record.updated(rule=record.rule.replace("_vs_baseline ", " ", 1))
            out[i].append(record)
    return out


def against_one_reference(thresholds: Sequence[Threshold]) -> list[Threshold]:
    """The delta thresholds for a comparison with one reference (a bisect's good end, an earlier
    run in `compare`): an `_ab` check becomes its `_vs_baseline` twin, so `vs_baseline` holds
    the one comparison, and a rule given both ways is checked once. `min`/`max` are left out:
    they judge a value by itself, which a run's own report already does."""
    out: list[Threshold] = []
    for t in thresholds:
        if t.kind.own_value:
            continue
        if t.check.endswith("_ab"):
            # validated with its config already: a copy, as the metric is the config's to know
            t = t.model_copy(update={t.check: None, t.check.removesuffix("_ab") + "_vs_baseline": t.value})
        if t not in out:
            out.append(t)
    return out


def tally(records: Iterable[CheckRecord]) -> dict[str, Any]:
    """Outcome counts over checks, as summary.json and a comparison record them: `check_outcomes`
    per outcome, and `inconclusive_checks`, the INCONCLUSIVE checks of failing thresholds (what
    `--strict` turns into exit 5)."""
    found = list(records)
    return {"check_outcomes": {o: sum(c.outcome == o for c in found) for o in OUTCOMES},
            "inconclusive_checks": sum(c.outcome == INCONCLUSIVE and c.action == "fail" for c in found)}


def flag(threshold: Threshold, record: CheckRecord, cell_id: str, metrics: Mapping[str, Any],
         reference_word: str | None = None, twin: str = "fix-on twin") -> Flag | None:
    """The broken-threshold flag of a FAIL or NOT_CHECKED record (the `flags` list's shape and
    words), None otherwise. `reference_word` names the reference (default: "baseline" or `twin`,
    the cell's twin in words, config/cells.py `twin_word`; a bisect says "good end")."""
    check, limit, metric = threshold.check, threshold.value, threshold.metric
    spec = threshold.spec
    label = spec.display.label if spec else metric
    common: dict[str, Any] = {"metric": metric, "check": check, "limit": limit, "action": threshold.action}
    if record.outcome == NOT_CHECKED:
        if record.reference is None:
            return Flag(**common, value=None, not_checked=record.why,
                        message=f"{cell_id}: {label} not checked: {record.why}")
        refusal = {k: v for k, v in (("differs", record.differs), ("setup_differs", record.setup_differs),
                                     ("refused", record.refused)) if v}
        return Flag(**common, value=metrics.get(metric), reference=record.reference, **refusal,
                    message=f"{cell_id}: {label} not compared with {record.reference}: {record.why}")
    if record.outcome != FAIL:
        return None
    value = metrics.get(metric)
    if threshold.kind.own_value:
        words = f"{cell_id}: {label} {value:.3f} {'<' if check == 'min' else '>'} {check} {limit:g}"
        if record.p is not None:  # noise-gated: the evidence that it lies beyond
            words += f" (binomial p = {record.p:.2g}" + (
                f", {METHOD_WORDS.get(record.multiplicity, '')} p = {record.p_adj:.2g}"
                if record.p_adj is not None and record.family > 1 and record.p_adj != record.p else "") + \
                f" < {record.alpha:g}, n {record.n})"
        return Flag(**common, value=value, message=words)
    ref_id = record.reference
    ref_word = reference_word or ("baseline" if _against(check) == "vs_baseline" else twin)
    diff, p_adj = record.diff, record.p_adj
    p = record.p_value if "p_value" in record.model_fields_set else record.p
    assert diff is not None, "a FAIL of a delta has its difference"
    common |= {"diff": diff, "p_value": p, "p_adj": p_adj, "reference": ref_id}
    if spec is not None and spec.comparison is Comparison.PAIRWISE:  # no value of its own: the one between the two
        floor = f", noise floor {record.noise_floor:.3g}" if record.noise_floor is not None else ""
        change = -diff if ThresholdKind.of(check) is ThresholdKind.MAX_DROP else diff
        between = record.between if "between" in record.model_fields_set else diff
        return Flag(**common, value=between, message=f"{cell_id}: {label} vs {ref_word} {ref_id} {between:.3g} "
                                                    f"({'rise' if change == diff else 'drop'} {change:.3g} > {limit:g}{floor})")
    continuous = spec is not None and spec.comparison is Comparison.CONTINUOUS
    change_words = f"{diff:+.3f}" if continuous else f"{diff * 100:+.1f} points"
    own: float = metrics[metric]  # a delta that failed: the cell has its value
    words = f"{cell_id}: {label} {own:.3f} vs {ref_word} {ref_id} {own - diff:.3f}, {change_words}"
    if ThresholdKind.of(check) is ThresholdKind.EQUIVALENT and record.ci is not None:
        low, high = record.ci
        words += (f" outside ±{limit * 100:g} points ({record.ci_level:.0%} CI {low * 100:+.1f} to "
                  f"{high * 100:+.1f})")
    if p is not None:
        words += f", {_TEST_NAMES.get(spec.comparison, 'test') if spec else 'test'} p = {p:.2g}"
        if p_adj is not None and ("family" not in record.model_fields_set or record.family > 1) and p_adj != p:
            words += f", {METHOD_WORDS.get(record.multiplicity, '')} p = {p_adj:.2g}"
    if threshold.alpha is not None:
        words += f" < {threshold.alpha:g}"
    return Flag(**common, value=value, message=words)
