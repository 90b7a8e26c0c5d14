"""The markdown report's folded `<details>`: flipped questions and event evidence, per cell.

One section per metric that asks for details (`MetricDisplay.details`), in the summary's order
(`RunSummary.specs`), drawn as details.SHOWN says for its kind of evidence:

* `Section.FLIPS`: per cell, the questions that flipped against the baseline and the twin, and a
  few that went wrong with the eval's own account of them (`EvalDisplay.describe_sample`);
* `Section.EVENTS`: per cell where the event happened, a few of those samples with the
  detector's evidence (kind: loop, stutter or soup, signals, period, onset, where it fired,
  excerpt, repeated unit, end of the text); for `Evidence.PARTED`, per cell where identical
  requests disagreed, a few prompts with the text the copies share before they part and each
  copy's continuation (between ⟦ ⟧);
* `Section.WORST`: per cell and reference, the places a PAIRWISE metric was largest, with the
  text around each (the token itself between ⟦ ⟧), or why the eval refused to compare.

Model text appears only in `<pre>` blocks (text.html_pre), and all bodies share one character
budget, so the comment stays under GitHub's 65,536 characters; past it, blocks say where to look.
"""

from __future__ import annotations

from typing import Any

from evalkit.clean import clean
from evalkit.evals.base import Eval, MetricSpec
from evalkit.evals.recorded import with_evals
from evalkit.render.details import (
    Details,
    Section,
    cell_flips,
    cell_worst,
    event_facts,
    parted_copies,
    parted_facts,
    shown,
)
from evalkit.render.text import html_pre, html_text, md_cell, md_code, truncate
from evalkit.verdict.summary import CellRow, RunSummary

MAX_IDS_LISTED = 40
MAX_EXAMPLES = 3
"""Flipped questions and event samples shown with their text, per cell and comparison."""
TAIL_CHARS = 300
"""Characters of a collapsed generation's end shown next to the detector's excerpt."""
MAX_DETAILS_CHARS = 40_000
"""Budget for all <details> bodies: a GitHub comment holds 65,536 characters."""


class _Budget:
    """Characters left for <details> bodies; once spent, further blocks say where to look."""

    def __init__(self, chars: int) -> None:
        self.left = chars

    def take(self, text: str) -> bool:
        self.left -= len(text)
        return self.left >= 0


def id_list(ids: list[str]) -> str:
    """Escaped ids, comma-separated, the first MAX_IDS_LISTED of them."""
    shown = ", ".join(md_cell(i) for i in ids[:MAX_IDS_LISTED])
    return shown + (f" … and {len(ids) - MAX_IDS_LISTED} more" if len(ids) > MAX_IDS_LISTED else "")


def _flip_example(ev: Eval, qid: str, cell_id: str, ref_id: str, answers: dict[str, dict[str, Any]]) -> list[str]:
    mine = answers.get(cell_id, {}).get(qid)
    if mine is None:
        return []
    theirs = answers.get(ref_id, {}).get(qid)
    here = ev.display.describe_sample(mine)
    there = ev.display.describe_sample(theirs)["answer"] if theirs is not None else "?"
    facts = (f"{md_cell(qid)}: target {md_code(truncate(clean(here['target'] or ''), 40))}; "
             f"this cell extracted {md_code(here['answer'])}, {md_cell(ref_id)} {md_code(there)} "
             f"(finish {md_cell(here['finish'] or '?')})")
    return [facts, "", html_pre(here["text"] or ""), ""]


def _flips(spec: MetricSpec, ev: Eval, cell: CellRow, details: Details, budget: _Budget) -> list[str]:
    """One <details> block for a cell with questions of `spec` flipped against a reference; the
    ids too take from the budget (a 48-cell matrix flips thousands), and once it is spent the block
    says where they are."""
    answers = details.samples.get(ev.name, {})
    parts, counts, shown = [], [], set()
    for f in cell_flips(cell, spec.name):
        word, ref, wrong, right = f.word, f.reference, f.wrong, f.right
        counts.append(f"{len(wrong)} to wrong, {len(right)} to right vs {word}")
        ids = (f"**vs {word} {md_cell(ref)}**: right there, wrong here ({len(wrong)}): {id_list(wrong) or '-'}; "
               f"wrong there, right here ({len(right)}): {id_list(right) or '-'}")
        parts += [ids if budget.take(ids) else f"**vs {word} {md_cell(ref)}**: the ids are in the run's summary.json "
                  f"(`flipped_to_wrong`, `flipped_to_right`)", ""]
        for qid in [q for q in wrong if q not in shown][:MAX_EXAMPLES]:
            example = _flip_example(ev, qid, cell.id, ref, answers)
            if example and budget.take("\n".join(example)):
                parts += example
                shown.add(qid)
    if not counts:
        return []
    line = f"{cell.id}: flipped questions ({'; '.join(counts)})"
    return [f"<details><summary>{html_text(line)}</summary>", "", *parts, "</details>", ""]


def _excerpt_label(sample: dict[str, Any]) -> str:
    ev = sample.get("evidence") or {}  # a stutter or soup of an id stream is shown as text (excerpt_onset)
    ids = sample.get("token_source") == "token_ids" and not ev.get("unit_text") and ev.get("excerpt_onset") is None
    return "Token ids around the onset (`|` marks it):" if ids else "Around the onset:"


