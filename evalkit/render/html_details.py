"""The HTML report's per-cell drill-down: one `<details>` per cell (html.py lays out the page).

Each holds the cell's status and error, engine source and SHA, timings, then per metric that asks
for details (`MetricDisplay.details`), in the summary's order (`RunSummary.specs`), drawn as
details.SHOWN says for its kind of evidence:

* `Section.FLIPS`: the questions that flipped against the baseline and the twin (ids,
  searchable), and for those that went wrong the eval's account of both sides
  (`EvalDisplay.describe_sample`): the extracted answers, the target and this cell's response;
* `Section.EVENTS`: a few of the samples where the event happened (the collapsed generations)
  with the detector's evidence, the excerpt's onset wrapped in `<mark>`; for `Evidence.PARTED`,
  a few prompts whose identical requests disagreed, the text they share before they part and
  each copy's continuation in `<mark>`;
* `Section.WORST`: per reference, the places a PAIRWISE metric was largest, the token in `<mark>`
  in the text around it, or why the eval refused to compare.

Every text goes through `esc`/`esc_block`: control characters dropped, then `html.escape(quote=True)`.
"""

from __future__ import annotations

import html
import shlex
from typing import Any

from evalkit.clean import clean, clean_block
from evalkit.evals.base import Eval, MetricSpec
from evalkit.evals.recorded import with_evals
from evalkit.redact import strip_userinfo
from evalkit.render.details import (
    Details,
    EngineFacts,
    Section,
    cell_flips,
    cell_worst,
    event_facts,
    parted_copies,
    parted_facts,
    shown,
)
from evalkit.render.engine_log import checks_text, ran_text
from evalkit.render.gpus import cell_rows
from evalkit.render.text import no_local_paths, truncate
from evalkit.verdict.summary import CellRow, RunSummary

MAX_SAMPLE_CHARS = 4_000
"""Longest model text embedded per sample (a response, an excerpt, the end of a generation)."""
MAX_FLIP_EXAMPLES = 10
"""Flipped-to-wrong questions shown with their texts, per cell and reference."""
MAX_EVENT_SAMPLES = 5
"""Event samples (collapsed generations) shown with their evidence, per cell."""
MAX_IDS = 500
"""Question ids listed per cell, reference and direction."""
TAIL_CHARS = 600
"""Characters of a collapsed generation's end shown under its evidence."""
EXCERPT_BEFORE = 50
"""Characters the detector keeps before the onset in a text excerpt (detector._analysis)."""


def esc(text: Any, limit: int = 1_000) -> str:
    """One line of text, safe anywhere in HTML (text or a quoted attribute)."""
    return html.escape(truncate(clean(text), limit), quote=True)


def esc_block(text: Any, limit: int = MAX_SAMPLE_CHARS) -> str:
    """Model text for inside `<pre>`: lines kept, capped, escaped."""
    return html.escape(truncate(clean_block(text), limit), quote=True)


def onset_split(sample: dict[str, Any]) -> tuple[str, str]:
    """The detector's excerpt as (before the onset, from the onset on).

    A token-id excerpt marks the onset with ` | `; a text excerpt without a repeated unit (soup)
    says where the onset is (``excerpt_onset``). A text excerpt keeps up to EXCERPT_BEFORE
    characters before it, so the onset is there when the repeated unit starts there; else (a loop
    that starts early) the first place where the unit starts and repeats."""
    ev = sample.get("evidence") or {}
    excerpt, unit = str(ev.get("excerpt") or ""), str(ev.get("unit_text") or "")
    if not unit and isinstance(ev.get("excerpt_onset"), int):  # a text excerpt of a soup: no unit
        return excerpt[: ev["excerpt_onset"]], excerpt[ev["excerpt_onset"] :]
    if not unit:
        before, sep, after = excerpt.partition(" | ")
        return (before, after) if sep else ("", excerpt)

    def starts(i: int) -> bool:
        rest = excerpt[i:]
        return bool(rest) and (rest.startswith(unit) or unit.startswith(rest))

    if len(excerpt) > EXCERPT_BEFORE and starts(EXCERPT_BEFORE):
        return excerpt[:EXCERPT_BEFORE], excerpt[EXCERPT_BEFORE:]
    for i in range(min(EXCERPT_BEFORE, len(excerpt))):
        if starts(i) and (excerpt[i + len(unit):].startswith(unit) or i + len(unit) >= len(excerpt)):
            return excerpt[:i], excerpt[i:]
    return "", excerpt


