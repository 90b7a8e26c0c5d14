"""Binary search for the first bad commit, with untestable commits handled like `git bisect skip`.

Pure: the state is the verdicts found so far (index -> good / bad / untestable) over the range's
commits (oldest first, the last one the bad end, known bad). `next_probe` says which commit to
test next, `conclude` what the verdicts prove. Nothing is kept between calls, so a resumed bisect
rebuilds its state from bisect.json's finished steps and asks the same questions again.

The first bad commit lies in `[lo, hi]`: `lo` is one past the newest good commit, `hi` the oldest
bad one. The probe halves that interval; an untestable probe is passed over for its nearest
untried neighbour (closer to the middle first), so a skipped commit costs one extra step, not a
restart, and all skips together at most one step more (a skipped commit stays a candidate, so the
split after it is one off centre: tests/test_bisect_search.py). When every commit of `[lo, hi)`
is untestable the range cannot be split: the first bad commit is one of `lo..hi` and the search
says so instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["good", "bad", "untestable"]


@dataclass(frozen=True)
class Conclusion:
    """What the verdicts prove about the first bad commit."""

    status: Literal["found", "untestable", "searching"]
    lo: int
    """Oldest index the first bad commit can be."""
    hi: int
    """Newest index it can be (the oldest known bad)."""

    @property
    def first_bad(self) -> int | None:
        return self.hi if self.status == "found" else None


def _bounds(n: int, verdicts: dict[int, Verdict]) -> tuple[int, int]:
    if n < 1:
        raise ValueError("a bisect range holds at least the bad end")
    bad = [i for i, v in verdicts.items() if v == "bad"]
    hi = min([n - 1, *bad])
    good = [i for i, v in verdicts.items() if v == "good" and i < hi]
    lo = max(good) + 1 if good else 0
    return lo, hi


def next_probe(n: int, verdicts: dict[int, Verdict]) -> int | None:
    """The index to test next (never the bad end, never one already tried), or None when done."""
    lo, hi = _bounds(n, verdicts)
    untried = [i for i in range(lo, hi) if i not in verdicts]
    if not untried:
        return None
    middle = (lo + hi - 1) / 2
    return min(untried, key=lambda i: (abs(i - middle), i))


def conclude(n: int, verdicts: dict[int, Verdict]) -> Conclusion:
    """`found` (hi is the first bad commit), `untestable` (one of lo..hi, the rest could not be
    tested), or `searching` (a probe is left)."""
    lo, hi = _bounds(n, verdicts)
    if next_probe(n, verdicts) is not None:
        return Conclusion("searching", lo, hi)
    return Conclusion("found" if lo == hi else "untestable", lo, hi)


def max_steps(n: int) -> int:
    """Steps a range of n commits needs at most without untestable ones: ceil(log2 n)."""
    return max(0, (n - 1).bit_length())
