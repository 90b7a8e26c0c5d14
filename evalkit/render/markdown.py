"""GitHub markdown for a PR comment: a run's report, and two runs compared.

Top to bottom: title, run facts, engine sources, the verdict, the pivots, the matrix with its
legend, the broken thresholds, the folded details per cell (markdown_details.py) and the command
that reproduces the run. Every text from a model, a log or a config goes through render/text.py.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from evalkit.evals.base import MetricSpec
from evalkit.evals.recorded import specs_of
from evalkit.redact import redact_argv
from evalkit.render.checks import check_lines, check_table
from evalkit.render.compare_table import (
    CompareRow,
    compare_columns,
    compare_legend,
    compare_rows,
    compare_title,
    flip_specs,
    flips,
    flips_suffix,
    run_facts,
)
from evalkit.render.details import Details
from evalkit.render.engine_log import engine_log_lines, engine_log_title
from evalkit.render.header import SIM_NOTE, facts, imports, legend, sources, title, verdict_line
from evalkit.render.markdown_details import details_sections, id_list
from evalkit.render.regressions import regression_lines
from evalkit.render.table import Pivot, columns, pivots, table_rows
from evalkit.render.text import html_text, md_cell, md_code, md_fence
from evalkit.verdict.summary import RunSummary, Verdict

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


def _checks(summary: RunSummary | Verdict) -> list[str]:
    """`#### Checks`: a line per threshold, then cells x thresholds folded (outcome, adjusted p, MDE)."""
    lines = check_lines(summary)
    if not lines:
        return []
    headers, rows, marks = check_table(summary)
    body = [[_marked(text, mark) for text, mark in zip(row, mark_row)] for row, mark_row in zip(rows, marks)]
    return ["#### Checks: PASS, FAIL or INCONCLUSIVE", "", *(f"- {md_cell(line, limit=1000)}" for line in lines), "",
            "<details><summary>Every check (outcome · adjusted p · minimum detectable effect)</summary>", "",
            *md_table((md_cell(h) for h in headers), body), "", "</details>", ""]


def _flags(summary: RunSummary | Verdict) -> list[str]:
    """`#### Thresholds`: each broken (FAIL) or warned threshold's message, a run's or a comparison's."""
    flags = [f for c in summary.cells for f in c.flags]
    if not flags:
        return []
    return ["#### Thresholds", "", *(f"- {FAIL_MARK} **FAIL** {md_cell(f.message)}" if f.action == "fail"
                                     else f"- {WARN_MARK} warn {md_cell(f.message)}" for f in flags), ""]


def _reproduce(summary: RunSummary) -> list[str]:
    if not summary.command:
        return []
    command = redact_argv(str(a) for a in summary.command)  # `--api-key X` must not reach a PR
    return ["---", "", "Reproduce:", "", md_fence(shlex.join(command), "sh"), ""]


def report(summary: RunSummary, details: Details) -> str:
    """GitHub markdown for a PR: title, verdict, pivots, the matrix, flags, details, command."""
    ok, words = verdict_line(summary)
    lines = [f"### {md_cell(title(summary), limit=1000)}", "", md_cell(" · ".join(facts(summary, details.run))), ""]
    for src in sources(summary):
        lines.append(f"- engine source {md_code(src.repo)} @ {md_code(src.ref)} → "
                     f"{md_code(src.sha or '?')}: {md_cell(', '.join(src.cells))}")
    for found in imports(summary):
        lines.append(f"- engine package {md_code(found.package)} imported from {md_code(found.origin)} "
                     f"({md_cell(found.said)}): {md_cell(', '.join(found.cells))}")
    if sources(summary) or imports(summary):
        lines.append("")
    if summary.simulated:
        lines += [f"> {md_cell(SIM_NOTE)}", ""]
    lines += [f"{'✅' if ok else FAIL_MARK} **{md_cell(words)}**", ""]
    for p in pivots(summary):
        lines += [f"#### {md_cell(p.title)}", "", *_pivot(p), ""]
    lines += ["#### All cells", "", *_matrix(summary), "", md_cell(legend(summary), limit=1000), ""]
    lines += _checks(summary) + _flags(summary)
    if bisected := regression_lines(summary):
        lines += ["#### Regressions bisected", "", *(f"- {md_cell(line, limit=1000)}" for line in bisected), ""]
    if log_lines := engine_log_lines(summary):
        lines += [f"<details><summary>{html_text(engine_log_title(summary))}</summary>", "",
                  *(f"- {md_cell(line)}" for line in log_lines), "", "</details>", ""]
    lines += details_sections(summary, details)
    lines += _reproduce(summary)
    return "\n".join(lines).rstrip("\n") + "\n"


def comparison(result: dict[str, Any]) -> str:
    """The compare table for a PR, B's verdict against A (its checks, its broken thresholds), and
    each cell's flipped question ids folded."""
    lines = [f"### {md_cell(compare_title(result), limit=1000)}", "",
             f"- A: {md_cell(run_facts(result['a']))}", f"- B: {md_cell(run_facts(result['b']))}", ""]
    if result["a"]["simulated"] or result["b"]["simulated"]:
        lines += [f"> {md_cell(SIM_NOTE)}", ""]
    specs = specs_of(result)
    cols = compare_columns(specs)
    body = [[md_cell(texts[c.key]) for c in cols] for texts in compare_rows(result)]
    lines += md_table((md_cell(c.header) for c in cols), body)
    lines += ["", md_cell(compare_legend(result), limit=1000), ""]
    verdict = Verdict.model_validate(result)
    ok, words = verdict_line(verdict)
    lines += [f"{'✅' if ok else FAIL_MARK} **B against A: {md_cell(words)}**", ""]
    lines += _checks(verdict) + _flags(verdict)
    lines += [line for row in result["cells"] for spec in flip_specs(specs)
              for line in _compare_flips(row, spec, specs)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _compare_flips(row: CompareRow, spec: MetricSpec, specs: list[MetricSpec]) -> list[str]:
    """A cell's questions of `spec` that flipped between the runs, folded (ids only)."""
    paired = flips(row, spec)
    if not paired or not (paired.flipped_to_wrong or paired.flipped_to_right):
        return []
    wrong, right = paired.flipped_to_wrong, paired.flipped_to_right
    line = f"{row['id']}: {len(wrong)} to wrong, {len(right)} to right{flips_suffix(spec, specs)}"
    return [f"<details><summary>{html_text(line)}</summary>", "", f"Right in A, wrong in B: {id_list(wrong) or '-'}", "",
            f"Wrong in A, right in B: {id_list(right) or '-'}", "", "</details>", ""]