def marked_excerpt(sample: dict[str, Any]) -> str:
    """`<pre>` with the excerpt, the first repeated unit (text, or `period` token ids) at the onset
    wrapped in `<mark>`."""
    before, after = onset_split(sample)
    ev = sample.get("evidence") or {}
    unit = str(ev.get("unit_text") or "")
    if unit:
        width = len(unit) if after.startswith(unit) else min(len(after), 40)
    else:  # token ids: the first repeated unit is `period` ids
        width = len(" ".join(after.split(" ")[: max(1, min(int(ev.get("period") or 1), 40))]))
    return (f'<pre class="excerpt">{esc_block(before)}<mark class="onset">{esc_block(after[:width])}</mark>'
            f"{esc_block(after[width:])}</pre>")


def _id_items(ids: list[str]) -> str:
    items = "".join(f'<li data-qid="{esc(i)}">{esc(i)}</li>' for i in ids[:MAX_IDS])
    more = f"<li>… and {len(ids) - MAX_IDS} more</li>" if len(ids) > MAX_IDS else ""
    return f'<ul class="ids">{items}{more}</ul>' if ids else "<p>-</p>"


def _flip_example(ev: Eval, qid: str, cell_id: str, ref_id: str, answers: dict[str, dict[str, Any]]) -> str:
    mine = answers.get(cell_id, {}).get(qid)
    if mine is None:
        return ""
    theirs = answers.get(ref_id, {}).get(qid)
    here = ev.display.describe_sample(mine)
    there = ev.display.describe_sample(theirs)["answer"] if theirs is not None else "?"
    return (f'<div class="flip" data-qid="{esc(qid)}"><p><b>{esc(qid)}</b>: target <code>{esc(here["target"] or "", 80)}'
            f"</code>; this cell extracted <code>{esc(here['answer'])}</code>, {esc(ref_id)} <code>{esc(there)}</code> "
            f"(finish {esc(here['finish'] or '?')})</p><pre>{esc_block(here['text'] or '')}</pre></div>")


def _flips(spec: MetricSpec, ev: Eval, cell: CellRow, details: Details) -> str:
    answers = details.samples.get(ev.name, {})
    parts = []
    for f in cell_flips(cell, spec.name):
        examples = "".join(_flip_example(ev, q, cell.id, f.reference, answers) for q in f.wrong[:MAX_FLIP_EXAMPLES])
        parts.append(f'<div class="flips" data-against="{esc(f.word)}"><h4>{esc(spec.display.label)} vs {esc(f.word)} '
                     f"{esc(f.reference)}</h4><p>Right there, wrong here ({len(f.wrong)}):</p>{_id_items(f.wrong)}"
                     f"<p>Wrong there, right here ({len(f.right)}):</p>{_id_items(f.right)}{examples}</div>")
    return "".join(parts)


def _evidence(sample: dict[str, Any]) -> str:
    ev = sample.get("evidence") or {}
    out = [f'<div class="event"><p><b>{esc(sample.get("id", "?"))}</b> ({esc(sample.get("kind") or "-")}): '
           f"{esc('; '.join(event_facts(sample)))}</p><p>Around the onset (marked):</p>{marked_excerpt(sample)}"]
    if ev.get("examples"):
        out.append(f"<p>Where it fired:</p><pre>{esc_block(chr(10).join(ev['examples']))}</pre>")
    if ev.get("unit_text"):
        out.append(f"<p>Repeated unit:</p><pre>{esc_block(ev['unit_text'])}</pre>")
    if sample.get("text"):
        out.append(f"<p>End of the generated text:</p><pre>…{esc_block(str(sample['text'])[-TAIL_CHARS:])}</pre>")
    return "".join(out) + "</div>"


def _parted(sample: dict[str, Any]) -> str:
    """One disagreeing prompt: the facts, then per distinct text the shared end and, marked, its continuation."""
    parted = sample.get("parted") or {}
    variants = "".join(f"<p>{esc(parted_copies(v))}:</p><pre>…{esc_block(parted.get('before', ''))}"
                       f'<mark class="onset">{esc_block(v.get("text", ""))}</mark>…</pre>'
                       for v in parted.get("after") or [])
    return (f'<div class="event"><p><b>{esc(sample.get("id", "?"))}</b> ({esc(sample.get("kind") or "-")}): '
            f"{esc(parted_facts(sample))}</p>{variants}</div>")


def _events(spec: MetricSpec, ev: Eval, cell: CellRow, details: Details, run_id: str, parted: bool) -> str:
    samples = details.events.get(spec.name, {}).get(cell.id) or []
    m = cell.metrics
    if not samples and not m.get(spec.count_metric or ""):
        return ""
    words = spec.display.event_words or f"samples {spec.event_field}"
    rest = len(samples) - MAX_EVENT_SAMPLES
    where = f"{run_id}/{cell.id}/{ev.samples_file}"
    show = _parted if parted else _evidence
    return (f'<div class="events"><h4>{esc(m.get(spec.count_metric or ""))} of {esc(m.get(spec.n_metric or ""))} '
            f"{esc(words)}</h4>{''.join(show(s) for s in samples[:MAX_EVENT_SAMPLES])}"
            f"<p>{'And ' + str(rest) + ' more; all' if rest > 0 else 'All'} samples: <code>{esc(where)}</code> "
            "in the results folder.</p></div>")


