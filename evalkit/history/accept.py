"""Levels a person accepted: the only way a series' level moves down and stays there without alarming.

The judge never re-baselines a series by itself: a series that falls and stays down is a
regression every night until it recovers. When the new level is right (a new model revision, a
changed prompt, a bug fixed that flattered the score), a person says so:

    evalkit history accept "sim/deepseek-v4 tp8-full-fixon gsm8k.flexible" --from 3f2a1c0b --why "new tokenizer, -2 points expected"

which records (series, from commit, why, when) in the history database (table `accepted_levels`,
migration m007). From the first point of that commit on, the series' level is read from its points
there and after; its noise is still read from its whole history. The judge's output shows the
acceptance beside each verdict it shapes.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from evalkit.history.schema import now


@dataclass(frozen=True)
class Acceptance:
    """A level accepted from one commit of one series on."""

    series: str
    commit: str
    """The full commit (as the series' points hold it) the accepted level starts at."""
    why: str
    at: str
    """When it was accepted (UTC, ISO)."""

    def said(self) -> str:
        return f"level accepted from {self.commit[:12]} on {self.at[:10]}: {self.why}"


def accept(db: sqlite3.Connection, series: str, commit: str, why: str) -> Acceptance:
    """Record an acceptance (again for the same series and commit: its reason and time replaced)."""
    accepted = Acceptance(series, commit, why, now())
    with db:
        db.execute("INSERT OR REPLACE INTO accepted_levels (series, from_commit, why, accepted_at) VALUES (?, ?, ?, ?)",
                   (series, commit, why, accepted.at))
    return accepted


def acceptances(db: sqlite3.Connection) -> list[Acceptance]:
    """Every acceptance recorded, oldest first."""
    return [Acceptance(*row) for row in db.execute(
        "SELECT series, from_commit, why, accepted_at FROM accepted_levels ORDER BY accepted_at, series")]
