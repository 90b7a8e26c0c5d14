"""The matrix table and its pivots: one row per cell, its columns read from the metrics the summary records.

Pure data, no I/O: display texts (unescaped) and which of them broke a threshold; each renderer
escapes them for its target. A registered eval's metric appears by what its MetricSpec declares,
so a new eval needs no edit here:

* `column`: a value column (the text is `MetricSpec.show` of the cell's flat metrics);
* `delta_label`: the two delta columns, this cell minus the baseline and minus its A/B twin
  (the same cell with the `ab.on` value): a rate in points with its p-value, a continuous value
  as the plain difference; a PAIRWISE metric (measured between the two cells) as that value,
  under `<delta_label> vs baseline` (no Δ: it is not a difference);
* `pivot`: the metric by configuration, the A/B axis (else the last axis) as columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.evalset import spec_named
from evalkit.render.costs import gpu_hours
from evalkit.render.numbers import delta_text
from evalkit.render.text import no_local_paths
from evalkit.verdict.summary import CellRow, Delta, Flag, RunSummary

AGAINST = (("vs_baseline", "baseline"), ("vs_ab", "twin"))
"""A cell's two references: the summary key of each comparison and the word the report uses."""

Source = TypeVar("Source")
"""What a table's rows are read from: a summary's `CellRow`, or a compare row."""


@dataclass(frozen=True)
class Column(Generic[Source]):
    """One column of a table: its key (what flags and marks refer to), header and cell text."""

    key: str
    header: str
    text: Callable[[Source], str]
    """The display text (unescaped) of one row of the table's source (a summary cell, a compare row)."""


def _status(cell: CellRow) -> str:
    """`ok`, or the status and its error (local paths cut: render/text.py `no_local_paths`)."""
    if cell.status == "ok":
        return "ok"
    return f"{cell.status}: {no_local_paths(cell.error)}" if cell.error else cell.status


def _value(spec: MetricSpec) -> Callable[[CellRow], str]:
    return lambda cell: spec.show(cell.metrics)


def spec_delta(spec: MetricSpec, delta: Delta | None) -> str:
    """A delta of `spec` as text: in points with p, the plain difference of a continuous value, or
    the value measured between the two cells (PAIRWISE)."""
    return delta_text(delta, tested=spec.comparison is not Comparison.CONTINUOUS,
                      between=spec.comparison is Comparison.PAIRWISE)


def delta_header(spec: MetricSpec, word: str) -> str:
    """`Δ flexible vs baseline`, or `KL p99 vs baseline` for a value between two cells (PAIRWISE)."""
    return f"{'' if spec.comparison is Comparison.PAIRWISE else 'Δ '}{spec.display.delta_label} vs {word}"


def _delta(spec: MetricSpec, against: str) -> Callable[[CellRow], str]:
    return lambda cell: spec_delta(spec, cell.delta(against, spec.name))


def _id(cell: CellRow) -> str:
    return cell.id


def columns(specs: list[MetricSpec], cells: Sequence[CellRow] | None = None) -> list[Column[CellRow]]:
    """cell, status, a value column per metric with `column` (one `column_when_measured` only where
    one of `cells` has it), then `Δ <delta_label> vs baseline` and `vs twin` per metric with
    `delta_label`; metrics in the summary's order (`RunSummary.specs`); last, the cell's GPU-hours
    where one of `cells` recorded its cost."""
    out = [Column("cell", "cell", _id), Column("status", "status", _status)]
    out += [Column(spec.short, spec.display.column, _value(spec)) for spec in specs if spec.display.column and (
        not spec.display.column_when_measured or any(spec.name in c.metrics for c in cells or ()))]
    for spec in specs:
        if spec.display.delta_label:
            out += [Column(f"{spec.short}_{against}", delta_header(spec, word), _delta(spec, against))
                    for against, word in AGAINST]
    if any(c.cost is not None for c in cells or ()):
        out.append(Column("gpu_hours", "GPU-h", gpu_hours))  # the devices it held x its wall (render/costs.py)
    return out


