"""A bisect's report, from bisect.json: on the terminal, as markdown for the revert/fix PR, as JSON.

All three show the same facts: the conclusion (the first bad commit, its subject and author date,
or the range that could not be split, or why the ends are not as claimed), the evidence (accuracy
and collapse deltas against the good end with their p-values, one collapsed excerpt) and every
step (commit, verdict, questions and generations used, wall time). Model text, commit subjects
and error messages go through render/text.py: a subject is written by anyone who can push.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from evalkit.render.markdown import md_table
from evalkit.render.numbers import p_text
from evalkit.render.text import MAX_EXCERPT_CHARS, clean, md_cell, md_code, md_fence, term_text, truncate

FORMATS = ("terminal", "markdown", "json")

VERDICT_MARK = {"good": "good", "bad": "BAD", "untestable": "untestable"}


def first_bad_evidence(record: dict[str, Any]) -> dict[str, Any]:
    """The evidence for the first bad commit: its step's, or the ends' when it is the bad end."""
    first = record.get("first_bad")
    step = next((s for s in record.get("steps", []) if s["sha"] == first), None)
    if step is not None:
        return step.get("evidence") or {}
    return (record.get("ends") or {}).get("evidence") or {}


def _deltas(evidence: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(metric, delta, p-value) for each metric delta in an evidence dict (verdicts.delta shape)."""
    rows = []
    for metric, d in evidence.items():
        if not isinstance(d, dict) or "diff" not in d or d.get("diff") is None:
            continue
        p = d.get("p_value", d.get("p_greater"))
        diff = d["diff"]
        points = f"{diff * 100:+.1f} points" if abs(diff) <= 1 else f"{diff:+.3g}"
        rows.append((metric, points, p_text(p) if p is not None else "-"))
    return rows


def excerpt(evidence: dict[str, Any]) -> str | None:
    """One collapsed long generation of the evidence, when it holds one."""
    for key in ("excerpt", "collapsed_excerpt"):
        if isinstance(evidence.get(key), str) and evidence[key]:
            return evidence[key]
        if isinstance(evidence.get(key), dict) and evidence[key].get("text"):
            return str(evidence[key]["text"])
    return None


def headline(record: dict[str, Any]) -> str:
    """The conclusion in one line."""
    status = record["status"]
    if status == "found":
        c = next(c for c in record["commits"] if c["sha"] == record["first_bad"])
        return f"first bad commit: {c['sha']} {clean(c['subject'])} ({c['author_date']})"
    if status == "untestable":
        shas = record.get("untestable") or []
        return f"could not split: the first bad commit is one of {len(shas)} commits, the rest untestable"
    return clean(record.get("message") or status)


def _step_rows(record: dict[str, Any]) -> list[list[str]]:
    rows = []
    for s in sorted(record.get("steps", []), key=lambda s: s["index"]):
        rows.append([s["sha"][:12], s["subject"], VERDICT_MARK[s["verdict"]], str(s.get("questions", 0)),
                     str(s.get("generations", 0)), f"{s['wall_s']:.1f} s", s.get("reason", "")])
    return rows


STEP_HEADERS = ("commit", "subject", "verdict", "questions", "generations", "wall", "why")


def terminal(record: dict[str, Any]) -> Sequence[RenderableType]:
    out: list[RenderableType] = [Text(f"evalkit bisect {record['bisect_id']}: cell {record['cell']}, "
                                      f"{len(record['commits'])} commits of {record['repo']}", style="bold")]
    style = {"found": "red bold", "untestable": "yellow", "ends_not_as_claimed": "yellow"}.get(record["status"])
    out.append(Text(headline(record), style=style or ""))
    evidence = first_bad_evidence(record) if record["status"] == "found" else (record.get("ends") or {}).get("evidence") or {}
    if rows := _deltas(evidence):
        table = Table(title="evidence vs the good end")
        for h in ("metric", "delta", "p-value"):
            table.add_column(h)
        for row in rows:
            table.add_row(*map(term_text, row))
        out.append(table)
    if text := excerpt(evidence):
        out.append(Text("collapsed excerpt: " + clean(truncate(text, 300))))
    if record.get("untestable"):
        out.append(Text("could be any of: " + " ".join(s[:12] for s in record["untestable"])))
    steps = Table(title=f"steps ({len(record.get('steps', []))}; engine starts {record.get('engine_starts', 0)})")
    for h in STEP_HEADERS:
        steps.add_column(h)
    for row in _step_rows(record):
        steps.add_row(*map(term_text, row))
    out.append(steps)
    return out


def markdown(record: dict[str, Any]) -> str:
    """Ready to paste into the PR that reverts or fixes the first bad commit."""
    lines = [f"## evalkit bisect: `{record['cell']}`", ""]
    if record["status"] == "found":
        c = next(c for c in record["commits"] if c["sha"] == record["first_bad"])
        lines += [f"**First bad commit:** {md_code(c['sha'])} {md_cell(c['subject'])} (authored {md_cell(c['author_date'])})", ""]
        evidence = first_bad_evidence(record)
    else:
        lines += [f"**{md_cell(headline(record))}**", ""]
        evidence = (record.get("ends") or {}).get("evidence") or {}
    good, bad = record.get("good") or {}, record.get("bad") or {}
    lines += [f"Range: good {md_code(good.get('sha', '?')[:12])} .. bad {md_code(bad.get('sha', '?')[:12])} of "
              f"{md_code(record['repo'])}, {len(record['commits'])} commits "
              f"({'first-parent' if record.get('first_parent', True) else 'all parents'}); "
              f"{len(record.get('steps', []))} steps, {record.get('engine_starts', 0)} engine starts.", ""]
    if rows := _deltas(evidence):
        lines += ["Evidence against the good end:", "", *md_table(("metric", "delta", "p-value"),
                                                                   ([md_cell(x) for x in r] for r in rows)), ""]
    if text := excerpt(evidence):
        lines += ["<details><summary>One collapsed long generation</summary>", "",
                  md_fence(truncate(text, MAX_EXCERPT_CHARS)), "", "</details>", ""]
    if record.get("untestable"):
        lines += ["The first bad commit is one of: " + ", ".join(md_code(s[:12]) for s in record["untestable"]), ""]
    if steps := _step_rows(record):
        lines += ["<details><summary>Steps</summary>", "", *md_table(STEP_HEADERS, ([md_cell(x) for x in r] for r in steps)),
                  "", "</details>", ""]
    if record.get("command"):
        lines += ["Reproduce: " + md_code(shlex.join(record["command"])), ""]
    return "\n".join(lines)


def as_json(record: dict[str, Any]) -> str:
    """bisect.json as it is."""
    return json.dumps(record, indent=2) + "\n"


def render(record: dict[str, Any], fmt: str) -> str | Sequence[RenderableType]:
    """The report in `fmt` (terminal: renderables to print; markdown, json: text)."""
    if fmt == "terminal":
        return terminal(record)
    return markdown(record) if fmt == "markdown" else as_json(record)
