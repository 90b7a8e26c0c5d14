"""Stored cells -> comparisons, broken thresholds and the run's summary (summary.json).

Each cell is compared against the baseline cell, and each fix-off cell against its fix-on twin
(the A/B axis), for every metric of every eval of the run (its `EvalSet`) by its comparison kind: per-question
marks paired on the questions both cells answered (McNemar's exact test), counts of events
(Fisher's exact test, see stats/tests.py), continuous values as a difference, and a value measured
between the two cells by the eval that owns it (PAIRWISE, `Pairwise`). A threshold with `alpha` counts
a delta only when it is significant, so noise on a small `--limit` does not fail a nightly job.

A run's cells are read as `CellRecord`s (store/records.py `read_run_records`), their own fields by
attribute; what the evals' hooks and the per-cell comparison read (`flat_metrics`, `unmeasured`,
`deltas_between`) is each cell as cell.json holds it, the record's dump, so the plugin contract
stays mappings and a bisect can compare a step that is no stored cell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig, Threshold
from evalkit.config.cells import twin_axes, twin_rule, twin_word
from evalkit.engine.catalog import differences
from evalkit.errors import (
    EXIT_CELL_FAILED,
    EXIT_INCONCLUSIVE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_THRESHOLD,
)
from evalkit.evals import recorded
from evalkit.evals.base import (
    SETUP_KEY,
    Comparison,
    Eval,
    MetricSpec,
    setup_differences,
)
from evalkit.evals.capabilities import CellFlags, ExtraDelta, Pairwise, Unmeasured
from evalkit.evals.evalset import EvalSet, raw
from evalkit.stats.tests import fisher_collapse, paired_comparison
from evalkit.store import once_per_file_state, read_jsonl, read_regressions
from evalkit.store.records import CellRecord, read_run_records
from evalkit.verdict import checks
from evalkit.verdict.pairs import Pairs
from evalkit.verdict.summary import (
    SUMMARY_SCHEMA_VERSION,
    CellRow,
    CheckRecord,
    Delta,
    Deltas,
    Flag,
    MetricRecord,
    RunComparison,
    RunSummary,
)


def question_order(qid: str) -> tuple[int, str]:
    """Sort key of question ids ("test-12" after "test-9"); ids without a number go first."""
    tail = qid.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else -1, qid)


def marks(cell_dir: Path, spec: MetricSpec, evals: EvalSet) -> dict[str, bool]:
    """Question id -> right or wrong for a PAIRED metric, from the cell's samples file of its eval
    (none: `evals` lacks it)."""
    ev = evals.eval_of(spec.name)
    if ev is None or spec.mark_field is None:
        return {}
    # the eval's fixed paired metrics are read together, once per file state (GSM8K's two filters)
    fields = tuple(dict.fromkeys([*(m.mark_field for m in ev.metrics if m.mark_field), spec.mark_field]))
    column = fields.index(spec.mark_field)
    return {qid: mark for qid, row in _marks_file(cell_dir / ev.samples_file, fields).items()
            if (mark := row[column]) is not None}


@once_per_file_state(maxsize=64)
def _marks_file(path: Path, fields: tuple[str, ...]) -> dict[str, tuple[bool | None, ...]]:
    """Every paired metric's marks of a samples file ({} when absent), read once per state of the
    file: each cell is compared with the baseline and with its twin, and the baseline with all.
    None where a row lacks a field: a question of another task in the same file (lm_eval)."""
    try:
        return {row["id"]: tuple(None if row.get(f) is None else bool(row[f]) for f in fields) for row in read_jsonl(path)}
    except FileNotFoundError:
        return {}


def _merged(record: Mapping[str, Any], evals: EvalSet,
            part: Callable[[Eval, Mapping[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """`part(eval, raw)` of every eval of `evals` that ran in this cell, merged in eval order."""
    out: dict[str, Any] = {}
    for ev in evals:
        found = raw(ev, record)
        if found:
            out |= part(ev, found)
    return out


def flat_metrics(record: Mapping[str, Any], evals: EvalSet) -> dict[str, Any]:
    """A cell's headline metrics under stable dotted names (the summary.json contract), read by
    the evals of its run (`evals`). `record` is the whole cell as cell.json holds it (a
    `CellRecord`'s dump): the evals' hooks read mappings, and the history, bisect and calibrate
    hand it what they read of a cell."""
    return _merged(record, evals, lambda ev, found: ev.flat(found))


def unmeasured(record: Mapping[str, Any], evals: EvalSet) -> dict[str, str]:
    """Metric -> why this cell has no value of it although its eval ran (`Unmeasured`)."""
    return _merged(record, evals, lambda ev, found: ev.absent(found) if isinstance(ev, Unmeasured) else {})


def deltas_in_run(cell: str, ref: str, run_path: Path, stored: Mapping[str, Mapping[str, Any]],
                  flats: Mapping[str, dict[str, Any]], evals: EvalSet, differs: list[str] | None = None) -> Deltas:
    """Deltas of cell `cell` against cell `ref` (cell - ref, by id), per compared metric: paired
    metrics on the shared questions (McNemar), counts with Fisher (one-sided, a rise), continuous
    values as a plain difference. `stored` (each cell's record as the evals read it) and `flats`
    (its flat metrics) are by id, computed once per summary; `differs` as `deltas_between`."""
    return deltas_between(stored[cell], stored[ref], run_path / cell, run_path / ref, flats[cell], flats[ref], evals,
                          differs)


def deltas_between(cell: Mapping[str, Any], ref: Mapping[str, Any], cell_dir: Path, ref_dir: Path,
                   flat_cell: dict[str, Any], flat_ref: dict[str, Any], evals: EvalSet,
                   differs: list[str] | None = None, shared_samples: bool = False) -> Deltas:
    """`compare` for two cell folders anywhere (a bisect compares one cell at two commits, the
    good end possibly from another run): the records, their folders and their flat metrics; the
    metrics compared are those the two records hold (`EvalSet.metrics`) of the evals of `evals`.
    The records are mappings (`id` naming the reference, `metrics`): what the evals' hooks read,
    and a bisect step's partial record (its commit and metrics so far) is no stored cell.

    Not compared, each with its reason (its checks are NOT_CHECKED, never held): every metric when
    the two ran differently beyond what the caller expects (`differs`, the words of
    store/comparability.py's `differences`), an eval's metrics when its set-ups differ, and a
    paired or count metric when the two scored no question or sample in common. `shared_samples`
    (two runs cut by different limits): a count is compared on the samples both scored."""
    result: dict[str, Delta] = {}
    specs = evals.metrics(None, [cell, ref])
    for ev in evals:
        setup_differs = setup_differences(setup_of(cell.get("metrics") or {}, ev.name),
                                          setup_of(ref.get("metrics") or {}, ev.name))
        for spec in (spec for spec in specs if evals.eval_of(spec.name) is ev):
            both = measured_by_both(spec, flat_cell, flat_ref)
            if differs and both:
                result[spec.name] = Delta(diff=None, p_value=None, differs=differs)
                continue
            if setup_differs and both:
                result[spec.name] = Delta.model_validate(refused(setup_differs))
                continue
            found = delta(spec, cell_dir, ref_dir, flat_cell, flat_ref, evals, shared_samples)
            if found is None:
                if both and spec.comparison in (Comparison.PAIRED, Comparison.COUNT):
                    result[spec.name] = Delta(diff=None, p_value=None, refused=NOTHING_SHARED)
                continue
            if spec.comparison is Comparison.COUNT:  # a gate asks about a rise: the one-sided p
                found["p_value"] = found.pop("p_greater")
            elif spec.comparison in (Comparison.PAIRED, Comparison.PAIRWISE):
                found["noise_floor"] = _noise_floor(spec, cell, ref, evals)
            extra = ev.extra_delta(spec, cell_dir, ref_dir) if isinstance(ev, ExtraDelta) else {}
            result[spec.name] = Delta.model_validate(found | extra)
    return Deltas.model_validate({"reference": ref["id"], **result})


def measured_by_both(spec: MetricSpec, this: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
    """Whether both cells have `spec` to compare (their flat metrics): a per-cell metric when both
    hold it; a PAIRWISE one, held by no cell alone, whenever both ran its eval (the caller knows:
    their setups were found to differ)."""
    if spec.comparison is Comparison.NONE:
        return False
    return spec.comparison is Comparison.PAIRWISE or (spec.name in this and spec.name in ref)


def setup_of(metrics: Mapping[str, Any], eval_name: str) -> dict[str, Any] | None:
    """One eval's setup fingerprint in a cell's raw metrics (`CellRecord.metrics`; None: not run,
    or stored before fingerprints)."""
    found: dict[str, Any] | None = (metrics.get(eval_name) or {}).get(SETUP_KEY)
    return found


NOTHING_SHARED = "no question or sample scored by both"
"""Why a paired or count metric held by both cells was not compared: nothing to pair."""


def refused(differs: list[str]) -> dict[str, Any]:
    """A comparison not made: the two scores come from different eval setups (the fields named)."""
    return {"diff": None, "p_value": None, "setup_differs": differs}


def delta(spec: MetricSpec, this_dir: Path, ref_dir: Path, this: dict[str, Any],
          ref: dict[str, Any], evals: EvalSet, shared_samples: bool = False) -> dict[str, Any] | None:
    """`this` minus `ref` for one metric, by its comparison kind; None when there is nothing to
    compare. The one computation behind the summary's deltas and the run comparison (each picks
    its p-value: a gate asks whether a count rose, a before/after comparison either way).

    PAIRED: McNemar on the questions both answered, with the flipped ids; COUNT: Fisher (both
    p-values); CONTINUOUS: the difference; PAIRWISE: what the owning eval measures between the
    two cells' samples (`Pairwise`). `this`/`ref` are the two cells' flat metrics; `shared_samples`:
    a count on the samples both scored, where their numbers differ.
    """
    if spec.comparison is Comparison.PAIRED:
        a, b = marks(this_dir, spec, evals), marks(ref_dir, spec, evals)
        shared = sorted(set(a) & set(b), key=question_order)
        if not shared:
            return None
        p = paired_comparison([a[i] for i in shared], [b[i] for i in shared], ids=shared)
        return {"diff": p.diff, "p_value": p.p_value, "ci95": [p.low, p.high], "n": p.n,
                "right_only_in_cell": p.a_only, "right_only_in_reference": p.b_only, "both_right": p.both,
                "flipped_to_wrong": list(p.b_only_ids), "flipped_to_right": list(p.a_only_ids)}
    if spec.comparison is Comparison.COUNT:
        k, n, k_ref, n_ref = (this.get(spec.count_metric or ""), this.get(spec.n_metric or ""),
                              ref.get(spec.count_metric or ""), ref.get(spec.n_metric or ""))
        if shared_samples and n != n_ref and (on_both := _shared_events(spec, this_dir, ref_dir, evals)) is not None:
            k, n, k_ref, n_ref = on_both
        if not n or not n_ref or k is None or k_ref is None:
            return None
        f = fisher_collapse(k, n, k_ref, n_ref)
        return {"diff": f.diff, "p_greater": f.p_greater, "p_two_sided": f.p_two_sided, "n": n, "n_reference": n_ref,
                "rate_reference": k_ref / n_ref}
    if spec.comparison is Comparison.CONTINUOUS:
        value, ref_value = this.get(spec.name), ref.get(spec.name)
        if value is None or ref_value is None:
            return None
        return {"diff": value - ref_value, "p_value": None}
    if spec.comparison is Comparison.PAIRWISE:
        ev = evals.eval_of(spec.name)
        return ev.pairwise(spec, this_dir, ref_dir) if isinstance(ev, Pairwise) else None
    return None


def _shared_events(spec: MetricSpec, this_dir: Path, ref_dir: Path, evals: EvalSet) -> tuple[int, int, int, int] | None:
    """A count's k and n in each cell over the samples both scored (two runs cut by different
    limits), from its eval's samples file; (0, 0, 0, 0) when none is shared; None when a file or
    the event field is missing (the recorded counts stand)."""
    ev = evals.eval_of(spec.name)
    if ev is None or spec.event_field is None:
        return None
    mine, theirs = (_events_file(d / ev.samples_file, spec.event_field) for d in (this_dir, ref_dir))
    if not mine or not theirs:
        return None
    shared = [i for i in mine if i in theirs]
    return (sum(mine[i] for i in shared), len(shared), sum(theirs[i] for i in shared), len(shared))


@once_per_file_state(maxsize=16)
def _events_file(path: Path, field: str) -> dict[str, bool]:
    """Sample id -> whether the event happened, from a samples file ({} when absent)."""
    try:
        return {row["id"]: bool(row[field]) for row in read_jsonl(path) if field in row}
    except FileNotFoundError:
        return {}


def _noise_floor(spec: MetricSpec, cell: Mapping[str, Any], ref: Mapping[str, Any], evals: EvalSet) -> float | None:
    """The larger repeat swing of the two cells (`evals.<eval>.repeats`), None without repeats."""
    ev = evals.eval_of(spec.name)
    floors = [f for c in (cell, ref) if spec.noise_floor and ev and (raw := (c["metrics"].get(ev.name) or {}))
              and (f := spec.noise_floor(raw)) is not None]
    return max(floors) if floors else None


def check_threshold(threshold: Threshold, cell: checks.Evidence, reference_word: str | None = None) -> Flag | None:
    """One threshold on one cell, alone (a family of one: a bisect's ends): its flag, or None.
    `reference_word` names the reference in the message (default: "baseline" or "fix-on twin"; a
    bisect says "good end")."""
    record = checks.assess(threshold, 0, cell)
    if record is None:
        return None
    (decided,) = checks.family([record], "none")
    return checks.flag(threshold, decided, cell.id, cell.metrics, reference_word)


def _flags(config: MatrixConfig, cell: CellRecord, found: list[CheckRecord], metrics: dict[str, Any]) -> list[Flag]:
    """The flags of a cell's FAIL and NOT_CHECKED checks."""
    twin = twin_word(cell.axes, config)
    return [f for record in found
            if (f := checks.flag(config.thresholds[record.threshold], record, cell.id, metrics, twin=twin))]


def _setups(cells: list[CellRecord], evals: EvalSet) -> dict[str, dict[str, Any]]:
    """Each distinct eval setup of the run once, by its hash (the cells name theirs)."""
    out: dict[str, dict[str, Any]] = {}
    for cell in cells:
        for ev in evals:
            if setup := setup_of(cell.metrics, ev.name):
                out.setdefault(setup["hash"], {"eval": ev.name, **setup["fields"]})
    return out


RAN_AS_METRIC = "engine.ran_as"
"""The `metric` of the flag on a cell whose engine ran another mode or layout than asked."""


def ran_as_flags(cell: CellRecord) -> list[Flag]:
    """A warning on a cell whose engine's log says it ran another graph mode or layout than the cell
    asked (run/engine_log.py): its numbers are not the named configuration's, in every report."""
    ran = cell.ran_as
    if ran is None or ran.agrees is not False:
        return []
    return [Flag(metric=RAN_AS_METRIC, check="ran_as", action="warn", value=ran.mode,
                 message=f"{cell.id}: engine ran {'; '.join(ran.disagreements)} (its own log)")]


CATALOG_METRIC = "engine.catalog"


def catalog_flags(cell: CellRecord, ref: CellRecord | None) -> list[Flag]:
    """A warning on a cell whose launch came from another catalog entry than its reference's (its
    fix-on twin, else the baseline; engine/catalog.py): flags, env or gates changed between the
    refs, so the comparison tests more than the change."""
    mine, theirs = cell.catalog, ref.catalog if ref is not None else None
    if not mine or not theirs or ref is None:
        return []
    differ = differences(mine, theirs)
    if not differ:
        return []
    return [Flag(metric=CATALOG_METRIC, check="catalog", action="warn",
                 message=f"{cell.id}: catalog entry {mine['entry']!r} at {mine['ref']} differs from {ref.id}'s "
                         f"at {theirs['ref']}: {'; '.join(differ)} (the comparison tests more than the change)")]


CATALOG_GATES = (("accuracy_threshold", "gsm8k.flexible"), ("mtp_accept_threshold", "engine.spec_acceptance_rate"))
"""An entry's gates and the metric each bounds from below: ATOM's CI fails `exact_match,flexible-extract`
below accuracy_threshold and an MTP acceptance below mtp_accept_threshold, or none reported
(.github/workflows/atom-test.yaml:575-630 at HEAD ffdf3bb5)."""


def catalog_gate_flags(config: MatrixConfig, cell: CellRecord, metrics: dict[str, Any]) -> list[Flag]:
    """The cell judged by the gates of the catalog entry its own ref holds (`engine.catalog.gates`)."""
    entry, catalog = cell.catalog, config.engine.catalog
    if not entry or catalog is None or catalog.gates == "off" or cell.status != "ok":
        return []
    out = []
    for gate, metric in CATALOG_GATES:
        limit = entry["fields"].get(gate)
        value = metrics.get(metric)
        if limit is None or (value is not None and value >= limit):
            continue
        said = "not measured" if value is None else f"{value:.3f} < {limit}"
        out.append(Flag(metric=metric, check="catalog_gate", action=catalog.gates, limit=limit,
                        message=f"{cell.id}: {metric} {said}, the {gate} of catalog entry {entry['entry']!r} at "
                                f"{entry['ref']}"))
    return out


def summarize(run_path: Path, config: MatrixConfig) -> dict[str, Any]:
    """The whole run's verdict as summary.json holds it (`summarize_run`'s dump): what the report
    and the CLI read."""
    return summarize_run(run_path, config).dump()


def summarize_run(run_path: Path, config: MatrixConfig) -> RunSummary:
    """The whole run's verdict from what is stored, judged with its config's evals
    (``config.evals.evalset``, carried by the summary to its report); the same function serves `report`."""
    run, cells = read_run_records(run_path)
    evals = config.evals.evalset
    stored = {cell.id: cell.dump() for cell in cells}  # each cell as the evals' hooks read it
    specs = evals.metrics(config.evals, stored.values())
    baseline = next((c for c in cells if config.baseline and c.axes == config.baseline), None)
    rows = []
    flats = {cell.id: flat_metrics(stored[cell.id], evals) for cell in cells}
    references: dict[str, CellRecord | None] = {}
    pairs = Pairs(config, run)  # what each pair's cells may differ in: their declared axes
    for cell in cells:
        row: dict[str, Any] = {"id": cell.id, "axes": cell.axes, "status": cell.status}
        if cell.error:
            row["error"] = cell.error.message
        row["metrics"] = flats[cell.id]
        row["unmeasured"] = unmeasured(stored[cell.id], evals)
        ok = cell.status == "ok"
        if ok and baseline and baseline.status == "ok" and baseline.id != cell.id:
            row["vs_baseline"] = deltas_in_run(cell.id, baseline.id, run_path, stored, flats, evals,
                                               pairs.beyond(cell, baseline))
        wanted = twin_axes(cell.axes, config) if ok else None
        twin = next((c for c in cells if c.axes == wanted), None) if wanted else None
        if twin and twin.status == "ok":
            row["vs_ab"] = deltas_in_run(cell.id, twin.id, run_path, stored, flats, evals, pairs.beyond(cell, twin))
        references[cell.id] = twin or (baseline if baseline is not cell else None)
        row["setup"] = {ev.name: setup["hash"] for ev in evals if (setup := setup_of(cell.metrics, ev.name))}
        row |= {"effective_mode": cell.effective_mode, "ran_as": cell.ran_as, "log_checks": cell.log_checks,
                "source": cell.source, "imports": cell.imports, "engine_version": cell.engine_version,
                "timings": cell.timings, "cost": cell.cost,
                "cache": cell.isolation.cache if cell.isolation is not None else None}
        rows.append(row)
    found = checks.assess_rows(config.thresholds, [checks.Evidence.of(row) for row in rows], config.multiplicity)
    judged = [CellRow.model_validate(row | {"checks": records, "flags": (
        _flags(config, cell, records, row["metrics"]) + ran_as_flags(cell) + catalog_flags(cell, references[cell.id])
        + catalog_gate_flags(config, cell, row["metrics"]))}) for cell, row, records in zip(cells, rows, found)]
    judged = _with_eval_flags([stored[cell.id] for cell in cells], judged, evals,
                              next((r for r in judged if baseline and r.id == baseline.id and r.status == "ok"), None))
    failed = sum(1 for r in judged if r.status == "error")
    not_run = sum(1 for r in judged if r.status not in ("ok", "error"))
    tallied = checks.tally(c for r in judged for c in r.checks or [])
    broken = sum(1 for r in judged for f in r.flags if f.action == "fail")
    warned = sum(1 for r in judged for f in r.flags if f.action == "warn")
    code = exit_code(interrupted=run.status == "interrupted", failed=failed + not_run, broken=broken)
    regressions = read_regressions(run_path)
    return RunSummary(
        schema_version=SUMMARY_SCHEMA_VERSION, run_id=run.run_id, model=run.model, engine=run.engine,
        simulated=run.simulated, status=run.status, started_at=run.started_at, finished_at=run.finished_at,
        # a run.json without `command` (written before it existed) leaves it null, not the model's []
        command=run.command if "command" in run.model_fields_set else None, listen_host=run.listen_host,
        baseline=baseline.id if baseline else None, ab=twin_rule(config),
        metrics=[MetricRecord.model_validate(r) for r in recorded.records(specs)],
        cells=judged, setups=_setups(cells, evals),
        failed_cells=failed, not_run_cells=not_run, broken_thresholds=broken, warnings=warned, exit_code=code,
        multiplicity=config.multiplicity, check_outcomes=tallied["check_outcomes"],
        inconclusive_checks=tallied["inconclusive_checks"],
        **({"regressions": regressions} if regressions is not None else {}),
    ).carrying(evals)


def _with_eval_flags(cells: list[Mapping[str, Any]], rows: list[CellRow], evals: EvalSet,
                     baseline: CellRow | None) -> list[CellRow]:
    """The rows with the flags of the evals that raise their own (`CellFlags`) added to each ok
    row's, which read the cell's record (as cell.json holds it, `CellRecord.dump`) and its row and
    the baseline's as summary.json holds them."""
    flagging = [ev for ev in evals if isinstance(ev, CellFlags)]
    if not flagging:
        return rows
    base = baseline.dump() if baseline is not None else None
    return [row.model_copy(update={"flags": [*row.flags, *(Flag.model_validate(f) for ev in flagging
                                                           for f in ev.cell_flags(cell, row.dump(), base))]})
            if row.status == "ok" else row for cell, row in zip(cells, rows)]


def exit_code(interrupted: bool, failed: int, broken: int) -> int:
    """A verdict's exit status (errors.EXIT_CODES), the matrix's and a comparison's alike:
    interrupted, else a cell that failed (or was not run), else a broken failing threshold, else 0."""
    if interrupted:
        return EXIT_INTERRUPTED
    if failed:
        return EXIT_CELL_FAILED
    return EXIT_THRESHOLD if broken else EXIT_OK


def strict_exit_code(summary: RunSummary | RunComparison) -> int:
    """`--strict`: EXIT_INCONCLUSIVE where the run (or a comparison) would exit 0 but something was
    not judged: a failing threshold's check INCONCLUSIVE, or a cell no check judged (a comparison's:
    on one side only, not finished on both, run differently). A nightly or a PR gate must not pass
    on too little evidence; every other code as is (a NOT_CHECKED failing threshold is broken, 1)."""
    code = summary.exit_code
    return EXIT_INCONCLUSIVE if code == EXIT_OK and (summary.inconclusive_checks or summary.unjudged) else code
