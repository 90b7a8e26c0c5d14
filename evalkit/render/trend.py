"""A history trend as a terminal table and a PNG; which metrics they show comes from their MetricSpecs.

The history (`evalkit.history.db`) stores every numeric flat metric of every eval; this module
decides what a reader sees, from each metric's `MetricSpec`, so a new eval needs no edit here:

* value columns: every metric with a report `column`, in eval order, headed by its short key
  (`spec.display.key`: ``strict``, ``flexible``, ``collapse``), three decimals;
* the headline: the first of those with a `delta_label` (GSM8K flexible). It alone gets a change
  column right after its value, ``Δ <delta_label>``: the change since the cell's previous run that
  measured it, in points for a share (PAIRED, COUNT), else the plain difference; between runs
  that are not alike (their comparability keys differ) it says what differs and the change since the last alike run. One Δ column keeps
  the table readable, and the headline is the one number a nightly is judged by;
* ``n``, last: the headline eval's sample count (``<eval>.n``; ``gsm8k.n``);
* plot panels: every metric with a `pivot`, in eval order, that some point has a value of
  (the first such metric when none has, so the figure is never empty); the y label is the
  metric's label, with " accuracy" for a PAIRED metric (a mean of per-question 0/1 marks), and a
  share (PAIRED, COUNT) is drawn in percent.

For GSM8K and the collapse check that is the table of the first history schema: strict,
flexible, Δ flexible, collapse, n; and its two panels.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timezone
from pathlib import Path

from evalkit.errors import ConfigError
from evalkit.evals import registry
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.evalset import eval_name
from evalkit.history.db import Point, by_cell
from evalkit.history.keys import key_differences, row_key
from evalkit.render.checks import numbered_rules, outcomes_text, stored
from evalkit.render.fitted import FitColumn, FittedTable

DEFAULT_LAST = 20
"""Runs per cell in the trend table: a table of 1,000 nights is read by nobody (the plot has all)."""

SHARES = (Comparison.PAIRED, Comparison.COUNT)
"""Comparison kinds whose values are shares in [0, 1]: Δ in points, plot axes in percent."""


@dataclass(frozen=True)
class Layout:
    """The metric columns of the trend table (rule in the module docstring)."""

    values: tuple[MetricSpec, ...]
    headline: MetricSpec | None
    n_metric: str | None

    def headers(self) -> list[str]:
        out = []
        for spec in self.values:
            out.append(spec.short)
            if spec is self.headline:
                out.append(f"Δ {spec.display.delta_label}")
        return out + (["n"] if self.n_metric else [])

    def texts(self, point: Point, change: str) -> list[str]:
        """One row's metric cells, in `headers` order."""
        out = []
        for spec in self.values:
            out.append(_fmt(point.metrics.get(spec.name)))
            if spec is self.headline:
                out.append(change)
        return out + ([_count(point.metrics.get(self.n_metric))] if self.n_metric else [])


def layout(points: list[Point] | None = None, specs: list[MetricSpec] | None = None) -> Layout:
    """The trend table's metric columns for `specs` (default: the built-in evals' fixed metrics; the
    history command passes those its runs' stored cells report); given the points, only the
    headline and the metrics some point measured (as pivots: engine figures of a history that
    never scraped an engine would be columns of dashes)."""
    values = tuple(spec for spec in (registry.builtins().metrics() if specs is None else specs) if spec.display.column)
    headline = next((spec for spec in values if spec.display.delta_label), None)
    if points is not None:
        values = tuple(s for s in values if s is headline or any(s.name in p.metrics for p in points))
    return Layout(values, headline, f"{eval_name(headline.name)}.n" if headline else None)


def panels(points: list[Point], specs: list[MetricSpec] | None = None) -> list[MetricSpec]:
    """The plot's panels for these points (rule in the module docstring; `specs` as `layout`'s)."""
    pivots = [spec for spec in (registry.builtins().metrics() if specs is None else specs) if spec.display.pivot]
    shown = [spec for spec in pivots if any(spec.name in p.metrics for p in points)]
    return shown or pivots[:1]


