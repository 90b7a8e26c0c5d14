"""Two runs of the same matrix, before and after a change: per cell, B - A with its tests.

Cells are matched by id and questions by id, so a run with `--limit` pairs with a full run on
the questions both answered. Every registered eval's compared metrics: paired marks with
McNemar's exact test, counts with a two-sided Fisher exact test (a change may go either way).

B is judged against A, cell by cell, by B's own config's delta thresholds (`max_drop_*`,
`max_rise_*`, `equivalent_*`; the `_ab` and `_vs_baseline` forms alike, as A's cell is the one
reference), through verdict/checks.py as the matrix judges a cell against its baseline: PASS, FAIL or
INCONCLUSIVE with the MDE, each threshold's p-values adjusted across the compared cells by the
config's `multiplicity`. A gate asks whether B got worse, so there a count's p is the one-sided
Fisher of a rise. `exit_code` follows the matrix's codes (errors.EXIT_CODES). The result is a `RunComparison`
(verdict/summary.py); rendering is in render/.

No verdict without evidence (issue 47). Refused outright (ConfigError, exit 2, one line): A and B
the same run, no cell in common, no question scored by both, or every shared cell run
differently. Each cell's two sides are set against each other by their comparability keys
(store/comparability.py): what may differ is the build (the change under test, `EXPECTED`), the
question set (the tests pair on the questions both scored, and the comparison says how many) and
an eval's set-up (that eval's metrics alone are refused); anything else (a flag, a variable, the
model, the devices) leaves the cell not compared, with the difference in words, unless the caller
`allow`s it. A cell on one side only, or not ok on either, is listed and never judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from evalkit.config import MatrixConfig, parse_config
from evalkit.errors import ConfigError
from evalkit.evals import recorded, registry
from evalkit.evals.base import Comparison, MetricSpec, setup_differences
from evalkit.evals.evalset import eval_name
from evalkit.redact import redact_argv
from evalkit.store.comparability import Difference, compare_keys, key_of
from evalkit.store.records import CellRecord, RunRecord, read_run_records
from evalkit.verdict import checks
from evalkit.verdict.deltas import NOTHING_SHARED, deltas_between, exit_code, flat_metrics, setup_of, unmeasured
from evalkit.verdict.summary import ComparedCell, Delta, Deltas, MetricRecord, RunComparison, RunMeta

EXPECTED = ("build", "questions", "setup")
"""What two runs of one matrix may differ in and still be compared (see the module docstring)."""
SIDES = ("A", "B")
REFERENCE_WORD = "run A"
"""How a broken threshold's message names the reference ("... vs run A <run id> 0.940, -7.0 points")."""

_GATE_ONLY = ("right_only_in_cell", "right_only_in_reference", "both_right", "noise_floor")


def _shown(spec: MetricSpec, gate: Delta | None) -> Delta | None:
    """The B - A a reader sees, from the gate's delta (verdict.deltas.deltas_between): a count takes the
    two-sided p, as a change may go either way; the gate's working counts are left out."""
    if gate is None or gate.setup_differs or gate.differs or gate.refused:
        return gate
    if spec.comparison is Comparison.COUNT:
        return Delta(diff=gate.diff, p_value=gate.p_two_sided, p_greater=gate.p_value, n=gate.n)
    return Delta.model_validate({k: v for k, v in gate.dump().items() if k not in _GATE_ONLY})


def _config_of(run: RunRecord, path: Path) -> MatrixConfig | None:
    """The config snapshot a run stored (run.json `config`); None for a run stored with an empty one."""
    return parse_config(run.config, path / "run.json") if run.config else None


def _run_meta(run: RunRecord, cells: Mapping[str, CellRecord]) -> RunMeta:
    shas = sorted({c.source.sha for c in cells.values() if c.source and c.source.sha})
    return RunMeta(run_id=run.run_id, model=run.model, engine=run.engine, started_at=run.started_at,
                   status=run.status, limit=run.limit, simulated=run.simulated,
                   source_shas=shas, command=redact_argv(run.command) if run.command else None)


