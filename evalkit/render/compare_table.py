"""Two runs of the same matrix, as a table model: per cell, A, B and B − A (pure data).

The columns come from the metrics the comparison records (`RunComparison.specs`), per eval in order: a compared metric with a
`delta_label` shows A, B and `Δ B − A` (one measured between two cells, PAIRWISE, has no A or B:
it shows `<label> B vs A`); another compared metric with a matrix column shows its `Δ B − A`; each metric with details "flips" adds the paired question count and the flips.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from evalkit.evals.base import Comparison, Evidence, MetricSpec
from evalkit.evals.evalset import eval_name
from evalkit.render.header import tests_used
from evalkit.render.numbers import date_text, num
from evalkit.render.table import Column, spec_delta
from evalkit.verdict.summary import ComparedCell, Delta, RunComparison, RunMeta


def delta_specs(specs: list[MetricSpec]) -> list[MetricSpec]:
    """The metrics with a `Δ B − A` column, per eval in the comparison's order (`specs`, as
    `RunComparison.specs` reads them): its compared metrics with a `delta_label`, then its other compared
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


def _cell(row: ComparedCell) -> str:
    note = {"a": " (only in A)", "b": " (only in B)"}.get(row.found_in, "")
    if row.found_in == "both" and not row.both_ok:
        note += f" (A {row.status_a}, B {row.status_b})"
    return row.id + note


def _side(spec: MetricSpec, side: str) -> Callable[[ComparedCell], str]:
    """A count shows k/n (the evidence behind its Fisher test); other metrics the bare value, since
    one run's interval says nothing about a paired B − A. Where the two runs scored different
    questions, the value on the questions both scored (what the Δ compares), marked `*`."""
    index = 0 if side == "a" else 1

    def text(row: ComparedCell) -> str:
        if spec.name in row.on_shared:
            return f"{num(row.on_shared[spec.name][index])}*"
        if spec.comparison is Comparison.COUNT:
            return spec.show(row.a if side == "a" else row.b)
        return num((row.a if side == "a" else row.b).get(spec.name))

    return text


def _delta(spec: MetricSpec) -> Callable[[ComparedCell], str]:
    return lambda row: spec_delta(spec, row.delta(spec.name))


def flips(row: ComparedCell, spec: MetricSpec) -> Delta | None:
    """The paired comparison of `spec` in a compared cell: n and the flipped ids (None when the
    metric was not compared, or refused for differing setups)."""
    delta = row.delta(spec.name)
    return delta if delta is not None and delta.flips_listed else None


def _paired(spec: MetricSpec) -> Callable[[ComparedCell], str]:
    return lambda row: str(f.n) if (f := flips(row, spec)) else "-"


def _flips(spec: MetricSpec) -> Callable[[ComparedCell], str]:
    def text(row: ComparedCell) -> str:
        f = flips(row, spec)
        return f"{len(f.flipped_to_wrong)} / {len(f.flipped_to_right)}" if f else "-"

    return text


def compare_columns(specs: list[MetricSpec]) -> list[Column[ComparedCell]]:
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


def compare_rows(result: RunComparison) -> list[dict[str, str]]:
    """Display texts (unescaped) per cell, by column key."""
    cols = compare_columns(result.specs())
    return [{c.key: c.text(row) for c in cols} for row in result.cells]


def compare_title(result: RunComparison) -> str:
    a, b = result.a, result.b
    return (f"evalkit compare · A {a.run_id} ({date_text(a.started_at)}) → "
            f"B {b.run_id} ({date_text(b.started_at)})")


def run_facts(meta: RunMeta) -> str:
    """One run of a comparison in a line: model, engine, source SHAs, limit, status."""
    shas = ", ".join(s[:12] for s in meta.source_shas) or "no engine source"
    return f"{meta.model} on {meta.engine} · {shas} · limit {meta.limit or 'none'} · status {meta.status}"


def compare_legend(result: RunComparison) -> str:
    """What Δ and p mean in the compare table (counts: two-sided, a change may go either way)."""
    tests = tests_used(delta_specs(result.specs()), "two-sided Fisher exact ({})", result.evals)
    shared = any(row.on_shared for row in result.cells)
    allowed = f"; compared although A and B differ in: {', '.join(result.allowed)} (--allow)" if result.allowed else ""
    return ("Δ = run B − run A, in points, on the questions both answered" + (f"; p: {tests}" if tests else "")
            + ("; * A and B on those questions alone (the runs scored different questions)" if shared else "")
            + allowed + ".")
