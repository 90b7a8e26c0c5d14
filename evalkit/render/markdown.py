"""GitHub markdown for a PR comment: a run's report, and two runs compared.

Top to bottom: title, run facts, engine sources, the verdict, the pivots, the matrix with its
legend, the broken thresholds, the folded details per cell (markdown_details.py) and the command
that reproduces the run. Every text from a model, a log or a config goes through render/text.py.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from evalkit.evals.base import MetricSpec
from evalkit.redact import redact_argv
from evalkit.render.checks import check_lines, check_table
from evalkit.render.compare_table import (
    compare_columns,
    compare_legend,
    compare_rows,
    compare_title,
    flip_specs,
    flips,
    flips_suffix,
    run_facts,
)
from evalkit.render.costs import cost_line
from evalkit.render.details import Details
from evalkit.render.engine_log import engine_log_lines, engine_log_title
from evalkit.render.header import SIM_NOTE, facts, imports, legend, sources, title, verdict_line
from evalkit.render.headline import headline
from evalkit.render.markdown_details import details_sections, id_list
from evalkit.render.regressions import regression_lines
from evalkit.render.table import Pivot, columns, pivots, table_rows
from evalkit.render.text import html_text, md_cell, md_code, md_fence, no_local_paths
from evalkit.verdict.summary import ComparedCell, RunComparison, RunSummary

FAIL_MARK, WARN_MARK = "❌", "⚠️"


def md_table(headers: Iterable[str], body: Iterable[Iterable[str]]) -> list[str]:
    """A GFM table from already-escaped cells."""
    headers = list(headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(line) + " |" for line in body]
    return lines


def _marked(text: str, mark: str) -> str:
    escaped = md_cell(text)
    if mark == "fail":
        return f"**{escaped}** {FAIL_MARK}"
    return f"{escaped} {WARN_MARK}" if mark == "warn" else escaped


def _matrix(summary: RunSummary) -> list[str]:
    cols = columns(summary.specs(), summary.cells)
    body = [[_marked(row.texts[c.key], row.mark(c.key)) for c in cols] for row in table_rows(summary)]
    return md_table((md_cell(c.header) for c in cols), body)


def _pivot(p: Pivot) -> list[str]:
    body = [[_marked(text, mark) for text, mark in zip(line, marks)] for line, marks in zip(p.rows, p.marks)]
    return md_table((md_cell(h) for h in [p.corner, *p.columns]), body)


def _checks(summary: RunSummary | RunComparison) -> list[str]:
    """`#### Checks`: a line per threshold, then cells x thresholds folded (outcome, adjusted p, MDE)."""
    lines = check_lines(summary)
    if not lines:
        return []
    headers, rows, marks = check_table(summary)
    body = [[_marked(text, mark) for text, mark in zip(row, mark_row)] for row, mark_row in zip(rows, marks)]
    return ["#### Checks: PASS, FAIL or INCONCLUSIVE", "", *(f"- {md_cell(line, limit=1000)}" for line in lines), "",
            "<details><summary>Every check (outcome · adjusted p · minimum detectable effect)</summary>", "",
            *md_table((md_cell(h) for h in headers), body), "", "</details>", ""]


def _reproduce(summary: RunSummary) -> list[str]:
    if not summary.command:
        return []
    command = redact_argv(no_local_paths(str(a)) for a in summary.command)  # `--api-key X` must not reach a PR
    return ["---", "", "Reproduce:", "", md_fence(shlex.join(command), "sh"), ""]


PASTE_LINES = 60
"""Lines the paste above the fold may take for a 12-cell matrix: what a reviewer reads in a PR."""
REPORT_CHARS = 50_000
"""The whole report's budget, well inside the 65,536 characters of a GitHub comment: the
per-cell evidence (markdown_details.py) gets what the rest leaves."""


def _failed(summary: RunSummary | RunComparison) -> list[str]:
    """`#### Failed checks`: each broken failing threshold's message (warnings go under the fold)."""
    flags = [f for c in summary.cells for f in c.flags if f.action == "fail"]
    if not flags:
        return []
    return ["#### Failed checks", "", *(f"- {FAIL_MARK} **FAIL** {md_cell(f.message)}" for f in flags), ""]


def _warnings(summary: RunSummary | RunComparison) -> list[str]:
    flags = [f for c in summary.cells for f in c.flags if f.action != "fail"]
    if not flags:
        return []
    return ["#### Warnings", "", *(f"- {WARN_MARK} warn {md_cell(no_local_paths(f.message))}" for f in flags), ""]


def headline_text(summary: RunSummary | RunComparison, whose: str = "") -> str:
    """The report's first line: ✅ or ❌ and the headline (render/headline.py), bold."""
    ok, _ = verdict_line(summary)
    return f"{'✅' if ok else FAIL_MARK} **{md_cell(whose + headline(summary), limit=2000)}**"


