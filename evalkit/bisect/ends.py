"""The two ends of a bisect, judged the way the matrix judges a cell against its baseline.

Both ends are full cells (run/cell.py) of the same matrix cell at two commits. The bad end is
compared with the good end by verdict/deltas.py itself (`deltas_between`: McNemar on the questions both
answered, Fisher on collapses) and the config's thresholds are checked by verdict/checks.py with the good
end as the reference (PASS, FAIL or INCONCLUSIVE with the MDE, the words of every report):
`max_drop_*` / `max_rise_*` / `equivalent_*` (the `_vs_baseline` and the `_ab` forms alike: in a
bisect the one reference is the good end), and `min` / `max` on each end's own value. The ends are as
claimed when the bad end breaks a failing threshold, the good end breaks no `min`/`max` itself,
both ran the same eval setup, and the bad end's effect is one a step can be tested against: it
becomes the alternative hypothesis of every step's sequential test (evalkit/stats/sequential.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig
from evalkit.config.thresholds import ThresholdKind
from evalkit.evals import recorded
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.capabilities import Subsets
from evalkit.stats.sequential import Count, PairedCounts, StepTest
from evalkit.store.comparability import differences, key_of
from evalkit.store.records import CellRecord, RunRecord
from evalkit.verdict import checks
from evalkit.verdict.deltas import check_threshold, deltas_between, flat_metrics, unmeasured
from evalkit.verdict.summary import CheckRecord, Delta, Deltas, Flag

REFERENCE_WORD = "good end"
"""How threshold messages name the reference ("... vs good end <sha> 0.940, -7.0 points")."""


@dataclass(frozen=True)
class Ends:
    """The bad end judged against the good end, and the test every middle step gets."""

    bad: bool
    """The ends are as claimed: the bad end breaks a failing threshold vs the good end (config
    thresholds + paired statistics), the good end passes its own `min`/`max`, and `test` exists."""
    reason: str
    """One line: what the bad end broke, or why the ends are not as claimed."""
    flags: list[Flag]
    """The thresholds the bad end breaks (warnings included)."""
    good_flags: list[Flag]
    """The `min`/`max` thresholds the good end breaks itself."""
    evidence: Deltas | None
    """The bad end vs the good end per metric (`verdict.deltas.deltas_between`: diff, p_value, the
    flipped question ids, new collapses), `reference` the good end's label; None: an end did not run."""
    test: StepTest | None
    """The sequential test of the steps; None when the ends give no effect to test against."""
    paired_metric: str | None = None
    """The PAIRED metric the steps are paired on (GSM8K flexible in the shipped configs)."""
    count_metric: str | None = None
    """The COUNT metric whose events the steps count (the collapse rate)."""
    alpha: float = 0.01
    labels: dict[str, str] = field(default_factory=dict)
    """`good` / `bad`: how messages name the two ends ("good end 1a2b3c4d5e")."""
    checks: list[CheckRecord] = field(default_factory=list)
    """Every threshold on the bad end (verdict/checks.py records: PASS, FAIL or INCONCLUSIVE with the MDE),
    the delta ones against the good end: what the report says of each."""
    metrics: list[dict[str, Any]] = field(default_factory=list)
    """The metrics the ends report, as summary.json records them (`evals.recorded`): the report
    reads their kinds here, whatever config the process that renders it read."""

    def to_dict(self) -> dict[str, Any]:
        """What bisect.json keeps of the ends (the test is rebuilt from the cell folders)."""
        return {"bad": self.bad, "reason": self.reason, "flags": [f.dump() for f in self.flags],
                "good_flags": [f.dump() for f in self.good_flags],
                "evidence": self.evidence.dump() if self.evidence is not None else {},
                "paired_metric": self.paired_metric, "count_metric": self.count_metric,
                "alpha": self.alpha, "checks": [c.dump() for c in self.checks], "metrics": self.metrics}


def step_metrics(config: MatrixConfig) -> tuple[MetricSpec | None, MetricSpec | None]:
    """The PAIRED and the COUNT metric a step is judged on: the first of each kind that the
    config's thresholds name, else the eval's headline one (its `delta_label`), from enabled evals
    that can run a subset (a step runs nothing else)."""
    usable = [spec for ev, settings in config.evals.enabled() if isinstance(ev, Subsets)
              for spec in ev.metrics_for(settings)]
    named = [spec for t in config.thresholds for spec in usable if spec.name == t.metric]
    headline = [spec for spec in usable if spec.display.delta_label]

    def first(kind: Comparison) -> MetricSpec | None:
        return next((spec for spec in (*named, *headline, *usable) if spec.comparison is kind), None)

    return first(Comparison.PAIRED), first(Comparison.COUNT)


def paired_counts(delta: Delta | None) -> PairedCounts | None:
    """A PAIRED delta (`verdict.deltas.delta`) as the sequential test's counts: lost = right only in the
    reference, gained = right only in the cell."""
    if delta is None or delta.n is None or delta.right_only_in_reference is None or delta.right_only_in_cell is None:
        return None
    return PairedCounts(n=delta.n, lost=delta.right_only_in_reference, gained=delta.right_only_in_cell)


