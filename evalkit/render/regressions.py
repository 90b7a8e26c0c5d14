"""What `matrix --bisect-on-regression` found, in words every format shares.

One line per cell that broke a failing threshold it passed in the previous run: the first bad
commit with its subject, or what the bisect concluded, or why no bisect ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def regression_lines(summary: Mapping[str, Any]) -> list[str]:
    """Each regression entry of the summary as one line (none when the run did not look)."""
    return [regression_words(entry) for entry in summary.get("regressions") or []]


def regression_words(entry: Mapping[str, Any]) -> str:
    cell = entry["cell"]
    since = f" since {entry['previous_run']}" if entry.get("previous_run") else ""
    if entry.get("first_bad"):
        subject = f' "{entry["subject"]}"' if entry.get("subject") else ""
        return (f"{cell}: regressed{since}; first bad commit {entry['first_bad'][:12]}{subject} "
                f"(bisect {entry.get('bisect_id')}, {str(entry.get('good'))[:12]}..{str(entry.get('bad'))[:12]})")
    if entry.get("bisect_id"):
        return f"{cell}: regressed{since}; bisect {entry['bisect_id']} {entry.get('status')}: {entry.get('message')}"
    return f"{cell}: regressed{since}; not bisected: {entry.get('message')}"
