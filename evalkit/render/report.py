"""Render stored results: a rich terminal table, GitHub markdown for a PR, CSV, and run-vs-run.

Every renderer reads the same summary dict (verdicts.summarize), so the terminal, the PR comment
and the CSV show the same numbers. `load_details` adds what the summary leaves out on purpose
(the flipped questions' answers, the detector's evidence) from the run folder.

Text that may come from a model or a log is escaped for its target, because a PR comment is
read by people who did not write it:

* markdown table cells: control sequences dropped, newlines folded, HTML escaped, `|` and the
  inline-markup characters backslash-escaped, so no output can add a column or a tag, and
  `@name` defused so a report pings nobody;
* `<details>` bodies: model text only inside `<pre>` with every `<`, `>`, `&` and quote
  escaped, so neither `</pre>` nor `</details>` nor `<script>` can appear in it;
* code spans and fences: opened with more backticks than the content holds, so the content
  cannot close them;
* the terminal: rich markup escaped and control sequences dropped.

Deltas everywhere are "this cell minus its reference", in points (percentage points): the
baseline cell, or the A/B twin (the same cell with the `ab.on` value). A negative accuracy
delta or a positive collapse delta is the bad direction.
"""

from __future__ import annotations

import html
import io
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape as rich_escape
from rich.table import Table

from evalkit.redact import redact_argv
from evalkit.store import read_json, read_jsonl
from evalkit.evals.gsm8k import SHORT as FILTERS

if TYPE_CHECKING:
    import pandas as pd

CONTROL = re.compile(
    r"\x1b\[[0-9;?<=>!]*[ -/]*[@-~]"  # CSI: colours, cursor moves (before the bare ESC below)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[@-_]?"  # other escapes and a lone ESC
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"  # C0/C1 controls except \t \n \r
    r"|[\u202a-\u202e\u2066-\u2069]"  # bidi overrides (text that reads differently than it is)
)
SIM_NOTE = "Engine: evalkit's SIMULATED engine (not a real model): figures show the pipeline, not a model."
FAIL_MARK, WARN_MARK = "❌", "⚠️"
MAX_CELL_CHARS = 300
"""Longest text in one table cell (error messages): the whole message is in cell.json."""
MAX_IDS_LISTED = 40
MAX_EXAMPLES = 3
"""Flipped questions and collapsed samples shown with their text, per cell and comparison."""
MAX_EXCERPT_CHARS = 600
TAIL_CHARS = 300
"""Characters of a collapsed generation's end shown next to the detector's excerpt."""
MAX_DETAILS_CHARS = 40_000
"""Budget for all <details> bodies: a GitHub comment holds 65,536 characters."""


# ---------------------------------------------------------------------------------------------
# Escaping


def clean(text: Any) -> str:
    """Drop control sequences and fold line breaks: safe on one line anywhere."""
    text = CONTROL.sub("", str(text))
    return re.sub(r"[\r\n\t\u2028\u2029]", " ", text)


def clean_block(text: Any) -> str:
    """Drop control sequences but keep the lines: for `<pre>` blocks."""
    text = str(text).replace("\r\n", "\n").replace("\r", "\n")
    return CONTROL.sub("", text)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", **{c: "\\" + c for c in "\\`*_[]|~"}}


def md_cell(text: Any, limit: int = MAX_CELL_CHARS) -> str:
    """Escape text for a GitHub markdown table cell (or any one-line markdown position).

    An `@name` gets a word joiner after the `@`: GitHub would otherwise notify that user.
    """
    escaped = "".join(_MD_ESCAPES.get(c, c) for c in _truncate(clean(text), limit))
    return re.sub(r"@(?=\w)", "@\u2060", escaped)


def md_code(text: Any) -> str:
    """An inline code span the content cannot close (longer backtick fence than any inside).

    Not for table cells: GFM splits cells on `|` before it sees code spans (use md_cell).
    """
    body = clean(text)
    fence = "`" * (max((len(m) for m in re.findall(r"`+", body)), default=0) + 1)
    pad = " " if body.startswith(("`", " ")) or body.endswith(("`", " ")) else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def md_fence(text: str, info: str = "") -> str:
    """A fenced code block whose fence is longer than any backtick run in `text`."""
    body = clean_block(text)
    fence = "`" * max(3, max((len(m) for m in re.findall(r"`+", body)), default=0) + 1)
    return f"{fence}{info}\n{body}\n{fence}"


def html_text(text: Any) -> str:
    """One line of text for inside an HTML tag such as <summary>."""
    return html.escape(clean(text), quote=True)


def html_pre(text: Any, limit: int = MAX_EXCERPT_CHARS) -> str:
    """Model output as an HTML <pre> block: nothing in it can close the block or open a tag.

    The newline after <pre> is the one HTML drops, so a leading newline of the text survives.
    """
    return "<pre>\n" + html.escape(_truncate(clean_block(text), limit), quote=True) + "</pre>"


# ---------------------------------------------------------------------------------------------
# Numbers


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _with_ci(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f} ({ci[0]:.3f}–{ci[1]:.3f})" if ci else f"{value:.3f}"


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


def delta_text(delta: dict[str, Any] | None) -> str:
    """`-3.3 (p=0.0012)`: the difference in points and its p-value; `-` when not compared."""
    if not delta or delta.get("diff") is None:
        return "-"
    return f"{delta['diff'] * 100:+.1f} (p={_p(delta.get('p_value'))})"


def _collapse(metrics: dict[str, Any]) -> str:
    rate = metrics.get("repetition.collapse_rate")
    if rate is None:
        return "-"
    return f"{rate:.3f} ({metrics.get('repetition.collapsed')}/{metrics.get('repetition.n')})"


def _date(stamp: str | None) -> str:
    """`2026-12-03T11:13:33+00:00` -> `2026-12-03 11:13 UTC` (as stored when unparsable)."""
    if not stamp:
        return "?"
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    zone = "UTC" if parsed.utcoffset() is not None and not parsed.utcoffset() else parsed.strftime("%z")
    return f"{parsed:%Y-%m-%d %H:%M} {zone}".strip()


def strip_userinfo(url: str) -> str:
    """`https://user:token@host/x` -> `https://host/x`: a clone URL may carry a credential."""
    return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", url, flags=re.IGNORECASE)


