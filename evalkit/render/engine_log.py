"""What each cell's engine log proved, as plain text lines every report format shows: the graph
mode and layout the engine says it ran (and whether that is what the cell asked) and the config's
log assertions (run/engine_log.py). A cell that ran another mode or layout is also a warning flag
(verdict/deltas.py `ran_as_flags`); these lines are the evidence behind it. Beside them, whether
the engine's keyed compile cache was warm (engine/caches.py): a start-up's length depends on it."""

from __future__ import annotations

from evalkit.store.records import CacheRecord, LogCheck, RanAsRecord
from evalkit.verdict.summary import RunSummary


def ran_text(ran: RanAsRecord | None) -> str | None:
    """`PIECEWISE, tensor_parallel 8, dp_attention 8 ranks (as asked)`, or None without a reading
    (none, or an empty one)."""
    if ran is None or not ran.dump():
        return None
    layout = dict(ran.layout)
    ranks = layout.pop("dp_attention_ranks", None)
    parts = [ran.mode or "mode not logged"]
    for key, value in layout.items():
        if key == "dp_attention":
            parts.append(f"dp_attention {f'{ranks} ranks' if value and ranks else ('on' if value else 'off')}")
        else:
            parts.append(f"{key} {value}")
    verdict = {True: "as asked", False: f"NOT AS ASKED: {'; '.join(ran.disagreements)}",
               None: "nothing to compare"}[ran.agrees]
    return f"{', '.join(parts)} ({verdict})"


def checks_text(checks: list[LogCheck] | None) -> str | None:
    """`2/2 held`, or the first broken one; None when no assertion applied."""
    if not checks:
        return None
    held = sum(1 for c in checks if c.ok)
    broken = next((c for c in checks if not c.ok), None)
    text = f"{held}/{len(checks)} held"
    if broken:
        text += f"; broken: {broken.origin} must {broken.must} '{broken.pattern}'"
    return text


def cache_text(cache: CacheRecord | None) -> str | None:
    """`hit 0f1e2d3c4b5a6978` for a keyed cache, `fresh (why)` when keyed could not be had; None
    for caches fresh or the engine's own by the config (nothing to say per cell)."""
    if cache is None:
        return None
    if cache.mode == "keyed":
        return f"{'hit' if cache.hit else 'miss'} {cache.key}"
    return f"{cache.mode} ({cache.why})" if cache.why else None


def engine_log_lines(summary: RunSummary) -> list[str]:
    """One line per cell whose engine log was read or checked, or whose compile cache was keyed."""
    lines = []
    for cell in summary.cells:
        ran, checks, cache = ran_text(cell.ran_as), checks_text(cell.log_checks), cache_text(cell.cache)
        if ran or checks or cache:
            parts = (([f"ran {ran}"] if ran else []) + ([f"log checks {checks}"] if checks else [])
                     + ([f"cache {cache}"] if cache else []))
            lines.append(f"{cell.id}: {' · '.join(parts)}")
    return lines


def engine_log_title(summary: RunSummary) -> str:
    """The section's one-line summary: how many cells ran as asked, how many log checks held."""
    read = [c.ran_as for c in summary.cells if c.ran_as is not None and c.ran_as.agrees is not None]
    checks = [check for c in summary.cells for check in c.log_checks or []]
    parts = []
    if read:
        parts.append(f"{sum(1 for r in read if r.agrees)}/{len(read)} cells ran the mode and layout asked")
    if checks:
        parts.append(f"{sum(1 for c in checks if c.ok)}/{len(checks)} log checks held")
    keyed = [c.cache for c in summary.cells if c.cache is not None and c.cache.mode == "keyed"]
    if keyed:
        parts.append(f"{sum(1 for c in keyed if c.hit)}/{len(keyed)} keyed compile caches warm")
    return "Engine log: " + ("; ".join(parts) if parts else "nothing read")
