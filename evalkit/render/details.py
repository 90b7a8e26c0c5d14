"""What the summary leaves out on purpose, read from the run folder for the report's details.

summary.json holds numbers and question ids, not model text (a 13,190-question run would not fit
in memory otherwise). The markdown report folds examples under each cell, so they are read here,
and only the rows it shows, streamed. `SHOWN` says, per kind of evidence a metric asks for
(`MetricDisplay.details`, an `Evidence`), what is read and how every format shows it:

* `Section.FLIPS` (`Evidence.FLIPS`): the questions that flipped to wrong against the baseline
  or the twin, from the eval's samples file of the cell and of its reference;
* `Section.EVENTS` (`Evidence.EVENTS`, `Evidence.PARTED`): the samples whose `event_field` is
  true (the collapsed generations; for PARTED, identical requests' texts and where they part:
  the consistency eval's disagreeing prompts), from the samples file of each cell where the
  event happened;
* `Section.WORST` (`Evidence.WORST`, PAIRWISE): nothing is read, the places its eval found worst
  are in the summary already, a few short texts per comparison (`cell_worst`).

Missing files are simply absent: a report of a hand-made or half-finished run still renders.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from evalkit.evals.base import Evidence, MetricDisplay, MetricSpec
from evalkit.evals.recorded import with_evals
from evalkit.render.table import AGAINST
from evalkit.store import read_json, read_jsonl
from evalkit.verdict.summary import CellRow, RunSummary


class Section(Enum):
    """The block every format draws per cell for a metric's evidence, and what `load_details`
    reads for it."""

    FLIPS = "flips"
    """Per reference, the flipped questions and a few with the eval's account of them (the rows
    of the cell and of its references)."""
    EVENTS = "events"
    """A few of the samples where the event happened (the cell's rows with `event_field` set)."""
    WORST = "worst"
    """Per reference, the worst places, with the text around each (in the summary: nothing read)."""


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Shown:
    """How the report shows one kind of evidence, in every format."""

    section: Section
    heading: Callable[[MetricDisplay], str]
    """The title of a metric's evidence (the markdown report's section)."""
    parted: bool = False
    """EVENTS: each sample is identical requests parting (`parted_facts`, each continuation), not
    the detector's evidence (`event_facts`, the excerpt around the onset)."""


def _events_heading(display: MetricDisplay) -> str:
    return f"{_capitalized(display.delta_label or display.label)} evidence"


SHOWN: dict[Evidence, Shown] = {
    Evidence.FLIPS: Shown(Section.FLIPS, lambda display: f"Flipped questions ({display.label})"),
    Evidence.EVENTS: Shown(Section.EVENTS, _events_heading),
    Evidence.PARTED: Shown(Section.EVENTS, _events_heading, parted=True),
    Evidence.WORST: Shown(Section.WORST, lambda display: f"{_capitalized(display.label)}: worst places"),
}
"""Each kind of evidence: what the details read and how the markdown and HTML reports draw it."""


def shown(spec: MetricSpec) -> Shown | None:
    """How the report shows `spec`'s evidence (None: it asks for none)."""
    return SHOWN[spec.display.details] if spec.display.details is not None else None


@dataclass(frozen=True)
class EngineFacts:
    """How one cell's engine ran, for its drill-down (cell.json, engine.log); empty without them."""

    launch: dict[str, Any] | None = None
    """argv and env as cell.json stores them (secrets redacted), or an external server's URL."""
    effective_mode: str | None = None
    log_tail: str = ""
    """The error's log tail, else the end of engine.log (secret values scrubbed when the cell ended)."""
    gpu: dict[str, Any] | None = None
    """cell.json's GPU record (render/gpus.py words it)."""


@dataclass
class Details:
    """Extra material for the report, read from the run folder (empty without one)."""

    run: dict[str, Any] = field(default_factory=dict)
    """run.json without its config snapshot (versions, limit, host)."""
    samples: dict[str, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)
    """eval name -> cell id -> sample id -> that cell's row, for flipped questions only."""
    events: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    """metric name -> cell id -> the samples where its event happened (`Section.EVENTS`)."""
    engines: dict[str, EngineFacts] = field(default_factory=dict)
    """cell id -> how its engine ran (cell.json and engine.log)."""


@dataclass(frozen=True)
class Flips:
    """The questions of one paired metric that flipped between a cell and one of its references."""

    word: str
    """"baseline" or "twin"."""
    reference: str
    """The reference cell's id."""
    wrong: list[str]
    """Right there, wrong here."""
    right: list[str]
    """Wrong there, right here."""


def cell_flips(cell: CellRow, metric: str) -> list[Flips]:
    """Against the baseline, then the twin: where any question of `metric` flipped."""
    out = []
    for against, word in AGAINST:
        deltas = cell.against(against)
        delta = deltas.of(metric) if deltas is not None else None
        if deltas is not None and delta is not None and (delta.flipped_to_wrong or delta.flipped_to_right):
            out.append(Flips(word, deltas.reference, delta.flipped_to_wrong, delta.flipped_to_right))
    return out


@dataclass(frozen=True)
class Worst:
    """The places where a PAIRWISE metric was largest between a cell and one of its references."""

    word: str
    """"baseline" or "twin"."""
    reference: str
    value: float | None
    """The metric between the two (None: refused)."""
    places: list[dict[str, Any]]
    """`Pairwise.pairwise`'s ``worst``: id, at, value, and the text before, at and after the place."""
    refused: str | None = None


def cell_worst(cell: CellRow, metric: str) -> list[Worst]:
    """Against the baseline, then the twin: where `metric` was measured (or refused)."""
    out = []
    for against, word in AGAINST:
        deltas = cell.against(against)
        delta = deltas.of(metric) if deltas is not None else None
        if deltas is not None and delta is not None and (delta.worst or delta.refused):
            out.append(Worst(word, deltas.reference, delta.diff, delta.worst, delta.refused))
    return out


def flipped_to_wrong(cell: CellRow, metric: str) -> set[str]:
    """Question ids right in either reference of `cell` and wrong in it (the examples shown)."""
    return {qid for flips in cell_flips(cell, metric) for qid in flips.wrong}


def event_facts(sample: dict[str, Any]) -> list[str]:
    """The detector's facts about one collapsed sample, for every report format: the kinds of
    degenerate output that fired (loop, stutter, soup; samples stored before the kinds were
    recorded are loops), the rules, the unit and where the stretch starts and how long it is."""
    ev, sm = sample.get("evidence") or {}, sample.get("metrics") or {}
    kinds = list(ev.get("categories") or ["loop"])
    facts = [" + ".join(kinds), f"signals {', '.join(ev.get('signals') or []) or '-'}", f"period {ev.get('period')}",
             f"onset token {ev.get('onset')}", f"{ev.get('loop_tokens')} tokens {'looped' if kinds == ['loop'] else 'garbled'}",
             f"{sm.get('n_tokens')} tokens", f"finish {sm.get('finish_reason')}"]
    if not sample.get("model_flagged"):
        return facts
    figures = sample.get("model_signal") or {}  # evals/model_signal.py: the cell's own model found it improbable
    model = (f"improbable under the cell's own model: {figures.get('worst_nll', 0):.1f} nats/token over the "
             f"window from generated token {figures.get('worst_at')} (threshold {sample.get('model_threshold', 0):.1f})")
    return facts + [model] if sample.get("text_collapsed") else [model, *facts[-2:]]


def parted_facts(sample: dict[str, Any]) -> str:
    """One disagreeing prompt of the consistency eval in words, for every report format: how many
    distinct texts its identical requests gave, where they part, and when each was sent."""
    sent = ", ".join(f"#{place + 1}" for place in sample.get("sent") or [])
    return (f"{sample.get('copies')} identical requests, {sample.get('variants')} different texts, parting at token "
            f"{sample.get('diverge_at_token')} (character {sample.get('diverge_at_char')}); sent as requests {sent}")


def parted_copies(variant: dict[str, Any]) -> str:
    """Which copies gave one continuation ("copies 1, 3"), numbered from 1 as `parted_facts` numbers them."""
    copies = variant.get("copies") or []
    return f"{'copy' if len(copies) == 1 else 'copies'} {', '.join(str(c + 1) for c in copies)}"


def _read(path: Path, keep: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    return [row for row in read_jsonl(path) if keep(row)] if path.is_file() else []


def load_details(run_path: Path, summary: RunSummary) -> Details:
    """Read what the report folds into <details>, for every metric that asks for details."""
    details = Details()
    if (run_path / "run.json").is_file():
        details.run = {k: v for k, v in read_json(run_path / "run.json").items() if k != "config"}
    wanted: dict[tuple[str, str, str], set[str]] = {}  # (eval, samples file, cell) -> ids: one read per file
    for ev, spec in with_evals(summary.specs(), summary.evals):
        section = how.section if (how := shown(spec)) is not None else None
        for cell in summary.cells:
            if section is Section.FLIPS and (ids := flipped_to_wrong(cell, spec.name)):
                refs = {deltas.reference for against, _ in AGAINST if (deltas := cell.against(against)) is not None}
                for cell_id in {cell.id, *refs}:
                    wanted.setdefault((ev.name, ev.samples_file, cell_id), set()).update(ids)
            elif (section is Section.EVENTS and spec.event_field and spec.count_metric
                  and cell.metrics.get(spec.count_metric)):
                event = spec.event_field
                details.events.setdefault(spec.name, {})[cell.id] = _read(
                    run_path / cell.id / ev.samples_file, lambda row: bool(row.get(event)))  # noqa: B023 - called here
    for cell in summary.cells:
        details.engines[cell.id] = _engine(run_path / cell.id)
    for (eval_name, samples_file, cell_id), ids in wanted.items():
        rows = _read(run_path / cell_id / samples_file, lambda row: row.get("id") in ids)  # noqa: B023 - called here
        details.samples.setdefault(eval_name, {})[cell_id] = {row["id"]: row for row in rows}
    return details


LOG_TAIL_LINES = 20


def _engine(cell_dir: Path) -> EngineFacts:
    record = read_json(cell_dir / "cell.json") if (cell_dir / "cell.json").is_file() else {}
    tail = (record.get("error") or {}).get("log_tail") or ""
    log = cell_dir / "engine.log"
    if not tail and log.is_file():
        with log.open(encoding="utf-8", errors="replace") as f:
            tail = "".join(deque(f, maxlen=LOG_TAIL_LINES))
    return EngineFacts(record.get("launch"), record.get("effective_mode"), tail, record.get("gpu"))
