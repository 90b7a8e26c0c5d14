"""Render a run's summary: a rich terminal table and GitHub markdown to paste into a PR.

Both renderers read the same summary dict (verdicts.summarize), so the terminal and the PR show
the same numbers. Text that may come from a model or a log is escaped for its target: no table
breaking in markdown, no markup or control sequences in the terminal.
"""

from __future__ import annotations

import html
import re
from typing import Any

from rich.console import Console
from rich.markup import escape as rich_escape
from rich.table import Table

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]|\x1b\[[0-9;?]*[A-Za-z]")
SIM_NOTE = "Engine: evalkit's SIMULATED engine (not a real model): figures show the pipeline, not a model."


def clean(text: str) -> str:
    """Drop terminal control sequences and fold newlines: safe on one line anywhere."""
    return CONTROL.sub("", str(text).replace("\r", " ").replace("\n", " ").replace("\t", " "))


def md_cell(text: str) -> str:
    """Escape text for a GitHub markdown table cell."""
    return html.escape(clean(text), quote=False).replace("|", "\\|").replace("`", "\\`")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _delta(delta: dict[str, Any] | None, sign: int = 1) -> str:
    if not delta:
        return "-"
    return f"{sign * delta['diff'] * 100:+.1f} (p={delta['p_value']:.2g})"


def rows(summary: dict[str, Any]) -> list[dict[str, str]]:
    """One display row per cell; the columns both renderers use."""
    out = []
    for cell in summary["cells"]:
        m = cell["metrics"]
        flags = "; ".join(f["message"] for f in cell["flags"])
        status = cell["status"] if cell["status"] == "ok" else f"{cell['status']}: {cell.get('error', '')}"
        out.append({
            "cell": cell["id"],
            "status": status,
            "strict": _pct(m.get("gsm8k.strict")),
            "flexible": _pct(m.get("gsm8k.flexible")),
            "collapse": "-" if m.get("repetition.collapse_rate") is None
            else f"{m['repetition.collapse_rate']:.2f} ({m['repetition.collapsed']}/{m['repetition.n']})",
            "vs_baseline": _delta((cell.get("vs_baseline") or {}).get("gsm8k.flexible")),
            "fix_on_minus_off": _delta((cell.get("vs_ab") or {}).get("gsm8k.flexible"), sign=-1),
            "collapse_vs_baseline": _delta((cell.get("vs_baseline") or {}).get("repetition.collapse_rate")),
            "flags": flags,
            "broken": "yes" if any(f["action"] == "fail" for f in cell["flags"]) else "",
        })
    return out


COLUMNS = [
    ("cell", "cell"),
    ("status", "status"),
    ("strict", "GSM8K strict"),
    ("flexible", "GSM8K flexible"),
    ("collapse", "collapse rate"),
    ("vs_baseline", "flexible vs baseline (pts)"),
    ("fix_on_minus_off", "fix on - off (pts)"),
    ("collapse_vs_baseline", "collapse vs baseline"),
]


def terminal(summary: dict[str, Any], console: Console) -> None:
    """The final table at the terminal; broken cells in bold red."""
    title = f"evalkit {summary['run_id']}: {summary['model']} on {summary['engine']}"
    table = Table(title=rich_escape(title), show_lines=False)
    for _, header in COLUMNS:
        table.add_column(header, overflow="fold")
    for row in rows(summary):
        style = "bold red" if row["broken"] else ("yellow" if not row["status"].startswith("ok") else None)
        table.add_row(*(rich_escape(clean(row[k])) for k, _ in COLUMNS), style=style)
    console.print(table)
    if summary.get("simulated"):
        console.print(f"[dim]{SIM_NOTE}[/dim]")
    if summary.get("baseline"):
        console.print(f"baseline: {rich_escape(summary['baseline'])}")
    for cell in summary["cells"]:
        for flag in cell["flags"]:
            marker = "FAIL" if flag["action"] == "fail" else "warn"
            console.print(f"[bold]{marker}[/bold] {rich_escape(clean(flag['message']))}")
    console.print(
        f"{len(summary['cells'])} cells, {summary['failed_cells']} failed to run, "
        f"{summary['broken_thresholds']} thresholds broken, {summary['warnings']} warnings; exit {summary['exit_code']}"
    )


def markdown(summary: dict[str, Any]) -> str:
    """GitHub markdown: a title, the matrix table, broken thresholds, a reproduce footer."""
    lines = [f"### evalkit: {md_cell(summary['model'])} on {md_cell(summary['engine'])} ({md_cell(summary['run_id'])})", ""]
    if summary.get("simulated"):
        lines += [f"> {SIM_NOTE}", ""]
    lines.append("| " + " | ".join(h for _, h in COLUMNS) + " |")
    lines.append("|" + "|".join("---" for _ in COLUMNS) + "|")
    for row in rows(summary):
        cells = [md_cell(row[k]) for k, _ in COLUMNS]
        if row["broken"]:
            cells[0] = f"**{cells[0]}** :x:"
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if summary.get("baseline"):
        lines.append(f"Baseline cell: `{md_cell(summary['baseline'])}`. Deltas in points; p: McNemar exact (GSM8K), Fisher exact (collapse).")
        lines.append("")
    flags = [f for c in summary["cells"] for f in c["flags"]]
    if flags:
        lines.append("**Broken thresholds**")
        lines.append("")
        lines += [f"- {'**FAIL**' if f['action'] == 'fail' else 'warn'}: {md_cell(f['message'])}" for f in flags]
        lines.append("")
    if summary.get("command"):
        lines.append("<sub>Reproduce: <code>" + html.escape(" ".join(summary["command"])) + "</code></sub>")
    return "\n".join(lines) + "\n"