def _evidence(sample: dict[str, Any]) -> list[str]:
    """One event sample: the detector's facts, the excerpt around the onset, the unit, the end."""
    ev = sample.get("evidence") or {}
    block = [f"**{md_cell(sample.get('id', '?'))}** ({md_cell(sample.get('kind') or '-')}): "
             + md_cell("; ".join(event_facts(sample))), "", _excerpt_label(sample), "", html_pre(ev.get("excerpt", "")), ""]
    if ev.get("examples"):
        block += ["Where it fired:", "", html_pre("\n".join(ev["examples"])), ""]
    if ev.get("unit_text"):
        block += ["Repeated unit:", "", html_pre(ev["unit_text"]), ""]
    if sample.get("text"):  # the excerpt is token ids when the server sent ids: show the words too
        block += ["End of the generated text:", "", html_pre("…" + sample["text"][-TAIL_CHARS:]), ""]
    return block


def _parted(sample: dict[str, Any]) -> list[str]:
    """One disagreeing prompt: the facts, then per distinct text the shared end and its continuation."""
    parted = sample.get("parted") or {}
    block = [f"**{md_cell(sample.get('id', '?'))}** ({md_cell(sample.get('kind') or '-')}): "
             + md_cell(parted_facts(sample)), ""]
    for variant in parted.get("after") or []:
        block += [f"{parted_copies(variant)}:", "",
                  html_pre(f"…{parted.get('before', '')}⟦{variant.get('text', '')}⟧…"), ""]
    return block


def _events(spec: MetricSpec, ev: Eval, cell: CellRow, details: Details, budget: _Budget,
            run_id: str, parted: bool) -> list[str]:
    """One <details> block for a cell where `spec`'s event happened: a few samples' evidence
    (the detector's, or with `parted` where identical requests part)."""
    samples = details.events.get(spec.name, {}).get(cell.id) or []
    m = cell.metrics
    if not samples and not m.get(spec.count_metric or ""):
        return []
    words = spec.display.event_words or f"samples {spec.event_field}"
    line = f"{cell.id}: {m.get(spec.count_metric or '')} of {m.get(spec.n_metric or '')} {words}"
    parts = [f"<details><summary>{html_text(line)}</summary>", ""]
    for sample in samples[:MAX_EXAMPLES]:
        block = _parted(sample) if parted else _evidence(sample)
        if budget.take("\n".join(block)):
            parts += block
    rest = len(samples) - MAX_EXAMPLES
    where = md_code(f"{run_id}/{cell.id}/{ev.samples_file}")
    parts += [f"{'And ' + str(rest) + ' more; all' if rest > 0 else 'All'} samples: {where} in the results folder.",
              "", "</details>", ""]
    return parts


def _worst(spec: MetricSpec, cell: CellRow, budget: _Budget) -> list[str]:
    """One <details> block per reference of a cell: the worst places of `spec`, text around each."""
    out = []
    for w in cell_worst(cell, spec.name):
        if w.refused:
            out += [f"- {md_cell(cell.id)}: {md_cell(spec.display.label)} vs {w.word} {md_cell(w.reference)} not compared: "
                    f"{md_cell(w.refused)}", ""]
            continue
        line = f"{cell.id}: {spec.display.label} vs {w.word} {w.reference} {w.value:.3g}, worst places"
        parts = [f"<details><summary>{html_text(line)}</summary>", ""]
        for place in w.places[:MAX_EXAMPLES]:
            block = [f"{md_cell(place.get('id', '?'))} token {place.get('at')}: {place.get('value', 0):.3g}", "",
                     html_pre(f"{place.get('before', '')}⟦{place.get('here', '')}⟧{place.get('after', '')}"), ""]
            if budget.take("\n".join(block)):
                parts += block
        out += [*parts, "</details>", ""]
    return out


def details_sections(summary: RunSummary, details: Details, chars: int = MAX_DETAILS_CHARS) -> list[str]:
    """`#### Flipped questions (<label>)`, `#### <Delta label> evidence` (events, parted) and
    `#### <Label>: worst places` sections (`Shown.heading`), with their blocks, in at most `chars`
    characters of bodies (at most MAX_DETAILS_CHARS: the report's own budget may leave less)."""
    budget = _Budget(max(0, min(chars, MAX_DETAILS_CHARS)))
    cells, out = summary.cells, []
    first = sorted(cells, key=lambda cell: not cell.flags)  # cells with broken thresholds spend the budget first
    for ev, spec in with_evals(summary.specs(), summary.evals):
        how = shown(spec)
        if how is None:
            continue
        if how.section is Section.FLIPS:
            found = {cell.id: _flips(spec, ev, cell, details, budget) for cell in first}
        elif how.section is Section.EVENTS:
            found = {cell.id: _events(spec, ev, cell, details, budget, summary.run_id, how.parted) for cell in first}
        else:
            found = {cell.id: _worst(spec, cell, budget) for cell in first}
        if blocks := [line for cell in cells for line in found[cell.id]]:
            out += [f"#### {md_cell(how.heading(spec.display))}", "", *blocks]
    return out
