"""A bisect's report, from bisect.json: on the terminal, as markdown for the revert/fix PR, as JSON.

All three show the same facts: the conclusion (the first bad commit, its subject and author date,
or the range that could not be split, or why the ends are not as claimed), the evidence (accuracy
and collapse deltas against the good end with their p-values; every threshold on the bad end,
PASS, FAIL or INCONCLUSIVE with its MDE in the words of every report; one collapsed excerpt) and every
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

from evalkit.clean import clean
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.evals.evalset import spec_named
from evalkit.evals.recorded import specs_of
from evalkit.render.checks import check_sentence, stored
from evalkit.render.markdown import md_table
from evalkit.render.numbers import p_text
from evalkit.render.text import MAX_EXCERPT_CHARS, md_cell, md_code, md_fence, term_text, truncate

VERDICT_MARK = {"good": "good", "bad": "BAD", "untestable": "untestable"}
_STYLE = {"FAIL": "red", "INCONCLUSIVE": "yellow"}


def first_bad_step(record: dict[str, Any]) -> dict[str, Any] | None:
    """The step that tested the first bad commit (None when it is the bad end, run in full)."""
    return next((s for s in record.get("steps", []) if s["sha"] == record.get("first_bad")), None)


def _deltas(evidence: dict[str, Any], specs: list[MetricSpec]) -> list[tuple[str, str, str]]:
    """(metric, delta, p-value) for each metric delta in an evidence dict (verdict.deltas.delta shape);
    `specs`: the metrics the ends recorded."""
    rows = []
    for metric, d in evidence.items():
        if not isinstance(d, dict) or d.get("diff") is None:
            continue
        p = d.get("p_value", d.get("p_greater"))
        spec = spec_named(metric, specs)
        # a share's change in points; a divergence or an engine figure (tokens/s) as it is
        share = spec is None or spec.comparison in (Comparison.PAIRED, Comparison.COUNT)
        rows.append((metric, f"{d['diff'] * 100:+.1f} points" if share else f"{d['diff']:+.3g}",
                     p_text(p) if p is not None else "-"))
    return rows


def _sequential(step: dict[str, Any]) -> str:
    """The deciding look of a step's sequential test, in one line."""
    stats = (step.get("evidence") or {}).get("sequential") or {}
    parts = []
    for name, s in stats.items():
        if isinstance(s, dict) and "p_bound" in s:
            # the joint test multiplies the other two's likelihood ratios: it has no counts of its own
            counts = f"lost {s['lost']}, gained {s['gained']} of {s['n']}, " if "lost" in s else \
                f"{s['k']} of {s['n']} collapsed, " if "k" in s else "both evals, "
            parts.append(f"{name}: {counts}anytime-valid p <= {p_text(s['p_bound'])}")
    how = stats.get("decided_by") or "undecided"
    return f"sequential test ({how}, alpha {record_alpha(step)}): " + "; ".join(parts) if parts else ""


def record_alpha(step: dict[str, Any]) -> str:
    stats = (step.get("evidence") or {}).get("sequential") or {}
    alphas = [s["alpha"] for s in stats.values() if isinstance(s, dict) and "alpha" in s]
    return ", ".join(f"{a:g}" for a in alphas) or "?"


def _evidence_tables(record: dict[str, Any]) -> list[tuple[str, list[tuple[str, str, str]], str]]:
    """(title, rows, note) per evidence table: the first bad commit's step, then the full ends."""
    out = []
    ends = record.get("ends") or {}
    specs = specs_of(ends)
    step = first_bad_step(record) if record["status"] == "found" else None
    if step is not None:
        out.append((f"The first bad commit vs the good end ({step['questions']} questions, "
                    f"{step['generations']} long generations)", _deltas((step.get("evidence") or {}).get("vs_good") or {}, specs),
                    _sequential(step)))
    if ends.get("evidence"):
        bad = (record.get("bad") or {}).get("sha", "?")[:12]
        out.append((f"The bad end {bad} vs the good end (full cells)", _deltas(ends["evidence"], specs), clean(ends.get("reason", ""))))
    return out