def _place(place: dict[str, Any]) -> str:
    """One worst place: sample id, position, value, and the text around it with the token marked."""
    value = place.get("value")
    return (f"<p><b>{esc(place.get('id', '?'))}</b> token {esc(place.get('at'))}: "
            f"{esc('-' if value is None else f'{value:.3g}')}</p><pre>{esc_block(place.get('before', ''))}"
            f"<mark class=\"onset\">{esc_block(place.get('here', ''))}</mark>{esc_block(place.get('after', ''))}</pre>")


def _worst(spec: MetricSpec, cell: CellRow) -> str:
    parts = []
    for w in cell_worst(cell, spec.name):
        head = f"{esc(spec.display.label)} vs {esc(w.word)} {esc(w.reference)}"
        if w.refused:
            parts.append(f'<div class="worst"><h4>{head}: not compared</h4><p>{esc(w.refused)}</p></div>')
            continue
        places = "".join(_place(p) for p in w.places[:MAX_EVENT_SAMPLES])
        parts.append(f'<div class="worst"><h4>{head} {esc(f"{w.value:.3g}")}: worst places</h4>{places}</div>')
    return "".join(parts)


def _facts(cell: CellRow, engine: EngineFacts) -> str:
    rows = [("status", cell.status)]
    if cell.error:
        rows.append(("error", cell.error))
    if src := cell.source:
        rows.append(("engine source", f"{strip_userinfo(src.repo or '')} @ {src.ref or '?'} → {src.sha or '?'}"))
    launch = engine.launch or {}
    if launch.get("argv"):
        rows.append(("engine argv", shlex.join(str(a) for a in launch["argv"])))
    if launch.get("env"):
        rows.append(("engine env", " ".join(f"{k}={shlex.quote(str(v))}" for k, v in launch["env"].items())))
    if launch.get("base_url"):
        rows.append(("server", f"{launch['base_url']} ({launch.get('note') or 'external'})"))
    if found := cell.imports:
        said = {True: "inside the source tree", False: f"OUTSIDE the source tree {found.tree}",
                None: "no source tree"}[found.inside]
        rows.append(("engine imports", f"{found.package} from {found.origin or 'nowhere'} ({said})"))
    if ran := ran_text(cell.ran_as):
        rows.append(("engine ran (its log)", ran))
    elif engine.effective_mode:
        rows.append(("effective mode", engine.effective_mode))
    if checks := checks_text(cell.log_checks):
        rows.append(("log checks", checks))
    if cell.engine_version:
        rows.append(("engine version", cell.engine_version))
    rows += cell_rows(engine.gpu)
    if timings := cell.timings:
        rows.append(("timings", ", ".join(f"{k} {v}" for k, v in timings.items())))
    if engine.log_tail:
        rows.append(("engine log (end)", engine.log_tail))
    blocks = ("error", "engine argv", "engine log (end)")
    rows = [(k, no_local_paths(v)) for k, v in rows]  # a page is shared: no /home/alice/...
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc_block(v, 4_000) if k in blocks else esc(v)}</td></tr>"
                   for k, v in rows)
    return f'<table class="facts">{body}</table>'


def cell_sections(summary: RunSummary, details: Details, attrs: dict[str, str]) -> str:
    """One `<details>` per cell, in run order, open where a failing threshold broke; `attrs[cell
    id]` are its filter attributes."""
    out = []
    for cell in summary.cells:
        blocks = []
        for ev, spec in with_evals(summary.specs(), summary.evals):
            how = shown(spec)
            if how is None:
                continue
            if how.section is Section.FLIPS:
                blocks.append(_flips(spec, ev, cell, details))
            elif how.section is Section.EVENTS:
                blocks.append(_events(spec, ev, cell, details, summary.run_id, how.parted))
            else:
                blocks.append(_worst(spec, cell))
        failed = any(f.action == "fail" for f in cell.flags)
        flagged = ' <span class="mark">✗</span>' if failed else ""
        out.append(f'<details class="cell" id="cell-{esc(cell.id)}" {attrs[cell.id]}{" open" if failed else ""}>'
                   f"<summary><b>{esc(cell.id)}</b> · {esc(cell.status)}{flagged}</summary>"
                   f"{_facts(cell, details.engines.get(cell.id, EngineFacts()))}{''.join(blocks)}</details>")
    return "\n".join(out)
