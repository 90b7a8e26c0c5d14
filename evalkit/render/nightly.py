"""`evalkit history judge` and `audit` in words: what a nightly's log and its mail say.

The judge prints one line per series (worst first: the nightly reader wants the broken ones on
top), its noise in points beside it, and under a broken series why; with `--all`, every point
that was not ok. The audit is a markdown table, one row per gated series, to paste into the
issue that resets the floors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from evalkit.history.judge import BROKEN, INSUFFICIENT, OK, Judged

SHOWN = 5
"""Broken points shown per series with --all (the JSON holds every one)."""
_ORDER = {"regression": 0, "intermittent": 1, "shift": 2, INSUFFICIENT: 3, OK: 4}


def _noise(j: Judged) -> str:
    pts = j.series.scale

    def say(sd: float | None) -> str:
        return "-" if sd is None else f"{sd * pts:.2f}"

    return f"noise {say(j.noise.same_commit)} same commit, {say(j.noise.across_commits)} across commits (points)"


def _each(judged: Sequence[Judged]) -> float:
    """The per-series false-alarm rate the judge split the nightly's into."""
    return next((j.reference.rate for j in judged if j.reference), 0.0)


def judge_text(judged: Sequence[Judged], every: bool, rate: float) -> str:
    """The verdicts: a headline, then each series' newest verdict (and its broken points with `every`)."""
    newest = Counter(j.newest.verdict for j in judged if j.newest)
    lines = [f"evalkit history judge: {len(judged)} series, newest points: "
             + ", ".join(f"{newest[v]} {v}" for v in _ORDER if newest[v])
             + f" (false alarms {rate:.2%} a healthy night in all, {_each(judged):.2g} per series)"]
    for j in sorted(judged, key=lambda j: (_ORDER[j.newest.verdict] if j.newest else 9, j.series.name)):
        last = j.newest
        if last is None:
            continue
        lines.append(f"{last.verdict.upper():<12} {j.series.name}  (n={len(j.series.points)}, {_noise(j)})")
        shown = [jd for jd in (j.judgements if every else [last]) if jd.verdict in BROKEN]
        if len(shown) > SHOWN:
            lines.append(f"    ({len(shown) - SHOWN} earlier broken points not shown)")
        lines += [f"    {jd.point.commit[:12]} {jd.point.date[:16]} {jd.verdict}: {jd.why}" for jd in shown[-SHOWN:]]
    broken = [j.series.name for j in judged if j.newest and j.newest.verdict in BROKEN]
    lines.append(f"{len(broken)} series broke at their newest point" + (": " + "; ".join(broken) if broken else ""))
    return "\n".join(lines) + "\n"


def audit_text(judged: Sequence[Judged], rate: float) -> str:
    """One row per gated series: its floor against its noise, and the floor `rate` suggests."""
    lines = [f"Gate audit: each floor against its series' noise; suggested floors at {rate:.2%} false alarms a "
             f"healthy night in all ({_each(judged):.2g} per series).",
             "Healthy nights: those not judged regression, intermittent or shift. Drops in points, caught with 80% power.",
             "",
             "| series | n | floor | level | noise (points) | healthy nights failed | smallest drop caught | suggested | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for j in sorted(judged, key=lambda j: j.series.name):
        a = j.audit
        if a is None:
            continue
        pts, ref = j.series.scale, j.reference
        level = f"{ref.level:.4g}" if ref else "-"
        noise = f"{ref.spread * pts:.2f}" if ref else "-"
        failed = f"{a.fired}/{a.healthy}" + (f" ({a.realized_rate:.1%})" if a.realized_rate is not None else "")
        drop = f"{a.smallest_drop:.1f}" if a.smallest_drop is not None else "-"
        suggested = f"{a.suggested:.4g}" if a.suggested is not None else "-"
        lines.append(f"| {j.series.name} | {len(j.series.points)} | {a.floor:g} | {level} | {noise} | {failed} | "
                     f"{drop} | {suggested} | {'; '.join(a.notes)} |")
    flagged = [j for j in judged if j.audit and any(n.startswith(("above", "within")) for n in j.audit.notes)]
    lines += ["", f"{len(flagged)} of {sum(1 for j in judged if j.audit)} floors sit within the noise or above the median"]
    return "\n".join(lines) + "\n"
