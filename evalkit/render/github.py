"""GitHub Actions: a run's verdict where the workflow page shows it.

Two outputs, both pure functions of the summary (api/publish.py delivers them):

* workflow-command annotations, one `::error` per broken failing threshold and per cell that did
  not run, one `::warning` per warning flag. Values are escaped as GitHub's own toolkit does
  (actions/toolkit, packages/core/src/command.ts: `escapeData` replaces `%`, CR and LF;
  `escapeProperty` also `:` and `,`), so a model's text in a message cannot end the command or
  forge another one;
* the markdown report for `$GITHUB_STEP_SUMMARY`, which GitHub caps at 1 MiB per step (its docs,
  "Adding a job summary"): a longer report is cut at a line end and says so, naming where the
  whole report is.
"""

from __future__ import annotations

from evalkit.verdict.summary import RunSummary

STEP_SUMMARY_LIMIT = 1024 * 1024
"""Bytes GitHub accepts in one step's summary file."""
_TITLE = "evalkit"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, title: str) -> str:
    """One workflow command line: `::error title=...::message`."""
    return f"::{level} title={_escape_property(title)}::{_escape_data(message)}"


def workflow_commands(summary: RunSummary) -> list[str]:
    """The run's annotations, cells in matrix order: failed cells, then each cell's flags."""
    lines = []
    for row in summary.cells:
        title = f"{_TITLE} {summary.run_id}: {row.id}"
        if row.status == "error":
            lines.append(command("error", f"{row.id}: cell failed to run: {row.error or 'no reason recorded'}", title))
        elif row.status != "ok":
            lines.append(command("error", f"{row.id}: cell {row.status}: {row.error or 'not run'}", title))
        for flag in row.flags:
            lines.append(command("error" if flag.action == "fail" else "warning", flag.message, title))
    return lines


def step_summary(markdown: str, whole_report: str, used_bytes: int = 0,
                 limit: int = STEP_SUMMARY_LIMIT) -> str:
    """`markdown` fitted into what is left of the step's summary (`limit - used_bytes`): whole when
    it fits, else cut at the last line end that leaves room for a note naming `whole_report`."""
    room = limit - used_bytes
    data = markdown.encode("utf-8")
    if len(data) <= room:
        return markdown
    note = (f"\n\n> **Report cut here**: GitHub keeps at most {limit // 1024} KiB of a step summary. "
            f"The whole report: `{whole_report}` (upload the results folder as an artifact to keep it).\n")
    closing = "\n</details>"
    keep = room - len(note.encode("utf-8"))
    if keep <= 0:
        return ""
    head = data[:keep].decode("utf-8", "ignore")
    head = head[:max(0, head.rfind("\n"))]
    # A cut inside folded details would fold the note away too: close what is open.
    opened = head.count("<details>") - head.count("</details>")
    while opened > 0 and len(head.encode("utf-8")) + len(closing) * opened > keep:
        head = head[:max(0, head.rfind("\n"))]
        opened = head.count("<details>") - head.count("</details>")
    return head + closing * opened + note