def _paste(summary: RunSummary, details: Details) -> list[str]:
    """What a reviewer reads without a click: the headline, the run in a line, the pivots, the
    failed checks and the tallies."""
    ok, words = verdict_line(summary)
    lines = [headline_text(summary), "", f"<sub>{html_text(title(summary))} · {html_text(' · '.join(facts(summary, details.run)))}</sub>", ""]
    if summary.simulated:
        lines += [f"> {md_cell(SIM_NOTE)}", ""]
    for p in pivots(summary):
        lines += [f"#### {md_cell(p.title)}", "", *_pivot(p), ""]
    lines += _failed(summary)
    if bisected := regression_lines(summary):
        lines += ["#### Regressions bisected", "", *(f"- {md_cell(line, limit=1000)}" for line in bisected), ""]
    cost = [md_cell(line), ""] if (line := cost_line(summary)) else []
    return [*lines, *cost, md_cell(words), ""]


def _folded(summary: RunSummary) -> list[str]:
    """Under the fold: the engine sources, the matrix of all cells, every check and the warnings."""
    lines = []
    for src in sources(summary):
        lines.append(f"- engine source {md_code(src.repo)} @ {md_code(src.ref)} → "
                     f"{md_code(src.sha or '?')}: {md_cell(', '.join(src.cells))}")
    for found in imports(summary):
        lines.append(f"- engine package {md_code(found.package)} imported from {md_code(found.origin)} "
                     f"({md_cell(found.said)}): {md_cell(', '.join(found.cells))}")
    if lines:
        lines.append("")
    lines += ["#### All cells", "", *_matrix(summary), "", md_cell(legend(summary), limit=1000), ""]
    lines += _checks(summary) + _warnings(summary)
    if log_lines := engine_log_lines(summary):
        lines += [f"**{md_cell(engine_log_title(summary))}**", "", *(f"- {md_cell(line)}" for line in log_lines), ""]
    return lines


def report(summary: RunSummary, details: Details) -> str:
    """GitHub markdown for a PR: the paste (headline, pivots, failed checks), then, folded, all
    cells, every check, each cell's evidence and the command that reproduces the run."""
    lines = _paste(summary, details)
    lines += ["<details><summary>All cells, every check, engine sources</summary>", "", *_folded(summary),
              "</details>", ""]
    tail = _reproduce(summary)
    used = sum(len(line) + 1 for line in lines + tail)
    budget = REPORT_CHARS - used
    for _ in range(3):  # the sections' own lines (summaries, counts) come on top of their budget
        sections = details_sections(summary, details, budget)
        over = used + sum(len(line) + 1 for line in sections) - REPORT_CHARS
        if over <= 0 or budget <= 0:
            break
        budget -= over
    lines += sections + tail
    return "\n".join(lines).rstrip("\n") + "\n"


def comparison(result: RunComparison) -> str:
    """The compare table for a PR, B's verdict against A (its checks, its broken thresholds), and
    each cell's flipped question ids folded."""
    lines = [headline_text(result, "B against A: "), "", f"### {md_cell(compare_title(result), limit=1000)}", "",
             f"- A: {md_cell(run_facts(result.a))}", f"- B: {md_cell(run_facts(result.b))}", ""]
    if result.a.simulated or result.b.simulated:
        lines += [f"> {md_cell(SIM_NOTE)}", ""]
    specs = result.specs()
    cols = compare_columns(specs)
    body = [[md_cell(texts[c.key]) for c in cols] for texts in compare_rows(result)]
    lines += md_table((md_cell(c.header) for c in cols), body)
    lines += ["", md_cell(compare_legend(result), limit=1000), ""]
    _, words = verdict_line(result)
    lines += [f"B against A: {md_cell(words)}", ""]
    lines += _checks(result) + _failed(result) + _warnings(result)
    lines += [line for row in result.cells for spec in flip_specs(specs)
              for line in _compare_flips(row, spec, specs)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _compare_flips(row: ComparedCell, spec: MetricSpec, specs: list[MetricSpec]) -> list[str]:
    """A cell's questions of `spec` that flipped between the runs, folded (ids only)."""
    paired = flips(row, spec)
    if not paired or not (paired.flipped_to_wrong or paired.flipped_to_right):
        return []
    wrong, right = paired.flipped_to_wrong, paired.flipped_to_right
    line = f"{row.id}: {len(wrong)} to wrong, {len(right)} to right{flips_suffix(spec, specs)}"
    return [f"<details><summary>{html_text(line)}</summary>", "", f"Right in A, wrong in B: {id_list(wrong) or '-'}", "",
            f"Wrong in A, right in B: {id_list(right) or '-'}", "", "</details>", ""]
