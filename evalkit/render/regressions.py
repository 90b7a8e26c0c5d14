"""What `matrix --bisect-on-regression` found, in words every format shares.

One line per cell that broke a failing threshold it passed in the previous run: the first bad
commit with its subject, or what the bisect concluded, or why no bisect ran.
"""

from __future__ import annotations

from evalkit.verdict.summary import Regression, RunSummary


def regression_lines(summary: RunSummary) -> list[str]:
    """Each regression entry of the summary as one line (none when the run did not look)."""
    return [regression_words(entry) for entry in summary.regressions or []]


def regression_words(entry: Regression) -> str:
    cell = entry.cell
    since = f" since {entry.previous_run}" if entry.previous_run else ""
    if entry.first_bad:
        subject = f' "{entry.subject}"' if entry.subject else ""
        return (f"{cell}: regressed{since}; first bad commit {entry.first_bad[:12]}{subject} "
                f"(bisect {entry.bisect_id}, {str(entry.good)[:12]}..{str(entry.bad)[:12]})")
    if entry.bisect_id:
        return f"{cell}: regressed{since}; bisect {entry.bisect_id} {entry.status}: {entry.message}"
    return f"{cell}: regressed{since}; not bisected: {entry.message}"
