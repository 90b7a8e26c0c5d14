"""Two runs of the same matrix, as a table model: per cell, A, B and B − A (pure data).

The columns come from the metrics the comparison records (`specs_of`), per eval in order: a compared metric with a
`delta_label` shows A, B and `Δ B − A` (one measured between two cells, PAIRWISE, has no A or B:
it shows `<label> B vs A`); another compared metric with a matrix column shows its `Δ B − A`; each metric with details "flips" adds the paired question count and the flips.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from evalkit.evals.base import Comparison, Evidence, MetricSpec
from evalkit.evals.evalset import eval_name
from evalkit.evals.recorded import specs_of
from evalkit.render.header import tests_used
from evalkit.render.numbers import date_text, num
from evalkit.render.table import Column, spec_delta
from evalkit.verdict.summary import Delta, Verdict


def delta_specs(specs: list[MetricSpec]) -> list[MetricSpec]:
    """The metrics with a `Δ B − A` column, per eval in the comparison's order (`specs`, as
    `specs_of` reads them): its compared metrics with a `delta_label`, then its other compared
    ones that have a matrix column (always there, not `column_when_measured`)."""
    out = []
    for _, group in itertools.groupby(specs, key=lambda spec: eval_name(spec.name)):
        compared = [spec for spec in group if spec.comparison is not Comparison.NONE]
        out += [s for s in compared if s.display.delta_label] + [s for s in compared if s.display.column and not s.display.delta_label
                                                            and not s.display.column_when_measured]
    return out


def flip_specs(specs: list[MetricSpec]) -> list[MetricSpec]:
    """The paired metrics whose flipped questions a comparison lists (details "flips")."""
    return [spec for spec in specs if spec.display.details is Evidence.FLIPS and spec.comparison is Comparison.PAIRED]


def flips_suffix(spec: MetricSpec, specs: list[MetricSpec]) -> str:
    """` (<label>)` after the flips' headers when several metrics list flips; else nothing."""
    return f" ({spec.display.label})" if len(flip_specs(specs)) > 1 else ""


CompareRow = dict[str, Any]
"""One cell of a comparison (verdict.compare.compare_runs), not yet a typed model: its deltas are read as `Delta`s."""


def _cell(row: CompareRow) -> str:
    note = {"a": " (only in A)", "b": " (only in B)"}.get(row["in"], "")
    if row["in"] == "both" and not row["status_a"] == row["status_b"] == "ok":
        note += f" (A {row['status_a']}, B {row['status_b']})"
    return str(row["id"]) + note


def _side(spec: MetricSpec, side: str) -> Callable[[CompareRow], str]:
    """A count shows k/n (the evidence behind its Fisher test); other metrics the bare value, since
    one run's interval says nothing about a paired B − A."""
    if spec.comparison is Comparison.COUNT:
        return lambda row: spec.show(row[side])
    return lambda row: num(row[side].get(spec.name))


def compared(row: CompareRow, spec: MetricSpec) -> Delta | None:
    """B − A of `spec` in a compare row (None: not compared)."""
    found = row.get(spec.name)
    return None if found is None else Delta.model_validate(found)


def _delta(spec: MetricSpec) -> Callable[[CompareRow], str]:
    return lambda row: spec_delta(spec, compared(row, spec))


def flips(row: CompareRow, spec: MetricSpec) -> Delta | None:
    """The paired comparison of `spec` in a compare row: n and the flipped ids (None when the
    metric was not compared, or refused for differing setups)."""
    delta = compared(row, spec)
    return delta if delta is not None and delta.flips_listed else None


def _paired(spec: MetricSpec) -> Callable[[CompareRow], str]:
    return lambda row: str(f.n) if (f := flips(row, spec)) else "-"


def _flips(spec: MetricSpec) -> Callable[[CompareRow], str]:
    def text(row: CompareRow) -> str:
        f = flips(row, spec)
        return f"{len(f.flipped_to_wrong)} / {len(f.flipped_to_right)}" if f else "-"

    return text


def compare_columns(specs: list[MetricSpec]) -> list[Column[CompareRow]]:
    """cell; A, B and Δ of each delta-labelled metric, Δ of the other shown ones (named by their
    key); paired n and flips of each flips metric."""
    out = [Column("cell", "cell", _cell)]
    for spec in delta_specs(specs):
        if spec.comparison is Comparison.PAIRWISE:
            out.append(Column(f"{spec.short}_delta", f"{spec.display.delta_label or spec.short} B vs A", _delta(spec)))
            continue
        if spec.display.delta_label:
            out += [Column(f"{spec.short}_a", f"{spec.display.delta_label} A", _side(spec, "a")),
                    Column(f"{spec.short}_b", f"{spec.display.delta_label} B", _side(spec, "b"))]
        out.append(Column(f"{spec.short}_delta", f"Δ {spec.display.delta_label or spec.short} B − A", _delta(spec)))
    for spec in flip_specs(specs):
        out += [Column(f"{spec.short}_paired", "paired n" + flips_suffix(spec, specs), _paired(spec)),
                Column(f"{spec.short}_flips", "flipped →wrong / →right" + flips_suffix(spec, specs), _flips(spec))]
    return out


def compare_rows(result: dict[str, Any]) -> list[dict[str, str]]:
    """Display texts (unescaped) per cell, by column key."""
    cols = compare_columns(specs_of(result))
    return [{c.key: c.text(row) for c in cols} for row in result["cells"]]


def compare_title(result: dict[str, Any]) -> str:
    a, b = result["a"], result["b"]
    return (f"evalkit compare · A {a['run_id']} ({date_text(a['started_at'])}) → "
            f"B {b['run_id']} ({date_text(b['started_at'])})")


def run_facts(meta: dict[str, Any]) -> str:
    """One run of a comparison in a line: model, engine, source SHAs, limit, status."""
    shas = ", ".join(s[:12] for s in meta["source_shas"]) or "no engine source"
    return f"{meta['model']} on {meta['engine']} · {shas} · limit {meta['limit'] or 'none'} · status {meta['status']}"


def compare_legend(result: dict[str, Any]) -> str:
    """What Δ and p mean in the compare table (counts: two-sided, a change may go either way)."""
    verdict = Verdict.model_validate(result)
    tests = tests_used(delta_specs(verdict.specs()), "two-sided Fisher exact ({})", verdict.evals)
    return "Δ = run B − run A, in points, on the questions both answered" + (f"; p: {tests}." if tests else ".")
