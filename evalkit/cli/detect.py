"""`evalkit detect`: judge texts with the repeated-token collapse detector."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalkit.cli._common import _Command
from evalkit.errors import ConfigError

if TYPE_CHECKING:
    from evalkit.evals.detector import Analysis


@click.command(cls=_Command)
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True, path_type=Path))
@click.option("--field", default="text", show_default=True, help="JSONL: the field holding the text.")
@click.option("--finish-reason", default=None, help="Assume this finish_reason (JSONL rows may carry their own).")
@click.option("--json", "as_json", is_flag=True, help="One JSON verdict per text on stdout.")
def detect(files: tuple[Path, ...], field: str, finish_reason: str | None, as_json: bool) -> None:
    """Judge texts with evalkit's collapse detector: loops, stutter and token soup.

    FILE is plain text (one text per file), or JSONL (one text per line, in --field, with an
    optional finish_reason); `-` reads stdin. Exit code 0 when nothing collapsed, 1 otherwise.
    The text rules alone: the model's own signal, which a matrix cell adds, needs the engine.

    \b
    Examples:
      evalkit detect transcript.txt
      evalkit detect results/*/dp8-piecewise-fixoff/repetition.samples.jsonl --json   # every run of a cell
    """
    from evalkit.evals.detector import analyze_text

    collapsed = 0
    for path in files:
        for name, text, reason in _texts(path, field):
            analysis = analyze_text(text, finish_reason=finish_reason or reason)
            collapsed += analysis.collapsed
            click.echo(_verdict_json(name, analysis) if as_json else _verdict_line(name, analysis))
    if not as_json:
        click.echo(f"note: {TEXT_ONLY}", err=True)
    sys.exit(1 if collapsed else 0)


TEXT_ONLY = "text rules only; the model's own signal needs the engine: not measured"
"""What `detect` says of every verdict: plain text has no engine to score it (evals/model_signal.py)."""


def _verdict_json(name: str, analysis: Analysis) -> str:
    """One JSON object per text: its source, whether it collapsed, and the detector's analysis."""
    return json.dumps({"source": name, "collapsed": analysis.collapsed, **analysis.to_dict(),
                       "model_signal": TEXT_ONLY})


def _verdict_line(name: str, analysis: Analysis) -> str:
    """`NAME: healthy`, `NAME: too short to judge (N tokens)`, or `NAME: collapsed: KINDS (signals; period, onset, length) unit: '...'`,
    the unit of a loop or the first places where a stutter or a soup fired."""
    from evalkit.clean import clean

    line = f"{name}: {analysis.verdict}"
    if analysis.too_short:  # healthy, but shorter than any stutter, salad or loop rule needs
        line = f"{name}: too short to judge ({analysis.metrics.n_tokens} tokens)"
    if analysis.collapsed:
        ev = analysis.evidence
        line += (f": {' + '.join(ev.categories)} ({', '.join(ev.signals)}; period {ev.period}, onset token {ev.onset}, "
                 f"{ev.loop_tokens} tokens {'looped' if ev.categories == ('loop',) else 'garbled'})")
        if ev.categories[0] == "loop":
            line += f" unit: {clean(ev.unit_text or '')[:60]!r}"
        else:
            line += " at: " + ", ".join(repr(clean(e)[:30]) for e in ev.examples[:3])
    return line


def _texts(path: Path, field: str) -> list[tuple[str, str, str | None]]:
    """(name, text, finish_reason) for every text in a plain or JSONL file."""
    raw = sys.stdin.read() if str(path) == "-" else _read(path)
    name = "stdin" if str(path) == "-" else str(path)
    if not (str(path).endswith(".jsonl") or str(path).endswith(".ndjson")):
        return [(name, raw, None)]
    out = []
    for lineno, line in enumerate(raw.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text = row[field]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError(f"{name}:{lineno}: expected a JSON object with a {field!r} field ({e})") from e
        out.append((f"{name}:{row.get('id', lineno)}", str(text), row.get("finish_reason")))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from e