def flag_column(flag: Flag, specs: list[MetricSpec], cols: list[Column[CellRow]]) -> str:
    """The column a broken threshold is marked in: its metric's value column for `min`/`max`, its
    delta column for a change against a reference; the cell id when the table has no such column."""
    spec = spec_named(flag.metric, specs)
    if spec is None:
        return "cell"
    check = flag.check
    if check in ("min", "max"):
        key = spec.short
    else:
        key = f"{spec.short}_{'vs_baseline' if check.endswith('vs_baseline') else 'vs_ab'}"
    return key if any(c.key == key for c in cols) else "cell"


@dataclass
class Row:
    """One cell's display texts (unescaped) and which of them broke a threshold."""

    cell_id: str
    texts: dict[str, str]
    failed: set[str] = field(default_factory=set)
    warned: set[str] = field(default_factory=set)

    def mark(self, key: str) -> str:
        """The mark of the text under column `key`: "fail", "warn" or "" (none)."""
        return "fail" if key in self.failed else "warn" if key in self.warned else ""


def table_rows(summary: RunSummary) -> list[Row]:
    """One row per cell, in run order, with the texts of every column of `columns`."""
    specs = summary.specs()
    cols = columns(specs, summary.cells)
    out = []
    for cell in summary.cells:
        row = Row(cell.id, {c.key: c.text(cell) for c in cols})
        for flag in cell.flags:
            (row.failed if flag.action == "fail" else row.warned).update({flag_column(flag, specs, cols), "cell"})
        out.append(row)
    return out


@dataclass(frozen=True)
class Pivot:
    """A metric laid out with the A/B axis (else the last axis) as columns."""

    title: str
    corner: str
    columns: list[str]
    rows: list[list[str]]
    marks: list[list[str]]
    """Per data cell: "fail", "warn" or "" (parallel to rows)."""


def pivot(summary: RunSummary, spec: MetricSpec) -> Pivot | None:
    """`spec`'s metric by configuration; None when the matrix has fewer than two axes."""
    cells = [c for c in summary.cells if c.axes]
    axes = list(cells[0].axes) if cells else []
    if len(axes) < 2:
        return None
    ab = summary.ab or {}
    col_axis = ab["axis"] if ab.get("axis") in axes else axes[-1]
    row_axes = [a for a in axes if a != col_axis]
    col_values = list(dict.fromkeys(c.axes[col_axis] for c in cells))
    grid = {(tuple(c.axes[a] for a in row_axes), c.axes[col_axis]): c for c in cells}
    with_delta = bool(ab) and col_axis == ab.get("axis") and "off" in ab  # a topology axis has no one `off`
    headers = [*col_values] + ([f"Δ {ab['off']} − {ab['on']}"] if with_delta else [])
    rows_out, marks = [], []
    for key in dict.fromkeys(k for k, _ in grid):
        line, mark = [], []
        for col in col_values:
            cell = grid.get((key, col))
            line.append("" if cell is None else spec.show(cell.metrics) if cell.status == "ok" else cell.status)
            mark.append(_mark(cell, spec.name, ("min", "max")) if cell else "")
        if with_delta:
            off = grid.get((key, ab["off"]))
            line.append(spec_delta(spec, off.delta("vs_ab", spec.name) if off else None))
            mark.append(_mark(off, spec.name, ("max_drop_ab", "max_rise_ab")) if off else "")
        rows_out.append([" · ".join(key), *line])
        marks.append(["", *mark])
    return Pivot(spec.display.pivot or spec.display.label, " · ".join(row_axes), headers, rows_out, marks)


def _mark(cell: CellRow, metric: str, checks: tuple[str, ...]) -> str:
    actions = {f.action for f in cell.flags if f.metric == metric and f.check in checks}
    return "fail" if "fail" in actions else "warn" if "warn" in actions else ""


def pivots(summary: RunSummary) -> list[Pivot]:
    """One pivot per metric with `pivot`, in the summary's order, when some cell measured it (an
    eval a config left off would be a grid of dashes)."""
    out = []
    for spec in summary.specs():
        measured = any(cell.metrics.get(spec.name) is not None for cell in summary.cells)
        if spec.display.pivot and measured and (p := pivot(summary, spec)) is not None:
            out.append(p)
    return out
