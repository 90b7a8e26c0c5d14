"""What a report says above and below its tables: title, run facts, verdict, legend (pure data).

The texts are unescaped; each renderer escapes them for its target. The legend names the test
behind each p-value from the metrics' comparison kinds, so a new eval's deltas are explained too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from evalkit.evals.base import Comparison, Eval, MetricSpec
from evalkit.evals.evalset import EvalSet, eval_name
from evalkit.redact import strip_userinfo
from evalkit.render.gpus import box_text
from evalkit.render.numbers import date_text
from evalkit.render.text import no_local_paths
from evalkit.verdict.summary import RunComparison, RunSummary

SIM_NOTE = "Engine: evalkit's SIMULATED engine (not a real model): figures show the pipeline, not a model."


@dataclass(frozen=True)
class EngineSource:
    """One engine source tree of the run (user info stripped from the repo) and its cells."""

    repo: str
    ref: str
    sha: str
    cells: list[str]


@dataclass(frozen=True)
class ImportGroup:
    """Cells whose engine package imported from one place, with the verdict in words."""

    package: str
    origin: str
    said: str
    cells: list[str]


def sources(summary: RunSummary) -> list[EngineSource]:
    """Distinct engine sources (repo, ref, sha) with the cells built from each, in run order (a
    local repo's path cut to its last parts, render/text.py `no_local_paths`)."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for cell in summary.cells:
        if src := cell.source:
            groups.setdefault((no_local_paths(strip_userinfo(src.repo or "")), src.ref or "", src.sha or ""),
                              []).append(cell.id)
    return [EngineSource(r, ref, sha, ids) for (r, ref, sha), ids in groups.items()]


def imports(summary: RunSummary) -> list[ImportGroup]:
    """Where each cell's engine package imported from (asked before it started), grouped: one
    entry per (package, origin, verdict) with its cells, in run order; `said` is the verdict in
    words: inside the cell's source tree, OUTSIDE it (the cell did not start), or no tree to prove."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for cell in summary.cells:
        if found := cell.imports:
            said = {True: "inside its source tree", False: f"OUTSIDE its source tree {no_local_paths(found.tree or '')}",
                    None: "no source tree"}[found.inside]
            groups.setdefault((found.package, no_local_paths(found.origin or "nowhere"), said), []).append(cell.id)
    return [ImportGroup(p, o, s, ids) for (p, o, s), ids in groups.items()]


def _source_label(source: EngineSource, summary: RunSummary) -> str:
    """`ccc861dc5ab1 (fix=fixon)` when one axis value names the source's cells."""
    sha = (source.sha or "?")[:12]
    cells = {c.id: c.axes for c in summary.cells}
    members = [cells[i] for i in source.cells if i in cells]
    others = [axes for cid, axes in cells.items() if cid not in source.cells]
    for axis, value in (members[0].items() if members else []):
        if all(m.get(axis) == value for m in members) and all(o.get(axis) != value for o in others):
            return f"{sha} ({axis}={value})"
    return f"{sha} ({len(members)} cells)"


def title(summary: RunSummary) -> str:
    """`evalkit · MODEL on ENGINE · SHAs · DATE`."""
    parts = ["evalkit", f"{summary.model} on {summary.engine}"]
    srcs = sources(summary)
    if srcs:
        labels = [_source_label(s, summary) for s in srcs]
        parts.append(", ".join(labels) if len(labels) <= 3 else f"{len(labels)} engine sources")
    parts.append(date_text(summary.started_at))
    return " · ".join(parts)


def facts(summary: RunSummary, run: dict[str, Any]) -> list[str]:
    """Facts for the line under the title, from the summary and run.json (`run`, may be empty)."""
    out = [f"run {summary.run_id}", f"status {summary.status or '?'}", f"{len(summary.cells)} cells"]
    if run.get("limit"):
        out.append(f"limit {run['limit']}")
    if run.get("evalkit_version"):
        sha = f" ({run['evalkit_git_sha'][:12]})" if run.get("evalkit_git_sha") else ""
        out.append(f"evalkit {run['evalkit_version']}{sha}")
    if run.get("lm_eval_version"):
        out.append(f"lm-eval {run['lm_eval_version']}")
    if gpus := box_text(run.get("gpus")):
        out.append(gpus)
    return out


def verdict_line(summary: RunSummary | RunComparison) -> tuple[bool, str]:
    """(ok, sentence): the run's (or a comparison's) verdict in words."""
    n, failed, broken, warned = len(summary.cells), summary.failed_cells, summary.broken_thresholds, summary.warnings
    # a cell not run, a run not finished, --strict's INCONCLUSIVE, a cell no check judged: never OK
    ok = summary.exit_code == 0 and not summary.unjudged
    words = [f"{broken} threshold{'s' if broken != 1 else ''} broken", f"{failed} of {n} cells failed to run",
             f"{warned} warning{'s' if warned != 1 else ''}"]
    if unsure := summary.inconclusive_checks:  # too little evidence to pass: --strict exits 5 on it
        words.insert(1, f"{unsure} check{'s' if unsure != 1 else ''} INCONCLUSIVE")
    status = summary.status if isinstance(summary, RunSummary) else None  # a comparison judges finished runs
    if status == "interrupted":
        words.insert(0, "run interrupted")
    elif status == "running":  # still running, or killed before it could say so
        words.insert(0, "run not finished")
    return ok, ", ".join(words) + f"; exit {summary.exit_code}"


def eval_title(ev: Eval) -> str:
    """How a legend names an eval: its `title` ("GSM8K"), else its name."""
    return ev.display.title or ev.name


def tests_used(specs: Iterable[MetricSpec], fisher: str, evals: EvalSet) -> str:
    """`McNemar exact (GSM8K), one-sided Fisher exact (collapse rise)`: the test behind the p-values
    of `specs`, each once. A paired metric is tested on its eval's questions, so the eval is named
    (its title, from the run's `evals`; else its name); a count by its delta label, in `fisher`
    ("one-sided Fisher exact ({} rise)")."""
    parts: list[str] = []
    for spec in specs:
        ev = evals.eval_of(spec.name)
        if spec.comparison is Comparison.PAIRED:
            part = f"McNemar exact ({eval_title(ev) if ev is not None else eval_name(spec.name)})"
        elif spec.comparison is Comparison.COUNT:
            part = fisher.format(spec.display.delta_label or spec.short)
        else:
            continue  # continuous: a difference without a test
        if part not in parts:
            parts.append(part)
    return ", ".join(parts)


def legend(summary: RunSummary) -> str:
    """What the delta columns compare, in one sentence."""
    parts = []
    if summary.baseline:
        parts.append(f"baseline = {summary.baseline}")
    if ab := summary.ab:
        parts.append(f"twin = the same cell with {ab['axis']}={ab['on']}")
    parts.append("Δ = this cell − its reference, in points")
    specs = summary.specs()
    between = [s.display.delta_label for s in specs if s.display.delta_label and s.comparison is Comparison.PAIRWISE]
    if between:
        parts.append(f"{', '.join(between)}: measured between the cell's and its reference's outputs")
    tests = tests_used((s for s in specs if s.display.delta_label), "one-sided Fisher exact ({} rise)", summary.evals)
    if tests:
        parts.append(f"p: {tests}")
    return "; ".join(parts) + "."
