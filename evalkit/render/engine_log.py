"""What each cell's engine log proved, as plain text lines every report format shows: the graph
mode and layout the engine says it ran (and whether that is what the cell asked) and the config's
log assertions (run/engine_log.py). A cell that ran another mode or layout is also a warning flag
(verdicts.py `ran_as_flags`); these lines are the evidence behind it."""

from __future__ import annotations

from typing import Any


def ran_text(ran: dict[str, Any] | None) -> str | None:
    """`PIECEWISE, tensor_parallel 8, dp_attention 8 ranks (as asked)`, or None without a reading."""
    if not ran:
        return None
    layout = dict(ran.get("layout") or {})
    ranks = layout.pop("dp_attention_ranks", None)
    parts = [ran.get("mode") or "mode not logged"]
    for key, value in layout.items():
        if key == "dp_attention":
            parts.append(f"dp_attention {f'{ranks} ranks' if value and ranks else ('on' if value else 'off')}")
        else:
            parts.append(f"{key} {value}")
    verdict = {True: "as asked", False: f"NOT AS ASKED: {'; '.join(ran.get('disagreements') or [])}",
               None: "nothing to compare"}[ran.get("agrees")]
    return f"{', '.join(parts)} ({verdict})"


def checks_text(checks: list[dict[str, Any]] | None) -> str | None:
    """`2/2 held`, or the first broken one; None when no assertion applied."""
    if not checks:
        return None
    held = sum(1 for c in checks if c["ok"])
    broken = next((c for c in checks if not c["ok"]), None)
    text = f"{held}/{len(checks)} held"
    if broken:
        text += f"; broken: {broken['origin']} must {broken['must']} '{broken['pattern']}'"
    return text


def engine_log_lines(summary: dict[str, Any]) -> list[str]:
    """One line per cell whose engine log was read or checked."""
    lines = []
    for cell in summary["cells"]:
        ran, checks = ran_text(cell.get("ran_as")), checks_text(cell.get("log_checks"))
        if ran or checks:
            parts = ([f"ran {ran}"] if ran else []) + ([f"log checks {checks}"] if checks else [])
            lines.append(f"{cell['id']}: {' · '.join(parts)}")
    return lines


def engine_log_title(summary: dict[str, Any]) -> str:
    """The section's one-line summary: how many cells ran as asked, how many log checks held."""
    cells = summary["cells"]
    read = [c["ran_as"] for c in cells if c.get("ran_as") and c["ran_as"].get("agrees") is not None]
    checks = [check for c in cells for check in c.get("log_checks") or []]
    parts = []
    if read:
        parts.append(f"{sum(1 for r in read if r['agrees'])}/{len(read)} cells ran the mode and layout asked")
    if checks:
        parts.append(f"{sum(1 for c in checks if c['ok'])}/{len(checks)} log checks held")
    return "Engine log: " + ("; ".join(parts) if parts else "nothing read")
