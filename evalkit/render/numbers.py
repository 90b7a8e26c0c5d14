"""Numbers as every report shows them, so the terminal, the PR comment and compare agree.

Deltas are "this minus its reference": for rates in points (percentage points) with the p-value
of the test that compared them, for a continuous value (no test) the plain difference, for a
value measured between the two cells (a divergence) that value; `-` stands for a value that was
not measured or not compared.
"""

from __future__ import annotations

from datetime import datetime

from evalkit.verdict.summary import Delta


def num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def p_text(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


def delta_text(delta: Delta | None, tested: bool = True, between: bool = False) -> str:
    """`-3.3 (p=0.0012)`: a tested difference of rates in points and its p-value; untested
    (a continuous value), the plain difference `-1.250`; `between` (a value measured between the
    two cells, no sign: it is not a difference), its `value` `0.0123`. `-` when not compared, `ran
    differently` when the two cells ran differently beyond what the comparison expects, `setup differs`
    when the comparison was refused (the two scores come from different eval setups), `not
    compared` when the eval refused it (its reason is in the thresholds and summary.json)."""
    if delta is not None and delta.differs:
        return "ran differently"
    if delta is not None and delta.setup_differs:
        return "setup differs"
    if delta is not None and delta.refused:
        return "not compared"
    if delta is None or delta.diff is None:
        return "-"
    if between:
        return f"{delta.diff if delta.value is None else delta.value:.3g}"
    if not tested:
        return f"{delta.diff:+.3f}"
    return f"{delta.diff * 100:+.1f} (p={p_text(delta.p_value)})"


def date_text(stamp: str | None) -> str:
    """`2026-12-03T11:13:33+00:00` -> `2026-12-03 11:13 UTC` (as stored when unparsable)."""
    if not stamp:
        return "?"
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    zone = "UTC" if parsed.utcoffset() is not None and not parsed.utcoffset() else parsed.strftime("%z")
    return f"{parsed:%Y-%m-%d %H:%M} {zone}".strip()