def compare_runs(a_path: Path, b_path: Path, allow: Iterable[str] = ()) -> RunComparison:
    """Per cell (matched by id), B - A of every compared metric (GSM8K strict/flexible, collapse rate).

    Paired metrics use McNemar's exact test on the questions both runs answered; counts use
    Fisher's exact test (on the samples both scored, where their numbers differ). Cells found in
    only one run are listed with `in` = "a" or "b". An eval whose setup differs between the runs
    (endpoint, n-shot, lm-eval version, ...) is not compared: its deltas say `setup_differs` with
    the fields, and the row lists them. A cell whose two sides ran differently beyond `EXPECTED`
    and `allow` (parts or items of a comparability key, as store/comparability.py names them) is
    not compared: its deltas and the row say `differs`. Raises ConfigError where there is nothing
    to compare (the module docstring).
    """
    if a_path.resolve() == b_path.resolve():
        raise ConfigError(f"A and B are the same run ({a_path.name}): nothing to compare; name an earlier run as A "
                          f"(evalkit compare RUN_A {a_path.name})")
    run_a, listed_a = read_run_records(a_path)
    run_b, listed_b = read_run_records(b_path)
    # a plugin either run named that cannot load: its metrics are not compared
    evals = registry.recorded(run_a.dump(), run_b.dump())
    cells_a, cells_b = {c.id: c for c in listed_a}, {c.id: c for c in listed_b}
    if not set(cells_a) & set(cells_b):
        raise ConfigError(f"A ({run_a.run_id}) and B ({run_b.run_id}) have no cell in common: A has "
                          f"{_few(cells_a)}, B has {_few(cells_b)}; nothing to compare")
    # each cell as cell.json holds it: what the evals' hooks and `deltas_between` read
    stored_a, stored_b = {c.id: c.dump() for c in listed_a}, {c.id: c.dump() for c in listed_b}
    expected = {*EXPECTED, *allow}
    out: list[tuple[dict[str, Any], checks.Evidence]] = []
    for cell_id in list(dict.fromkeys([*cells_a, *cells_b])):
        a, b = cells_a.get(cell_id), cells_b.get(cell_id)
        either = a or cells_b[cell_id]
        row: dict[str, Any] = {"id": cell_id, "axes": either.axes,
                               "in": "both" if a and b else "a" if a else "b",
                               "status_a": a.status if a else None, "status_b": b.status if b else None,
                               "a": flat_metrics(stored_a[cell_id], evals) if a else {},
                               "b": flat_metrics(stored_b[cell_id], evals) if b else {}}
        gate = checks.Evidence(id=cell_id, ok=False, metrics={})  # not compared: never judged
        if a and b and a.status == b.status == "ok":
            specs = evals.metrics(None, [stored_a[cell_id], stored_b[cell_id]])
            for ev in evals:
                if differs := setup_differences(setup_of(a.metrics, ev.name), setup_of(b.metrics, ev.name)):
                    row.setdefault("setup_differs", {})[ev.name] = differs
            found = compare_keys(key_of(run_a, a), key_of(run_b, b), SIDES)
            row["differs"] = [d.words for d in found if not _expected(d, expected)]
            row["question_sets"] = {d.item: d.words for d in found if d.field == "questions"}
            vs_a = deltas_between(stored_b[cell_id], {**stored_a[cell_id], "id": run_a.run_id}, b_path / cell_id,
                                  a_path / cell_id, row["b"], row["a"], evals, row["differs"],
                                  shared_samples=bool(row["question_sets"]))
            for spec in specs:
                if spec.comparison is not Comparison.NONE:
                    row[spec.name] = _shown(spec, vs_a.of(spec.name))
                if eval_name(spec.name) in row["question_sets"] and (pair := _on_shared(spec, vs_a.of(spec.name))):
                    row.setdefault("on_shared", {})[spec.name] = pair
            gate = checks.Evidence(id=cell_id, ok=True, metrics=row["b"],
                                   unmeasured=unmeasured(stored_b[cell_id], evals), vs_baseline=vs_a)
        out.append((row, gate))
    _something_to_compare(run_a, run_b, [gate for _, gate in out if gate.ok], [row for row, gate in out if gate.ok])
    specs = evals.metrics(None, [*stored_a.values(), *stored_b.values()])
    config = _config_of(run_b, b_path)
    cells = _judged(config, out)
    failed = sum(1 for cell in cells if cell.status_b == "error")
    broken = sum(1 for cell in cells for f in cell.flags if f.action == "fail")
    tallied = checks.tally(c for cell in cells for c in cell.checks)
    return RunComparison(
        a=_run_meta(run_a, cells_a), b=_run_meta(run_b, cells_b),
        metrics=[MetricRecord.model_validate(r) for r in recorded.records(specs)], cells=cells,
        multiplicity=config.multiplicity if config else None, check_outcomes=tallied["check_outcomes"],
        inconclusive_checks=tallied["inconclusive_checks"], failed_cells=failed, broken_thresholds=broken,
        warnings=sum(1 for cell in cells for f in cell.flags if f.action == "warn"),
        exit_code=exit_code(interrupted=False, failed=failed, broken=broken),
        allowed=sorted(set(allow)), shared_questions=_shared_questions(cells),
    ).carrying(evals)