def panel_label(spec: MetricSpec) -> str:
    return spec.display.label + (" accuracy" if spec.comparison is Comparison.PAIRED else "")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _count(value: float | None) -> str:
    """A sample count stored as REAL: ``20``; none or zero: ``-``."""
    if not value:
        return "-"
    return str(int(value)) if float(value).is_integer() else str(value)


def _utc_minute(point: Point) -> str:
    when = point.when
    if when is None:
        return point.started_at or "?"
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    return f"{when:%Y-%m-%d %H:%M}"


def _rows(series: list[Point], spec: MetricSpec | None) -> list[tuple[Point, str]]:
    """Each point with the change of `spec` since the cell's previous run that measured it. Where
    the two runs are not alike (their comparability keys differ beyond the build: another question
    set from a `--limit`, another eval set-up, engine arguments or environment) the change says what
    differs instead (`gsm8k question set: 1319 vs 50`), then the change since the cell's last run
    that is alike, naming it: a delta between a 1,319-question and a 50-question score is not a
    trend (issues 38 and 47)."""
    out: list[tuple[Point, str]] = []
    measured: list[tuple[Point, float]] = []
    scale = 100 if spec is not None and spec.comparison in SHARES else 1
    eval_name = spec.name.split(".", 1)[0] if spec is not None else ""
    for p in series:
        value = p.metrics.get(spec.name) if spec is not None else None
        change = "-"
        if value is not None and measured:
            last_value, differs = measured[-1][1], _unlike(measured[-1][0], p, eval_name)
            change = f"{(value - last_value) * scale:+.1f}"
            if differs:
                alike = next(((q, v) for q, v in reversed(measured[:-1]) if not _unlike(q, p, eval_name)), None)
                change = "; ".join(differs) + (f"; {(value - alike[1]) * scale:+.1f} since {alike[0].run_id}"
                                               if alike else "; no earlier run alike")
        if value is not None:
            measured.append((p, value))
        out.append((p, change))
    return out


def _unlike(a: Point, b: Point, eval_name: str) -> list[str]:
    """What makes two runs' scores of one eval incomparable, by the one notion of comparable
    (store/comparability.py, as the history keeps each cell's key: history/keys.py), builds aside:
    `gsm8k question set: 1319 vs 50`, `gsm8k setup: num_fewshot 5 vs 3`, `engine arguments differ`
    ([] when alike, or when a run predates what would tell)."""
    return key_differences(row_key(a.key, eval_name, a.setups, a.metrics, a.model, a.engine),
                           row_key(b.key, eval_name, b.setups, b.metrics, b.model, b.engine))


def trend_table(points: list[Point], title: str, last: int | None = DEFAULT_LAST,
                specs: list[MetricSpec] | None = None) -> FittedTable:
    """The trend table: one section per cell, its last `last` runs (all when None), with the change
    since the run before (`specs` as `layout`'s), and each run's verdict on the cell: its checks,
    PASS, FAIL or INCONCLUSIVE with the MDE (render/checks.py), the rules numbered in the caption.
    Fitted to the console (render/fitted.py): at 80 columns it keeps the cell, the run, the headline
    metric and its change, leaving out and naming the rest (`RANKS`); no value is split."""
    columns = layout(points, specs)
    numbers = numbered_rules(stored(p.checks) for p in points)
    caption = "checks: " + "; ".join(f"#{n} {rule}" for rule, n in numbers.items()) if numbers else None
    headers = ["cell", "run started (UTC)", "run", "source", "status", *columns.headers(), *(["checks"] if numbers else [])]
    texts: list[list[str]] = [[] for _ in headers]
    sections = []
    for cell_id, series in by_cell(points).items():
        rows = _rows(series, columns.headline)
        shown = rows[-last:] if last else rows
        sections.append(len(texts[0]))
        for i, (p, change) in enumerate(shown):
            label = cell_id if i == 0 else ""
            if i == 0 and len(shown) < len(rows):
                label += f" (last {len(shown)} of {len(rows)})"
            checked = [outcomes_text(stored(p.checks), numbers, specs or registry.builtins().metrics())] if numbers else []
            row = [label, _utc_minute(p), p.run_id, (p.source_sha or "-")[:12], p.status, *columns.texts(p, change),
                   *checked]
            for column, text in zip(texts, row):
                column.append(text)
    headline = columns.headline.short if columns.headline else None
    fitted = [FitColumn(header, column, _rank(i, header, headline), wraps=header in WRAPS or header.startswith("Δ"))
              for i, (header, column) in enumerate(zip(headers, texts))]
    return FittedTable(title, caption, fitted, sections, "a wider terminal or --format csv")