def event_count(spec: MetricSpec | None, flat: dict[str, Any]) -> Count | None:
    """A COUNT metric's k of n from a cell's flat metrics (None when the eval did not run)."""
    if spec is None:
        return None
    k, n = flat.get(spec.count_metric or ""), flat.get(spec.n_metric or "")
    return Count(k=int(k), n=int(n)) if k is not None and n else None


def label(record: dict[str, Any], name: str) -> str:
    """`good end 1a2b3c4d5e`: what the cell is in the bisect and its commit, as messages name it."""
    sha = (record.get("source") or {}).get("sha")
    return f"{name} {sha[:10]}" if sha else name


ENDS_MAY_DIFFER = ("build", "questions", "setup")
"""What a bisect's two ends may differ in (store/comparability.py's parts): the commit, the questions
a step asks, and an eval's set-up (said on its own, above)."""


def ran_differently(config: MatrixConfig, good: CellRecord, bad: CellRecord) -> list[str]:
    """What the ends ran differently beyond their commits, in words (store/comparability.py): one
    cell of one config at two commits, so another flag, variable or device would test more than
    the commits (a bisect resumed after the environment changed)."""
    run = RunRecord(run_id="bisect", status="complete", model=config.model, engine=config.engine.profile,
                    config_path="", config={})
    return differences(key_of(run, good), key_of(run, bad), allow=ENDS_MAY_DIFFER, sides=("the good end", "the bad end"))


def judge_ends(config: MatrixConfig, good_dir: Path, bad_dir: Path, alpha: float) -> Ends:
    """Judge the bad end's cell folder against the good end's; never raises for ends that are
    not as claimed (that is `Ends.bad` False with its reason)."""
    ends = CellRecord.load(good_dir / "cell.json"), CellRecord.load(bad_dir / "cell.json")
    good, bad = (end.dump() for end in ends)  # each end as cell.json holds it: what the evals read
    labels = {"good": label(good, "good end"), "bad": label(bad, "bad end")}
    paired_spec, count_spec = step_metrics(config)
    evals = config.evals.evalset
    base: dict[str, Any] = {"flags": [], "good_flags": [], "evidence": None, "test": None, "alpha": alpha, "labels": labels,
            "paired_metric": paired_spec.name if paired_spec else None,
            "count_metric": count_spec.name if count_spec else None,
            "metrics": recorded.records(evals.metrics(config.evals, [good, bad]))}
    for end, name in zip(ends, ("good", "bad")):
        if end.status != "ok":
            return Ends(bad=False, reason=f"the {name} end did not run: {end.message or end.status}", **base)
    flat_good, flat_bad = flat_metrics(good, evals), flat_metrics(bad, evals)
    # the reference named by its commit: threshold messages read "vs good end <sha> 0.940"
    reference = labels["good"].removeprefix(REFERENCE_WORD).strip() or "?"
    evidence = base["evidence"] = deltas_between({**bad, "id": labels["bad"]}, {**good, "id": reference}, bad_dir,
                                                 good_dir, flat_bad, flat_good, evals)
    if differs := sorted({f for d in evidence.__pydantic_extra__.values() for f in d.setup_differs}):
        return Ends(bad=False, reason=f"the ends ran different eval setups ({', '.join(differs)}): not comparable",
                    **base)
    if beyond := ran_differently(config, *ends):
        return Ends(bad=False, reason=f"the ends ran differently ({'; '.join(beyond)}): not comparable", **base)
    own = [t for t in config.thresholds if t.kind.own_value]
    thresholds = [*checks.against_one_reference(config.thresholds), *own]
    bad_end = checks.Evidence(id=labels["bad"], ok=True, metrics=flat_bad, unmeasured=unmeasured(bad, evals),
                              vs_baseline=evidence)
    (found,) = checks.assess_rows(thresholds, [bad_end], "none", one_reference=True)  # a family of one each
    flags = [f for r in found if (f := checks.flag(thresholds[r.threshold], r, labels["bad"], flat_bad, REFERENCE_WORD))]
    good_end = checks.Evidence(id=labels["good"], ok=True, metrics=flat_good)
    good_flags = [f for t in own if (f := check_threshold(t, good_end)) and f.action == "fail"]
    base |= {"flags": flags, "good_flags": good_flags, "checks": found}
    try:
        test = StepTest.from_ends(paired_bad=paired_counts(evidence.of(paired_spec.name) if paired_spec else None),
                                  collapses_good=event_count(count_spec, flat_good),
                                  collapses_bad=event_count(count_spec, flat_bad), alpha=alpha)
    except ValueError as e:
        test, untestable = None, str(e)
    base["test"] = test
    failing = sorted((f for f in flags if f.action == "fail"), key=lambda f: ThresholdKind.of(f.check).own_value)  # deltas first
    if good_flags:
        reason = f"the good end is not good: {good_flags[0].message}"
    elif not failing:
        reason = f"the bad end breaks no failing threshold vs the {labels['good']}"
    elif test is None:
        reason = f"{failing[0].message}, but {untestable}"
    else:
        reason = failing[0].message + (f" (and {len(failing) - 1} more)" if len(failing) > 1 else "")
    return Ends(bad=not good_flags and bool(failing) and test is not None, reason=reason, **base)
