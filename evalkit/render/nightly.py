"""`evalkit history judge` and `audit` in words: what a nightly's log and its mail say.

The judge prints one line per series (worst first: the nightly reader wants the broken ones on
top), its noise in the metric's change unit beside it (points for a share, tokens/s for a
throughput), under a broken series why, under an insufficient one how many more nights it needs,
under one with an accepted level who accepted what; with `--all`, every point that was not ok.
The series another comparability key replaced are said once, under the headline. The audit is a
markdown table, one row per gated series, to paste into the issue that resets the floors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from evalkit.history.series import Series
from evalkit.history.verdicts import BROKEN, INSUFFICIENT, OK, Judged
from evalkit.history.words import noise_said

SHOWN = 5
"""Broken points shown per series with --all (the JSON holds every one)."""
LEFT_OUT_SHOWN = 3
"""Replaced series named under the headline (the JSON lists every one)."""
_ORDER = {"regression": 0, "intermittent": 1, "shift": 2, INSUFFICIENT: 3, OK: 4}


def _noise(j: Judged) -> str:
    unit = j.series.measure

    def say(sd: float | None) -> str:
        return "-" if sd is None else f"{sd * unit.change_scale:.2f}"

    binomial = f", {say(j.binomial)} binomial" if j.binomial else ""
    word = unit.change_word or f"{unit.name} units"
    return f"noise {say(j.noise.same_commit)} same commit, {say(j.noise.across_commits)} across commits{binomial} ({word})"


def _each(judged: Sequence[Judged]) -> float:
    """The per-series false-alarm rate the judge split the nightly's into."""
    return next((j.rate for j in judged), 0.0)


def left_out_text(left_out: Sequence[Series]) -> list[str]:
    """The series another comparability key replaced: left out of the verdicts, said once."""
    if not left_out:
        return []
    named = "; ".join(f"{s.name} ({s.replaced})" for s in left_out[:LEFT_OUT_SHOWN])
    more = f"; and {len(left_out) - LEFT_OUT_SHOWN} more (--format json lists them)" if len(left_out) > LEFT_OUT_SHOWN else ""
    return [f"left out: {len(left_out)} series whose cell's comparability key changed since: {named}{more}"]


def judge_text(judged: Sequence[Judged], every: bool, rate: float, left_out: Sequence[Series] = ()) -> str:
    """The verdicts: a headline, then each series' newest verdict (and its broken points with `every`)."""
    newest = Counter(j.newest.verdict for j in judged if j.newest)
    lines = [f"evalkit history judge: {len(judged)} series, newest points: "
             + ", ".join(f"{newest[v]} {v}" for v in _ORDER if newest[v])
             + f" (false alarms {rate:.2%} a healthy night in all, {_each(judged):.2g} per series)",
             *left_out_text(left_out)]
    for j in sorted(judged, key=lambda j: (_ORDER[j.newest.verdict] if j.newest else 9, j.series.name)):
        last = j.newest
        if last is None:
            continue
        lines.append(f"{last.verdict.upper():<12} {j.series.name}  (n={len(j.series.points)}, {_noise(j)})")
        if j.acceptance is not None:
            lines.append(f"    {j.acceptance.said()}")
        if last.verdict == INSUFFICIENT:
            lines.append(f"    {last.why}")
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
             "Healthy nights: those not judged regression, intermittent or shift. Drops and noise in each series' "
             "change unit (points for a share), drops caught with 80% power.",
             "",
             "| series | n | floor | level | noise | healthy nights failed | smallest drop caught | suggested | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for j in sorted(judged, key=lambda j: j.series.name):
        a = j.audit
        if a is None:
            continue
        unit, ref = j.series.measure, j.reference
        level = f"{ref.level:.4g}" if ref else "-"
        noise = noise_said(unit, ref.spread) if ref else "-"
        failed = f"{a.fired}/{a.healthy}" + (f" ({a.realized_rate:.1%})" if a.realized_rate is not None else "")
        drop = f"{a.smallest_drop:.1f}" if a.smallest_drop is not None else "-"
        suggested = f"{a.suggested:.4g}" if a.suggested is not None else "-"
        lines.append(f"| {j.series.name} | {len(j.series.points)} | {a.floor:g} | {level} | {noise} | {failed} | "
                     f"{drop} | {suggested} | {'; '.join(a.notes)} |")
    flagged = [j for j in judged if j.audit and any(n.startswith(("above", "within")) for n in j.audit.notes)]
    lines += ["", f"{len(flagged)} of {sum(1 for j in judged if j.audit)} floors sit within the noise or above the median"]
    return "\n".join(lines) + "\n"