# ---------------------------------------------------------------------------------------------
# The matrix table: one row per cell, shared by every renderer


@dataclass(frozen=True)
class Column:
    key: str
    header: str


COLUMNS = [
    Column("cell", "cell"),
    Column("status", "status"),
    Column("strict", "GSM8K strict"),
    Column("flexible", "GSM8K flexible (95% CI)"),
    Column("collapse", "collapse rate (k/n)"),
    Column("flexible_vs_baseline", "Δ flexible vs baseline"),
    Column("flexible_vs_ab", "Δ flexible vs twin"),
    Column("collapse_vs_baseline", "Δ collapse vs baseline"),
    Column("collapse_vs_ab", "Δ collapse vs twin"),
]
_METRIC_COLUMN = {"gsm8k.strict": "strict", "gsm8k.flexible": "flexible", "repetition.collapse_rate": "collapse"}


def flag_column(flag: dict[str, Any]) -> str:
    """The column a broken threshold is marked in: the value, or the delta it is about."""
    base = _METRIC_COLUMN.get(flag["metric"], "cell")
    check = flag["check"]
    if check in ("min", "max") or base == "cell":
        return base
    key = f"{base}_{'vs_baseline' if check.endswith('vs_baseline') else 'vs_ab'}"
    return key if any(c.key == key for c in COLUMNS) else "cell"


@dataclass
class Row:
    """One cell's display texts (unescaped) and which of them broke a threshold."""

    cell_id: str
    texts: dict[str, str]
    failed: set[str] = field(default_factory=set)
    warned: set[str] = field(default_factory=set)

    @property
    def broken(self) -> bool:
        return bool(self.failed)


def _status(cell: dict[str, Any]) -> str:
    if cell["status"] == "ok":
        return "ok"
    return f"{cell['status']}: {cell['error']}" if cell.get("error") else cell["status"]


def table_rows(summary: dict[str, Any]) -> list[Row]:
    """One row per cell, in run order."""
    out = []
    for cell in summary["cells"]:
        m = cell["metrics"]
        vs_base, vs_ab = cell.get("vs_baseline") or {}, cell.get("vs_ab") or {}
        texts = {
            "cell": cell["id"],
            "status": _status(cell),
            "strict": _num(m.get("gsm8k.strict")),
            "flexible": _with_ci(m.get("gsm8k.flexible"), m.get("gsm8k.flexible_ci95")),
            "collapse": _collapse(m),
            "flexible_vs_baseline": delta_text(vs_base.get("gsm8k.flexible")),
            "flexible_vs_ab": delta_text(vs_ab.get("gsm8k.flexible")),
            "collapse_vs_baseline": delta_text(vs_base.get("repetition.collapse_rate")),
            "collapse_vs_ab": delta_text(vs_ab.get("repetition.collapse_rate")),
        }
        row = Row(cell["id"], texts)
        for flag in cell.get("flags", []):
            column = flag_column(flag)
            (row.failed if flag["action"] == "fail" else row.warned).update({column, "cell"})
        out.append(row)
    return out


def rows(summary: dict[str, Any]) -> list[dict[str, str]]:
    """Display rows as plain dicts (the texts, plus `broken`): for scripts and old callers."""
    return [{**r.texts, "broken": "yes" if r.broken else ""} for r in table_rows(summary)]


# ---------------------------------------------------------------------------------------------
# The pivot: axes as rows x columns


