"""The history for dashboards: github-action-benchmark's JSON, and CSV for anything else.

github-action-benchmark (benchmark-action/github-action-benchmark, src/extract.ts,
`extractCustomBenchmarkResult`) reads, for its `customBiggerIsBetter` and `customSmallerIsBetter`
tools, a JSON array of `{name, value, unit, range?, extra?}`, one entry per series, and stamps the
workflow's commit on the data point itself. One file holds one direction (the tool is chosen per
action step), so `benchmark_json` takes the direction and emits the metrics that go that way: a
nightly publishes accuracy with `customBiggerIsBetter` and collapse rates with
`customSmallerIsBetter`. Only the newest run of the selection is emitted: the action appends one
point per workflow run, and a second export of older runs would plot them at today's commit.
`extra` names the run and the engine source SHA the cell ran, so a point on the chart leads back
to its run folder and commit.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from evalkit.evals import registry
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.evalset import spec_named
from evalkit.history.db import Point
from evalkit.render.checks import stored, with_mde
from evalkit.render.text import csv_safe

_SHARE_UNIT = {Comparison.PAIRED: "accuracy (0-1)", Comparison.COUNT: "rate (0-1)"}


def newest_run(points: Sequence[Point]) -> list[Point]:
    """The points of the last run in time order (the history returns them oldest first)."""
    if not points:
        return []
    last = points[-1].run_id
    return [p for p in points if p.run_id == last]


def benchmark_json(points: Sequence[Point], bigger: bool, specs: list[MetricSpec] | None = None) -> str:
    """The newest run's metrics that improve as they grow (`bigger`) or as they shrink, one entry per cell x metric,
    in github-action-benchmark's custom format. Metrics without a registered spec (counts such as
    `gsm8k.n`) have no direction and are left out. `specs`: the metrics the points' runs report
    (default: the built-in evals' fixed ones)."""
    specs = registry.builtins().metrics() if specs is None else specs
    entries = []
    for point in newest_run(points):
        for name, value in point.metrics.items():
            spec = spec_named(name, specs)
            if spec is None or spec.higher_is_better != bigger:
                continue
            entries.append({
                "name": f"{point.cell_id} {name}",
                "unit": _SHARE_UNIT.get(spec.comparison, spec.display.label),
                "value": value,
                "extra": f"run {point.run_id}\nstatus {point.status}\nengine source {point.source_sha or 'installed'}"
                         f"\nstarted {point.started_at or '?'}",
            })
    return json.dumps(entries, indent=2) + "\n"


def history_csv(points: Sequence[Point]) -> str:
    """Every point as a row: run, time, cell, status and source SHA, then one column per metric
    (sorted by name; empty where a cell did not report it), then `checks`: each threshold's
    outcome in that run, `<outcome> <rule>` joined by "; ", an INCONCLUSIVE one with its MDE."""
    names = sorted({name for p in points for name in p.metrics})
    specs = registry.builtins().metrics()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run_id", "started_at", "cell", "status", "source_sha", *names, "checks"])
    for p in points:
        head = [csv_safe(v) for v in (p.run_id, p.started_at or "", p.cell_id, p.status, p.source_sha or "")]
        checks = "; ".join(f"{c.outcome} {with_mde(c, c.rule, specs)}" for c in stored(p.checks))
        writer.writerow([*head, *("" if p.metrics.get(n) is None else repr(p.metrics[n]) for n in names), csv_safe(checks)])
    return out.getvalue()