def end_checks(record: dict[str, Any]) -> tuple[str, list[str]]:
    """(title, lines): every threshold on the bad end, the delta ones against the good end, each
    PASS, FAIL or INCONCLUSIVE with its MDE (render/checks.py's words); no lines for a bisect.json
    written before the ends kept their checks."""
    ends = record.get("ends") or {}
    found = ends.get("checks") or []
    bad, good = ((record.get(end) or {}).get("sha", "?")[:12] for end in ("bad", "good"))
    return (f"Thresholds: the bad end {bad} against the good end {good}",
            [check_sentence(c, specs_of(ends)) for c in stored(found)])


def excerpt(record: dict[str, Any]) -> str | None:
    """One collapsed long generation (bisect.json `excerpt`), when there is one."""
    found = record.get("excerpt") or {}
    return found.get("text") or None


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
    for title, rows, note in _evidence_tables(record):
        out.append(Text(clean(title) + ":"))
        table = Table()
        for h in ("metric", "delta", "p-value"):
            table.add_column(h)
        for row in rows:
            table.add_row(*map(term_text, row))
        out += [table, Text(clean(note))] if note else [table]
    title, lines = end_checks(record)
    if lines:
        out += [Text(clean(title) + ":"), *(Text("  " + clean(line), style=_STYLE.get(line.split(" ", 1)[0], ""))
                                               for line in lines)]
    if text := excerpt(record):
        out.append(Text("collapsed excerpt: " + clean(truncate(text, 300))))
    if record.get("untestable"):
        out.append(Text("could be any of: " + " ".join(s[:12] for s in record["untestable"])))
    # At 80 columns a `why` column would wrap into a tower beside the others: each step's reason
    # goes under the table instead, after its commit, and a commit keeps its 12 characters.
    steps = Table(title=f"steps ({len(record.get('steps', []))}; engine starts {record.get('engine_starts', 0)})")
    for header in STEP_HEADERS[:-1]:
        steps.add_column(header, no_wrap=header in ("commit", "verdict", "wall"))
    step_rows = _step_rows(record)
    for step_row in step_rows:
        steps.add_row(*map(term_text, step_row[:-1]))
    out.append(steps)
    out += [Text(f"  {row[0]} {clean(row[-1])}") for row in step_rows if row[-1]]
    return out


def markdown(record: dict[str, Any]) -> str:
    """Ready to paste into the PR that reverts or fixes the first bad commit."""
    lines = [f"## evalkit bisect: `{record['cell']}`", ""]
    if record["status"] == "found":
        c = next(c for c in record["commits"] if c["sha"] == record["first_bad"])
        lines += [f"**First bad commit:** {md_code(c['sha'])} {md_cell(c['subject'])} (authored {md_cell(c['author_date'])})", ""]
    else:
        lines += [f"**{md_cell(headline(record))}**", ""]
    good, bad = record.get("good") or {}, record.get("bad") or {}
    lines += [f"Range: good {md_code(good.get('sha', '?')[:12])} .. bad {md_code(bad.get('sha', '?')[:12])} of "
              f"{md_code(record['repo'])}, {len(record['commits'])} commits "
              f"({'first-parent' if record.get('first_parent', True) else 'all parents'}); "
              f"{len(record.get('steps', []))} steps, {record.get('engine_starts', 0)} engine starts.", ""]
    for title, rows, note in _evidence_tables(record):
        lines += [f"{md_cell(title)}:", "", *md_table(("metric", "delta", "p-value"), ([md_cell(x) for x in r] for r in rows)), ""]
        lines += [md_cell(note), ""] if note else []
    title, checked = end_checks(record)
    if checked:
        lines += [f"{md_cell(title)}:", "", *(f"- {md_cell(line, limit=1000)}" for line in checked), ""]
    if text := excerpt(record):
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
    """The report in `fmt`, one of evalkit.render.BISECT_FORMATS (terminal: renderables to print; markdown, json: text)."""
    if fmt == "terminal":
        return terminal(record)
    return markdown(record) if fmt == "markdown" else as_json(record)
