"""A forest plot of the deltas: where people look rather than read.

One panel per compared share (GSM8K accuracy, collapse rate, ...: PAIRED and COUNT metrics that a
cell was compared on), one row per cell and reference (its baseline, its fix-on twin): the
difference in points with its 95% interval, a line at 0, the margins of the thresholds checked on
that metric and reference drawn dashed, and each row coloured by the outcome of those checks
(FAIL red, INCONCLUSIVE amber, PASS or unchecked grey), so a reviewer sees at a glance which cell
moved, by how much, and whether the test could have seen it.

Intervals: PAIRED deltas carry their own (Newcombe's paired interval, stats.paired_comparison);
COUNT deltas get Newcombe's unpaired hybrid score interval from the two cells' k and n
(stats.newcombe_unpaired). The figure is drawn with matplotlib (Agg, imported only here): an SVG
string with real text and fixed element ids for the HTML report (inline, no network; the page's CSP allows inline
styles) and a PNG for `evalkit report RUN --plot FILE`.
"""

from __future__ import annotations

import io
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import ConfigError
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.render.checks import checks_of
from evalkit.render.table import AGAINST
from evalkit.stats.tests import newcombe_unpaired
from evalkit.verdict.summary import CellRow, CheckRecord, Delta, RunSummary

_RANK = {"FAIL": 3, "INCONCLUSIVE": 2, "PASS": 1}
_COLOURS = {"FAIL": "#c62828", "INCONCLUSIVE": "#e69500", "PASS": "#455a64", None: "#90a4ae"}
_INLINE_ONLY = re.compile(r'<metadata>.*?</metadata>|<!--.*?-->|\s+xmlns(?::xlink)?="[^"]*"', re.S)
"""What an SVG file needs and an inline one does not: its metadata block (a creation date, links to
RDF vocabularies), comments, and namespace declarations (HTML's parser knows svg and xlink)."""
ROW_INCHES = 0.24
"""Height per row: 8-point labels stay apart at 96 rows (48 cells x 2 references)."""


@dataclass(frozen=True)
class ForestRow:
    cell: str
    reference: str
    """"baseline" or "twin"."""
    diff: float
    low: float
    high: float
    outcome: str | None
    """The worst outcome of the thresholds checked on this metric and reference (None: none)."""


@dataclass(frozen=True)
class Panel:
    spec: MetricSpec
    rows: list[ForestRow]
    margins: list[float]
    """Signed margins to draw (a max_drop margin m at -m, a max_rise at +m, an equivalence at both)."""


def _interval(spec: MetricSpec, delta: Delta, cell: CellRow, ref: CellRow | None) -> tuple[float, float] | None:
    if delta.ci95:
        low, high = delta.ci95
        return float(low), float(high)
    if spec.comparison is Comparison.COUNT and ref is not None and spec.count_metric and spec.n_metric:
        k1, n1 = cell.metrics.get(spec.count_metric), cell.metrics.get(spec.n_metric)
        k2, n2 = ref.metrics.get(spec.count_metric), ref.metrics.get(spec.n_metric)
        if k1 is not None and n1 is not None and k2 is not None and n2 is not None:
            return newcombe_unpaired(int(k1), int(n1), int(k2), int(n2))
    return None


def _checks_on(row: CellRow, metric: str, against: str) -> list[CheckRecord]:
    """The checks of `metric` against this reference (render/checks.py `checks_of`)."""
    suffix = "_vs_baseline" if against == "vs_baseline" else "_ab"
    return [c for c in checks_of(row) if c.metric == metric and c.check.endswith(suffix)]


def _signed(check: CheckRecord) -> list[float]:
    margin, kind = float(check.margin or 0), check.check
    return [-margin] if kind.startswith("max_drop") else [margin] if kind.startswith("max_rise") else [-margin, margin]


def panels(summary: RunSummary) -> list[Panel]:
    """The panels to draw: each PAIRED or COUNT metric some cell was compared on, in the summary's order."""
    cells = {row.id: row for row in summary.cells}
    out = []
    for spec in summary.specs():
        if spec.comparison not in (Comparison.PAIRED, Comparison.COUNT):
            continue
        rows, margins = [], set[float]()
        for row in summary.cells:
            for against, word in AGAINST:
                deltas = row.against(against)
                delta = deltas.of(spec.name) if deltas is not None else None
                if deltas is None or delta is None or delta.diff is None:
                    continue
                found = _interval(spec, delta, row, cells.get(deltas.reference))
                if found is None:
                    continue
                checks = _checks_on(row, spec.name, against)
                margins.update(m for c in checks for m in _signed(c))
                outcome = max((c.outcome for c in checks if c.outcome in _RANK), key=lambda o: _RANK[o], default=None)
                rows.append(ForestRow(row.id, word, float(delta.diff), found[0], found[1], outcome))
        if rows:
            out.append(Panel(spec, rows, sorted(margins)))
    return out