@dataclass(frozen=True)
class Pivot:
    """A metric laid out with the A/B axis (else the last axis) as columns."""

    corner: str
    columns: list[str]
    rows: list[list[str]]
    marks: list[list[str]]
    """Per data cell: "fail", "warn" or "" (parallel to rows)."""


def pivot(summary: dict[str, Any], metric: str, value: Callable[[dict[str, Any]], str]) -> Pivot | None:
    """`metric` by configuration; None when the matrix has fewer than two axes."""
    cells = [c for c in summary["cells"] if c.get("axes")]
    axes = list(cells[0]["axes"]) if cells else []
    if len(axes) < 2:
        return None
    ab = summary.get("ab") or {}
    col_axis = ab.get("axis") if ab.get("axis") in axes else axes[-1]
    row_axes = [a for a in axes if a != col_axis]
    col_values = list(dict.fromkeys(c["axes"][col_axis] for c in cells))
    grid = {(tuple(c["axes"][a] for a in row_axes), c["axes"][col_axis]): c for c in cells}
    with_delta = bool(ab) and col_axis == ab.get("axis")
    columns = [*col_values] + ([f"Δ {ab['off']} − {ab['on']}"] if with_delta else [])
    rows_out, marks = [], []
    for key in dict.fromkeys(k for k, _ in grid):
        line, mark = [], []
        for col in col_values:
            cell = grid.get((key, col))
            line.append("" if cell is None else value(cell) if cell["status"] == "ok" else cell["status"])
            mark.append(_mark(cell, metric, ("min", "max")) if cell else "")
        if with_delta:
            off = grid.get((key, ab["off"]))
            line.append(delta_text(((off or {}).get("vs_ab") or {}).get(metric)))
            mark.append(_mark(off, metric, ("max_drop_ab", "max_rise_ab")) if off else "")
        rows_out.append([" · ".join(key), *line])
        marks.append(["", *mark])
    return Pivot(" · ".join(row_axes), columns, rows_out, marks)


def _mark(cell: dict[str, Any], metric: str, checks: tuple[str, ...]) -> str:
    actions = {f["action"] for f in cell.get("flags", []) if f["metric"] == metric and f["check"] in checks}
    return "fail" if "fail" in actions else "warn" if "warn" in actions else ""


def _flexible(cell: dict[str, Any]) -> str:
    m = cell["metrics"]
    return _with_ci(m.get("gsm8k.flexible"), m.get("gsm8k.flexible_ci95"))


def _collapse_value(cell: dict[str, Any]) -> str:
    return _collapse(cell["metrics"])


def _has_collapse(summary: dict[str, Any]) -> bool:
    return any(c["metrics"].get("repetition.collapse_rate") is not None for c in summary["cells"])


def pivots(summary: dict[str, Any]) -> list[tuple[str, Pivot]]:
    """The pivots worth showing: flexible accuracy, and collapse rate when it was measured."""
    out = []
    if (p := pivot(summary, "gsm8k.flexible", _flexible)) is not None:
        out.append(("GSM8K flexible (95% CI) by configuration", p))
    if _has_collapse(summary) and (p := pivot(summary, "repetition.collapse_rate", _collapse_value)) is not None:
        out.append(("Collapse rate (k/n) by configuration", p))
    return out


# ---------------------------------------------------------------------------------------------
# What the summary does not carry: answers of flipped questions, detector evidence, run info


@dataclass
class Details:
    """Extra material for the markdown report, read from the run folder."""

    run: dict[str, Any] = field(default_factory=dict)
    """run.json without its config snapshot (versions, limit, host)."""
    answers: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """cell id -> question id -> that cell's GSM8K sample, for flipped questions only."""
    collapsed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """cell id -> its collapsed repetition samples (id, kind, evidence, metrics)."""


def _flipped_ids(cell: dict[str, Any]) -> set[str]:
    ids: set[str] = set()
    for against in ("vs_baseline", "vs_ab"):
        for short in FILTERS:
            delta = (cell.get(against) or {}).get(f"gsm8k.{short}") or {}
            ids.update(delta.get("flipped_to_wrong", []) + delta.get("flipped_to_right", []))
    return ids


def _is_collapsed(sample: dict[str, Any]) -> bool:
    """Analysis.to_dict() says `verdict`; a `collapsed` flag is accepted too."""
    return bool(sample.get("collapsed")) or sample.get("verdict") == "collapsed"