def _on_shared(spec: MetricSpec, gate: Delta | None) -> list[float] | None:
    """[A, B] of a share on the questions (or samples) both runs scored, from the gate's counts:
    what its Δ compares where the two runs' question sets differ; None when not compared."""
    if gate is None or gate.diff is None or not gate.n:
        return None
    if spec.comparison is Comparison.PAIRED and gate.both_right is not None:
        both = gate.both_right
        return [(both + (gate.right_only_in_reference or 0)) / gate.n, (both + (gate.right_only_in_cell or 0)) / gate.n]
    if spec.comparison is Comparison.COUNT and gate.rate_reference is not None:
        return [gate.rate_reference, gate.rate_reference + gate.diff]
    return None


def _expected(difference: Difference, expected: set[str]) -> bool:
    return difference.field in expected or difference.name in expected


def _few(cells: Mapping[str, CellRecord]) -> str:
    ids = list(cells)
    return ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "") if ids else "none"


def _something_to_compare(run_a: RunRecord, run_b: RunRecord, gates: list[checks.Evidence],
                          rows: list[dict[str, Any]]) -> None:
    """Refuse (ConfigError) a comparison whose every cell finished in both runs was run differently,
    or scored no question in common with A: no cell of it could be judged."""
    if not rows:
        return
    if all(row["differs"] for row in rows):
        said = "; ".join(dict.fromkeys(w for row in rows for w in row["differs"]))
        raise ConfigError(f"A ({run_a.run_id}) and B ({run_b.run_id}) ran every shared cell differently ({said}): "
                          "nothing to compare; --allow PART compares them anyway")
    deltas: list[Deltas] = [gate.vs_baseline for gate in gates if gate.vs_baseline is not None]
    compared = [d for vs_a in deltas for d in (vs_a.__pydantic_extra__ or {}).values()
                if isinstance(d, Delta) and (d.n is not None or d.refused == NOTHING_SHARED)]
    if compared and all(d.refused == NOTHING_SHARED for d in compared):
        raise ConfigError(f"A ({run_a.run_id}, limit {run_a.limit or 'none'}) and B ({run_b.run_id}, limit "
                          f"{run_b.limit or 'none'}) scored no question or sample in common: nothing to compare")


def _shared_questions(cells: list[ComparedCell]) -> dict[str, int]:
    """Eval name -> the fewest questions both runs scored in a compared cell, for each eval whose
    question sets differ between the runs (a headline says the comparison stands on them)."""
    out: dict[str, int] = {}
    for cell in cells:
        if not cell.question_sets:
            continue
        for name, delta in (cell.__pydantic_extra__ or {}).items():
            if isinstance(delta, Delta) and delta.n is not None and eval_name(name) in cell.question_sets:
                out[eval_name(name)] = min(out.get(eval_name(name), delta.n), delta.n)
    return out


def _judged(config: MatrixConfig | None, pairs: list[tuple[dict[str, Any], checks.Evidence]]) -> list[ComparedCell]:
    """Each compare row with its checks (B's config's delta thresholds against A's cell,
    verdict/checks.py) and flags (the FAIL and NOT_CHECKED checks in the matrix's words, the
    reference "run A")."""
    thresholds = checks.against_one_reference(config.thresholds) if config else []
    found = checks.assess_rows(thresholds, [gate for _, gate in pairs], config.multiplicity if config else "none",
                               one_reference=True)
    return [ComparedCell.model_validate(row | {"checks": records, "flags": [f for record in records if (f := checks.flag(
        thresholds[record.threshold], record, row["id"], row["b"], REFERENCE_WORD))]})
        for (row, _), records in zip(pairs, found)]