PNG_DPI = 120
WIDTH_INCHES = 7.5
"""900 pixels at PNG_DPI, a GitHub PR column's width, so the PNG is shown at its own size, never
shrunk; in the HTML page 720 CSS pixels (SVG points are 4/3 of a pixel)."""


def _label(key: tuple[str, str], outcome: str | None) -> str:
    cell, reference = key
    return f"{cell} vs {reference}" + (f"  {outcome}" if outcome in ("FAIL", "INCONCLUSIVE") else "")


def _figure(summary: RunSummary) -> Any:
    """The matplotlib figure (None when nothing was compared): the panels side by side, one row of
    labels on the left for all of them (a row is a cell and a reference), WIDTH_INCHES wide."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as e:
        raise ConfigError("the deltas plot needs matplotlib: pip install matplotlib") from e
    found = panels(summary)
    if not found:
        return None
    keys = list(dict.fromkeys((r.cell, r.reference) for panel in found for r in panel.rows))
    worst: dict[tuple[str, str], str | None] = {}
    for panel in found:
        for r in panel.rows:
            now = worst.get((r.cell, r.reference))
            if _RANK.get(r.outcome or "", 0) > _RANK.get(now or "", 0):
                worst[(r.cell, r.reference)] = r.outcome
    y_of = {key: len(keys) - 1 - i for i, key in enumerate(keys)}
    fig, axes = plt.subplots(1, len(found), squeeze=False, sharey=True,
                             figsize=(WIDTH_INCHES, 1.5 + ROW_INCHES * len(keys)), layout="constrained")
    for panel, ax in zip(found, axes[0]):
        for r in panel.rows:
            colour = _COLOURS.get(r.outcome, _COLOURS[None])
            ax.errorbar([100 * r.diff], [y_of[(r.cell, r.reference)]],
                        xerr=[[100 * (r.diff - r.low)], [100 * (r.high - r.diff)]],
                        fmt="o" if r.reference == "baseline" else "s", color=colour, ecolor=colour, capsize=2,
                        markersize=4, linewidth=1.2)
        ax.axvline(0, color="black", linewidth=0.8)
        for margin in panel.margins:
            ax.axvline(100 * margin, color="#6d4c41", linestyle="--", linewidth=0.9)
        ax.set_ylim(-0.7, len(keys) - 0.3)
        ax.set_xlabel(textwrap.fill(f"Δ {panel.spec.display.label}, points (95% interval)", 20 if len(found) > 2 else 40),
                      fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(True, axis="x", alpha=0.3)
    first = axes[0][0]
    first.set_yticks([y_of[key] for key in keys], [_label(key, worst.get(key)) for key in keys], fontsize=8)
    for label, key in zip(first.get_yticklabels(), keys):
        outcome = worst.get(key)
        label.set_color(_COLOURS[outcome] if outcome in ("FAIL", "INCONCLUSIVE") else "black")
    fig.suptitle(f"evalkit {summary.run_id}: differences from the baseline (o) and the twin (■)\n"
                 "dashed: threshold margins; red FAIL, amber INCONCLUSIVE", fontsize=9)
    return fig


def svg(summary: RunSummary) -> str | None:
    """The plot as an inline `<svg>` element with real text (None when nothing was compared)."""
    import matplotlib

    fig = _figure(summary)
    if fig is None:
        return None
    for artist in fig.findobj():  # no clip paths: the page references nothing, not even url(#id)
        artist.set_clip_on(False)
    buffer = io.StringIO()
    # a fixed salt and no date: the same summary makes the same page (ids are random otherwise)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "evalkit"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    _close(fig)
    text = buffer.getvalue()
    return _INLINE_ONLY.sub("", text[text.index("<svg"):])


def png(summary: RunSummary, out_path: Path) -> bool:
    """Write the plot as a PNG; False (nothing written) when no cell was compared with anything."""
    fig = _figure(summary)
    if fig is None:
        return False
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=PNG_DPI)
    _close(fig)
    return True


def _close(fig: Any) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)