def _read_samples(path: Path, keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [row for row in read_jsonl(path) if keep(row)]


def _id_in(ids: set[str]) -> Callable[[dict[str, Any]], bool]:
    return lambda row: row.get("id") in ids


def load_details(run_path: Path, summary: dict[str, Any]) -> Details:
    """Read what the markdown report folds into <details>; missing files are simply absent."""
    details = Details()
    if (run_path / "run.json").is_file():
        details.run = {k: v for k, v in read_json(run_path / "run.json").items() if k != "config"}
    wanted: dict[str, set[str]] = {}
    for cell in summary["cells"]:
        ids = _flipped_ids(cell)
        if ids:
            wanted.setdefault(cell["id"], set()).update(ids)
            for against in ("vs_baseline", "vs_ab"):
                if ref := (cell.get(against) or {}).get("reference"):
                    wanted.setdefault(ref, set()).update(ids)
        if cell["metrics"].get("repetition.collapsed"):
            rows_ = _read_samples(run_path / cell["id"] / "repetition.samples.jsonl", _is_collapsed)
            details.collapsed[cell["id"]] = rows_
    for cell_id, ids in wanted.items():
        samples = _read_samples(run_path / cell_id / "gsm8k.samples.jsonl", _id_in(ids))
        details.answers[cell_id] = {s["id"]: s for s in samples}
    return details


# ---------------------------------------------------------------------------------------------
# Header facts


def sources(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Distinct engine sources (repo, ref, sha) with the cells built from each, in run order."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for cell in summary["cells"]:
        src = cell.get("source")
        if src:
            key = (strip_userinfo(src.get("repo") or ""), src.get("ref") or "", src.get("sha") or "")
            groups.setdefault(key, []).append(cell["id"])
    return [{"repo": r, "ref": ref, "sha": sha, "cells": ids} for (r, ref, sha), ids in groups.items()]


def _source_label(source: dict[str, Any], summary: dict[str, Any]) -> str:
    """`ccc861dc5ab1 (fix=fixon)` when one axis value names the source's cells."""
    sha = (source["sha"] or "?")[:12]
    cells = {c["id"]: c.get("axes", {}) for c in summary["cells"]}
    members = [cells[i] for i in source["cells"] if i in cells]
    others = [axes for cid, axes in cells.items() if cid not in source["cells"]]
    for axis, value in (members[0].items() if members else []):
        if all(m.get(axis) == value for m in members) and all(o.get(axis) != value for o in others):
            return f"{sha} ({axis}={value})"
    return f"{sha} ({len(members)} cells)"


def title(summary: dict[str, Any]) -> str:
    """`evalkit · MODEL on ENGINE · SHAs · DATE` (unescaped)."""
    parts = ["evalkit", f"{summary['model']} on {summary['engine']}"]
    srcs = sources(summary)
    if srcs:
        labels = [_source_label(s, summary) for s in srcs]
        parts.append(", ".join(labels) if len(labels) <= 3 else f"{len(labels)} engine sources")
    parts.append(_date(summary.get("started_at")))
    return " · ".join(parts)


def _meta(summary: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """Facts for the line under the title (unescaped)."""
    facts = [f"run {summary['run_id']}", f"status {summary.get('status') or '?'}", f"{len(summary['cells'])} cells"]
    if run.get("limit"):
        facts.append(f"limit {run['limit']}")
    if run.get("evalkit_version"):
        sha = f" ({run['evalkit_git_sha'][:12]})" if run.get("evalkit_git_sha") else ""
        facts.append(f"evalkit {run['evalkit_version']}{sha}")
    if run.get("lm_eval_version"):
        facts.append(f"lm-eval {run['lm_eval_version']}")
    return facts


def verdict_line(summary: dict[str, Any]) -> tuple[bool, str]:
    """(ok, sentence): the run's verdict in words."""
    n, failed, broken, warned = (len(summary["cells"]), summary["failed_cells"], summary["broken_thresholds"],
                                 summary["warnings"])
    ok = not failed and not broken and summary.get("status") != "interrupted"
    words = [f"{broken} threshold{'s' if broken != 1 else ''} broken", f"{failed} of {n} cells failed to run",
             f"{warned} warning{'s' if warned != 1 else ''}"]
    if summary.get("status") == "interrupted":
        words.insert(0, "run interrupted")
    return ok, ", ".join(words) + f"; exit {summary['exit_code']}"


def legend(summary: dict[str, Any]) -> str:
    """What the delta columns compare, in one sentence (unescaped)."""
    parts = []
    if summary.get("baseline"):
        parts.append(f"baseline = {summary['baseline']}")
    ab = summary.get("ab")
    if ab:
        parts.append(f"twin = the same cell with {ab['axis']}={ab['on']}")
    parts.append("Δ = this cell − its reference, in points")
    parts.append("p: McNemar exact (GSM8K), one-sided Fisher exact (collapse rise)")
    return "; ".join(parts) + "."


# ---------------------------------------------------------------------------------------------
# Terminal


def _rich_pivot(name: str, p: Pivot) -> Table:
    table = Table(title=rich_escape(name), title_justify="left")
    for header in [p.corner, *p.columns]:
        table.add_column(rich_escape(header))
    for line, marks in zip(p.rows, p.marks):
        table.add_row(*(_rich_text(text, mark) for text, mark in zip(line, marks)))
    return table


def _rich_text(text: str, mark: str) -> str:
    safe = rich_escape(clean(text))
    return f"[bold red]{safe} ✗[/bold red]" if mark == "fail" else f"[yellow]{safe} ![/yellow]" if mark == "warn" else safe


def terminal(summary: dict[str, Any], console: Console, details: Details | None = None) -> None:
    """The matrix at the terminal: broken values in bold red, pivots, flags and the verdict."""
    run = details.run if details else {}
    table = Table(title=rich_escape(title(summary)), caption=rich_escape(" · ".join(_meta(summary, run))))
    for column in COLUMNS:
        table.add_column(rich_escape(column.header), overflow="fold")
    for row in table_rows(summary):
        marks = {c.key: "fail" if c.key in row.failed else "warn" if c.key in row.warned else "" for c in COLUMNS}
        style = None if row.texts["status"] == "ok" else "yellow"
        table.add_row(*(_rich_text(_truncate(row.texts[c.key], MAX_CELL_CHARS), marks[c.key]) for c in COLUMNS),
                      style=style)
    console.print(table)
    console.print(f"[dim]{rich_escape(legend(summary))}[/dim]")
    for name, p in pivots(summary):
        console.print(_rich_pivot(name, p))
    if summary.get("simulated"):
        console.print(f"[dim]{SIM_NOTE}[/dim]")
    for cell in summary["cells"]:
        for flag in cell["flags"]:
            marker = "[bold red]FAIL[/bold red]" if flag["action"] == "fail" else "[yellow]warn[/yellow]"
            console.print(f"{marker} {rich_escape(clean(flag['message']))}")
    ok, words = verdict_line(summary)
    console.print(("[green]OK[/green] " if ok else "[bold red]NOT OK[/bold red] ") + rich_escape(words))


# ---------------------------------------------------------------------------------------------
# Markdown


def md_table(headers: Iterable[str], body: Iterable[Iterable[str]]) -> list[str]:
    """A GFM table from already-escaped cells."""
    headers = list(headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(line) + " |" for line in body]
    return lines


def _md_marked(text: str, mark: str) -> str:
    escaped = md_cell(text)
    if mark == "fail":
        return f"**{escaped}** {FAIL_MARK}"
    return f"{escaped} {WARN_MARK}" if mark == "warn" else escaped


def _md_matrix(summary: dict[str, Any]) -> list[str]:
    body = []
    for row in table_rows(summary):
        body.append([_md_marked(row.texts[c.key], "fail" if c.key in row.failed else "warn" if c.key in row.warned
                                else "") for c in COLUMNS])
    return md_table((md_cell(c.header) for c in COLUMNS), body)


def _md_pivot(p: Pivot) -> list[str]:
    body = [[_md_marked(text, mark) for text, mark in zip(line, marks)] for line, marks in zip(p.rows, p.marks)]
    return md_table((md_cell(h) for h in [p.corner, *p.columns]), body)


class _Budget:
    """Characters left for <details> bodies; once spent, further blocks say where to look."""

    def __init__(self, chars: int) -> None:
        self.left = chars

    def take(self, text: str) -> bool:
        self.left -= len(text)
        return self.left >= 0


def _id_list(ids: list[str]) -> str:
    shown = ", ".join(md_cell(i) for i in ids[:MAX_IDS_LISTED])
    return shown + (f" … and {len(ids) - MAX_IDS_LISTED} more" if len(ids) > MAX_IDS_LISTED else "")


def _final_answer(target: Any) -> str:
    """GSM8K targets end with `#### N`."""
    text = str(target or "")
    return text.rsplit("####", 1)[-1].strip() if "####" in text else _truncate(clean(text), 40)


def _flip_example(qid: str, cell_id: str, ref_id: str, details: Details) -> list[str]:
    mine = details.answers.get(cell_id, {}).get(qid)
    if mine is None:
        return []
    theirs = details.answers.get(ref_id, {}).get(qid, {})
    facts = (f"{md_cell(qid)}: target {md_code(_final_answer(mine.get('target')))}; "
             f"this cell extracted {md_code(mine.get('flexible-extract.extracted', '?'))}, "
             f"{md_cell(ref_id)} {md_code(theirs.get('flexible-extract.extracted', '?'))} "
             f"(finish {md_cell(mine.get('finish_reason') or '?')})")
    return [facts, "", html_pre(mine.get("response", "")), ""]


def _md_flips(cell: dict[str, Any], details: Details, budget: _Budget) -> list[str]:
    """One <details> block per cell with flipped questions (GSM8K flexible)."""
    parts, counts, shown = [], [], set()
    for against, label in (("vs_baseline", "baseline"), ("vs_ab", "twin")):
        delta = (cell.get(against) or {}).get("gsm8k.flexible")
        if not delta or not (delta["flipped_to_wrong"] or delta["flipped_to_right"]):
            continue
        ref = cell[against]["reference"]
        wrong, right = delta["flipped_to_wrong"], delta["flipped_to_right"]
        counts.append(f"{len(wrong)} to wrong, {len(right)} to right vs {label}")
        parts += [(f"**vs {label} {md_cell(ref)}**: right there, wrong here ({len(wrong)}): {_id_list(wrong) or '-'}; "
                   f"wrong there, right here ({len(right)}): {_id_list(right) or '-'}"), ""]
        for qid in [q for q in wrong if q not in shown][:MAX_EXAMPLES]:
            example = _flip_example(qid, cell["id"], ref, details)
            if example and budget.take("\n".join(example)):
                parts += example
                shown.add(qid)
    if not counts:
        return []
    summary_line = f"{cell['id']}: flipped questions ({'; '.join(counts)})"
    return [f"<details><summary>{html_text(summary_line)}</summary>", "", *parts, "</details>", ""]


def _excerpt_label(sample: dict[str, Any]) -> str:
    ids = sample.get("token_source") == "token_ids" and not (sample.get("evidence") or {}).get("unit_text")
    return "Token ids around the onset (`|` marks it):" if ids else "Around the onset:"


def _md_evidence(cell: dict[str, Any], details: Details, budget: _Budget, run_id: str) -> list[str]:
    """One <details> block per cell with collapsed long generations: the detector's evidence."""
    samples = details.collapsed.get(cell["id"]) or []
    m = cell["metrics"]
    if not samples and not m.get("repetition.collapsed"):
        return []
    line = f"{cell['id']}: {m.get('repetition.collapsed')} of {m.get('repetition.n')} long generations collapsed"
    parts = [f"<details><summary>{html_text(line)}</summary>", ""]
    for sample in samples[:MAX_EXAMPLES]:
        ev, sm = sample.get("evidence") or {}, sample.get("metrics") or {}
        facts = [f"signals {', '.join(ev.get('signals') or []) or '-'}", f"period {ev.get('period')}",
                 f"onset token {ev.get('onset')}", f"{ev.get('loop_tokens')} tokens looped",
                 f"{sm.get('n_tokens')} tokens", f"finish {sm.get('finish_reason')}"]
        block = [f"**{md_cell(sample.get('id', '?'))}** ({md_cell(sample.get('kind') or '-')}): "
                 + md_cell("; ".join(facts)), "", _excerpt_label(sample), "", html_pre(ev.get("excerpt", "")), ""]
        if ev.get("unit_text"):
            block += ["Repeated unit:", "", html_pre(ev["unit_text"]), ""]
        if sample.get("text"):  # the excerpt is token ids when the server sent ids: show the words too
            block += ["End of the generated text:", "", html_pre("…" + sample["text"][-TAIL_CHARS:]), ""]
        if budget.take("\n".join(block)):
            parts += block
    rest = len(samples) - MAX_EXAMPLES
    where = md_code(f"{run_id}/{cell['id']}/repetition.samples.jsonl")
    parts += [f"{'And ' + str(rest) + ' more; all' if rest > 0 else 'All'} samples: {where} in the results folder.",
              "", "</details>", ""]
    return parts


def _md_details(summary: dict[str, Any], details: Details) -> list[str]:
    budget = _Budget(MAX_DETAILS_CHARS)
    flips = [line for cell in summary["cells"] for line in _md_flips(cell, details, budget)]
    evidence = [line for cell in summary["cells"] for line in _md_evidence(cell, details, budget, summary["run_id"])]
    out = []
    if flips:
        out += ["#### Flipped questions (GSM8K flexible)", "", *flips]
    if evidence:
        out += ["#### Collapse evidence", "", *evidence]
    return out


def _reproduce(summary: dict[str, Any]) -> list[str]:
    if not summary.get("command"):
        return []
    command = redact_argv(str(a) for a in summary["command"])  # `--api-key X` must not reach a PR
    return ["---", "", "Reproduce:", "", md_fence(shlex.join(command), "sh"), ""]


def markdown(summary: dict[str, Any], details: Details | None = None) -> str:
    """GitHub markdown for a PR: title, verdict, pivots, the matrix, flags, details, command."""
    details = details or Details()
    ok, words = verdict_line(summary)
    lines = [f"### {md_cell(title(summary), limit=1000)}", "", md_cell(" · ".join(_meta(summary, details.run))), ""]
    for src in sources(summary):
        lines.append(f"- engine source {md_code(src['repo'])} @ {md_code(src['ref'])} → "
                     f"{md_code(src['sha'] or '?')}: {md_cell(', '.join(src['cells']))}")
    if sources(summary):
        lines.append("")
    if summary.get("simulated"):
        lines += [f"> {md_cell(SIM_NOTE)}", ""]
    lines += [f"{'✅' if ok else FAIL_MARK} **{md_cell(words)}**", ""]
    for name, p in pivots(summary):
        lines += [f"#### {md_cell(name)}", "", *_md_pivot(p), ""]
    lines += ["#### All cells", "", *_md_matrix(summary), "", md_cell(legend(summary), limit=1000), ""]
    flags = [f for c in summary["cells"] for f in c["flags"]]
    if flags:
        lines += ["#### Thresholds", ""]
        lines += [f"- {FAIL_MARK} **FAIL** {md_cell(f['message'])}" if f["action"] == "fail"
                  else f"- {WARN_MARK} warn {md_cell(f['message'])}" for f in flags]
        lines.append("")
    lines += _md_details(summary, details)
    lines += _reproduce(summary)
    return "\n".join(lines).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------------------------
# CSV

CSV_METRICS = [
    "gsm8k.strict", "gsm8k.flexible", "gsm8k.n", "gsm8k.strict_stderr", "gsm8k.flexible_stderr",
    "gsm8k.strict_ci95", "gsm8k.flexible_ci95", "gsm8k.cut_by_max_gen_toks", "gsm8k.retries",
    "repetition.collapse_rate", "repetition.collapsed", "repetition.n", "repetition.collapse_rate_ci95",
]
DELTA_METRICS = ["gsm8k.flexible", "gsm8k.strict", "repetition.collapse_rate"]
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_safe(value: Any) -> Any:
    """Text a spreadsheet would run as a formula gets a leading quote (OWASP CSV injection)."""
    if isinstance(value, str):
        value = clean(value)
        return "'" + value if value.startswith(_FORMULA_START) else value
    return value


def _flat_metric_columns(metrics: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in CSV_METRICS:
        value = metrics.get(name)
        if name.endswith("_ci95"):
            low, high = value if value else (None, None)
            out[f"{name}_low"], out[f"{name}_high"] = low, high
        else:
            out[name] = value
    return out


def frame(summary: dict[str, Any]) -> pd.DataFrame:
    """One row per cell: axes, status, source, flat metrics, deltas and p-values, flags.

    The column set is fixed (absent values are empty), so CSVs of different runs concatenate.
    """
    import pandas as pd  # here, not at the top: half a second that only CSV needs
    axes = list(dict.fromkeys(a for c in summary["cells"] for a in c.get("axes", {})))
    records = []
    for cell in summary["cells"]:
        src = cell.get("source") or {}
        rec: dict[str, Any] = {"run_id": summary["run_id"], "model": summary["model"], "engine": summary["engine"],
                               "started_at": summary.get("started_at"), "cell": cell["id"]}
        rec |= {f"axis.{a}": cell.get("axes", {}).get(a) for a in axes}
        rec |= {"status": cell["status"], "error": cell.get("error"), "source_repo": strip_userinfo(src.get("repo") or "")
                or None, "source_ref": src.get("ref"), "source_sha": src.get("sha"),
                "effective_mode": cell.get("effective_mode")}
        rec |= _flat_metric_columns(cell["metrics"])
        for against in ("vs_baseline", "vs_ab"):
            comparison = cell.get(against) or {}
            rec[f"{against}.reference"] = comparison.get("reference")
            for metric in DELTA_METRICS:
                delta = comparison.get(metric) or {}
                rec[f"{against}.{metric}.diff"] = delta.get("diff")
                rec[f"{against}.{metric}.p_value"] = delta.get("p_value")
        flags = cell.get("flags", [])
        rec |= {"broken": sum(f["action"] == "fail" for f in flags), "warnings": sum(f["action"] == "warn" for f in flags),
                "flags": "; ".join(f["message"] for f in flags) or None,
                "total_s": (cell.get("timings") or {}).get("total_s")}
        records.append({k: _csv_safe(v) for k, v in rec.items()})
    return pd.DataFrame.from_records(records)


def csv(summary: dict[str, Any]) -> str:
    buffer = io.StringIO()
    frame(summary).to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# Two runs: the same matrix before and after


COMPARE_COLUMNS = [
    Column("cell", "cell"),
    Column("flexible_a", "flexible A"),
    Column("flexible_b", "flexible B"),
    Column("flexible_delta", "Δ flexible B − A"),
    Column("strict_delta", "Δ strict B − A"),
    Column("collapse_a", "collapse A"),
    Column("collapse_b", "collapse B"),
    Column("collapse_delta", "Δ collapse B − A"),
    Column("paired", "paired n"),
    Column("flips", "flipped →wrong / →right"),
]


def compare_rows(result: dict[str, Any]) -> list[dict[str, str]]:
    """Display texts per cell for the compare table."""
    out = []
    for row in result["cells"]:
        flex = row.get("gsm8k.flexible") or {}
        note = {"a": " (only in A)", "b": " (only in B)"}.get(row["in"], "")
        status = ""
        if row["in"] == "both" and not row["status_a"] == row["status_b"] == "ok":
            status = f" (A {row['status_a']}, B {row['status_b']})"
        out.append({
            "cell": row["id"] + note + status,
            "flexible_a": _num(row["a"].get("gsm8k.flexible")),
            "flexible_b": _num(row["b"].get("gsm8k.flexible")),
            "flexible_delta": delta_text(row.get("gsm8k.flexible")),
            "strict_delta": delta_text(row.get("gsm8k.strict")),
            "collapse_a": _collapse(row["a"]),
            "collapse_b": _collapse(row["b"]),
            "collapse_delta": delta_text(row.get("repetition.collapse_rate")),
            "paired": str(flex["n"]) if flex else "-",
            "flips": f"{len(flex['flipped_to_wrong'])} / {len(flex['flipped_to_right'])}" if flex else "-",
        })
    return out


def _compare_title(result: dict[str, Any]) -> str:
    a, b = result["a"], result["b"]
    return f"evalkit compare · A {a['run_id']} ({_date(a['started_at'])}) → B {b['run_id']} ({_date(b['started_at'])})"


def _compare_facts(meta: dict[str, Any]) -> str:
    shas = ", ".join(s[:12] for s in meta["source_shas"]) or "no engine source"
    return f"{meta['model']} on {meta['engine']} · {shas} · limit {meta['limit'] or 'none'} · status {meta['status']}"


COMPARE_LEGEND = ("Δ = run B − run A, in points, on the questions both answered; p: McNemar exact (GSM8K), "
                  "two-sided Fisher exact (collapse).")


def compare_terminal(result: dict[str, Any], console: Console) -> None:
    table = Table(title=rich_escape(_compare_title(result)))
    for column in COMPARE_COLUMNS:
        table.add_column(rich_escape(column.header), overflow="fold")
    for texts in compare_rows(result):
        table.add_row(*(rich_escape(clean(texts[c.key])) for c in COMPARE_COLUMNS))
    console.print(table)
    console.print(f"A: {rich_escape(clean(_compare_facts(result['a'])))}")
    console.print(f"B: {rich_escape(clean(_compare_facts(result['b'])))}")
    console.print(f"[dim]{rich_escape(COMPARE_LEGEND)}[/dim]")


def compare_markdown(result: dict[str, Any]) -> str:
    """The compare table for a PR, with each cell's flipped question ids folded."""
    lines = [f"### {md_cell(_compare_title(result), limit=1000)}", "",
             f"- A: {md_cell(_compare_facts(result['a']))}", f"- B: {md_cell(_compare_facts(result['b']))}", ""]
    if result["a"]["simulated"] or result["b"]["simulated"]:
        lines += [f"> {md_cell(SIM_NOTE)}", ""]
    body = [[md_cell(texts[c.key]) for c in COMPARE_COLUMNS] for texts in compare_rows(result)]
    lines += md_table((md_cell(c.header) for c in COMPARE_COLUMNS), body)
    lines += ["", md_cell(COMPARE_LEGEND, limit=1000), ""]
    for row in result["cells"]:
        flex = row.get("gsm8k.flexible") or {}
        if flex and (flex["flipped_to_wrong"] or flex["flipped_to_right"]):
            line = f"{row['id']}: {len(flex['flipped_to_wrong'])} to wrong, {len(flex['flipped_to_right'])} to right"
            lines += [f"<details><summary>{html_text(line)}</summary>", "",
                      f"Right in A, wrong in B: {_id_list(flex['flipped_to_wrong']) or '-'}", "",
                      f"Wrong in A, right in B: {_id_list(flex['flipped_to_right']) or '-'}", "", "</details>", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def compare_frame(result: dict[str, Any]) -> pd.DataFrame:
    """One row per cell: A and B headline metrics, B - A deltas, p-values, flip counts."""
    import pandas as pd
    records = []
    for row in result["cells"]:
        rec: dict[str, Any] = {"cell": row["id"], "in": row["in"], "status_a": row["status_a"],
                               "status_b": row["status_b"]}
        for side in ("a", "b"):
            for name in ("gsm8k.strict", "gsm8k.flexible", "gsm8k.n", "repetition.collapse_rate", "repetition.n"):
                rec[f"{side}.{name}"] = row[side].get(name)
        for metric in DELTA_METRICS:
            delta = row.get(metric) or {}
            rec[f"delta.{metric}"], rec[f"p.{metric}"] = delta.get("diff"), delta.get("p_value")
        flex = row.get("gsm8k.flexible") or {}
        rec |= {"paired_n": flex.get("n"), "flipped_to_wrong": len(flex.get("flipped_to_wrong", [])) if flex else None,
                "flipped_to_right": len(flex.get("flipped_to_right", [])) if flex else None}
        records.append({k: _csv_safe(v) for k, v in rec.items()})
    return pd.DataFrame.from_records(records)


def compare_csv(result: dict[str, Any]) -> str:
    buffer = io.StringIO()
    compare_frame(result).to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()