RANKS = {"run started (UTC)": 1, "source": 2, "status": 4, "n": 5, "checks": 6}
"""When a trend column is left out to fit the terminal (lower first): the run's time (its id says
it), the engine commit, the metrics other than the headline (3, rightmost first), the status, n,
the checks, then the headline's change (7). Never: the cell, the run, the headline metric."""
WRAPS = ("cell", "checks")
"""Columns whose texts wrap at their spaces (a label with "(last 20 of 31)", a list of checks)."""


def _rank(index: int, header: str, headline: str | None) -> tuple[int, int] | None:
    if header in ("cell", "run") or header == headline:
        return None
    if header.startswith("Δ"):
        return (7, -index)
    return (RANKS.get(header, 3), -index)


def plot(points: list[Point], out_path: Path, title: str, specs: list[MetricSpec] | None = None) -> None:
    """Every pivoted metric over time (GSM8K flexible, collapse rate), one line per cell, as a PNG.

    Runs headless (Agg backend). matplotlib is imported here so that the rest of evalkit does
    not need it.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt
        import matplotlib.ticker as mticker
    except ImportError as e:
        raise ConfigError("--plot needs matplotlib: pip install matplotlib") from e
    series = {cell: [p for p in pts if p.when is not None] for cell, pts in by_cell(points).items()}
    specs = panels(points, specs)
    fig, axes = plt.subplots(max(1, len(specs)), 1, sharex=True, squeeze=False,
                             figsize=(11, 2 + 2.5 * max(1, len(specs))), layout="constrained")
    colours = plt.get_cmap("tab20" if len(series) > 10 else "tab10")
    for spec, ax in zip(specs, axes[:, 0]):
        for i, (cell, pts) in enumerate(series.items()):
            measured = [p for p in pts if spec.name in p.metrics]
            # tab20 pairs a dark and a light shade of one hue; with the A/B axis last, twins are
            # neighbours, so a twin pair shares a hue and differs in shade and line style. A line
            # joins only runs that are alike (one comparability key): a `--limit` run is a point apart.
            for k, segment in enumerate(_alike_segments(measured, spec.name.split(".", 1)[0])):
                ax.plot([p.when for p in segment], [p.metrics[spec.name] for p in segment], "--" if i % 2 else "-",
                        marker="o", markersize=4, linewidth=1.8, color=colours(i % colours.N),
                        label=cell if k == 0 else None)
        ax.set_ylabel(panel_label(spec))
        ax.grid(True, alpha=0.3)
        if spec.comparison in SHARES:
            ax.yaxis.set_major_formatter(mticker.PercentFormatter(1.0, decimals=0))
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    axes[-1, 0].xaxis.set_major_locator(locator)
    axes[-1, 0].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    axes[-1, 0].set_xlabel("run started (UTC)")
    axes[0, 0].set_title(title)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside right upper", title="cell", fontsize="small")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)


def _alike_segments(points: list[Point], eval_name: str) -> list[list[Point]]:
    """`points` cut wherever a run is not alike the one before it (`_unlike`): the plot's lines."""
    out: list[list[Point]] = []
    for p in points:
        if out and not _unlike(out[-1][-1], p, eval_name):
            out[-1].append(p)
        else:
            out.append([p])
    return out
