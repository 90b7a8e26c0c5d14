"""A self-contained HTML page: a run's report, and two runs compared (`--format html -o FILE`).

One file, no network: inline CSS, one inline script (the filters: cell id or axis value, status,
question id; a link can preset them as `#cell=dp8&status=flagged&qid=...`), no external reference. Top to
bottom: title, run facts, the simulated-engine note, the verdict, the pivots, the table of all
cells with broken thresholds marked, the legend, the thresholds, the filters, a `<details>` per
cell (html_details.py) and the command that reproduces the run. The numbers are the table
model's texts (table.py, header.py, compare_table.py), the same as the terminal and markdown.

Model text is hostile: every text is escaped (control characters dropped, then
`html.escape(quote=True)`), and a Content-Security-Policy meta allows only the page's own script
(by its SHA-256, computed here), so even an escaping bug could not run injected script.

Small for large runs: summary.json holds numbers and ids; only the flipped questions (ids, and
the texts of at most html_details.MAX_FLIP_EXAMPLES per cell and reference) and at most
MAX_EVENT_SAMPLES collapsed generations per cell are embedded, each text capped at
MAX_SAMPLE_CHARS; the rest is pointed to by its samples file in the run folder.
"""

from __future__ import annotations

import base64
import hashlib
import shlex

from evalkit.redact import redact_argv
from evalkit.render import forest
from evalkit.render.checks import check_lines, check_table
from evalkit.render.compare_table import (
    compare_columns,
    compare_legend,
    compare_rows,
    compare_title,
    flip_specs,
    flips,
    flips_suffix,
    run_facts,
)
from evalkit.render.details import Details
from evalkit.render.header import SIM_NOTE, facts, legend, sources, title, verdict_line
from evalkit.render.headline import headline
from evalkit.render.html_details import cell_sections, esc
from evalkit.render.table import Pivot, columns, pivots, table_rows
from evalkit.render.text import no_local_paths
from evalkit.verdict.summary import CellRow, RunComparison, RunSummary

MARKS = {"fail": "✗", "warn": "⚠"}
"""Marks of a broken threshold (plain symbols: an emoji font may be missing offline)."""

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;color:#1b1f24;max-width:1600px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}h4{margin:.8em 0 .3em}
table{border-collapse:collapse;margin:.4em 0}th,td{border:1px solid #ccd;padding:.2em .5em;text-align:left;
vertical-align:top}th{background:#f1f3f6}td.fail{background:#fde2e1;font-weight:bold}td.warn{background:#fff3cd}
.mark{margin-left:.3em}.note{background:#fff3cd;padding:.4em .7em;border-left:4px solid #d4a72c}
.verdict{font-size:1.1em;font-weight:bold;padding:.4em .7em}.verdict.ok{background:#dcf5e3}
.verdict.bad{background:#fde2e1}pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f8fa;
padding:.5em;max-height:30em;overflow:auto;border:1px solid #e1e4e8}mark.onset{background:#ffd24d;outline:1px solid #b58900}
details.cell{border:1px solid #ccd;margin:.4em 0;padding:.3em .6em}details.cell>summary{cursor:pointer}
ul.ids{display:flex;flex-wrap:wrap;gap:.3em;list-style:none;padding:0;margin:.2em 0}
ul.ids li{background:#eef;padding:0 .4em;border-radius:3px}.filters{margin:1em 0;display:flex;gap:1em}
.filters input,.filters select{font:inherit;padding:.2em .4em}[hidden]{display:none!important}
code{overflow-wrap:anywhere}figure.forest{margin:.4em 0}figure.forest svg{width:100%;max-width:1000px;height:auto}
table.matrix{display:block;overflow-x:auto;max-width:100%}
"""

SCRIPT = """
(function () {
  var q = document.getElementById('filter-cell'), st = document.getElementById('filter-status');
  var qid = document.getElementById('filter-qid');
  function keep(el) {
    var text = (q && q.value || '').toLowerCase(), want = st ? st.value : '';
    var okText = !text || (el.getAttribute('data-search') || '').indexOf(text) >= 0;
    var status = el.getAttribute('data-status'), flagged = el.getAttribute('data-flagged') === '1';
    var okStatus = !want || (want === 'flagged' ? flagged : want === 'ok' ? status === 'ok' : status !== 'ok');
    return okText && okStatus;
  }
  function apply() {
    document.querySelectorAll('[data-cell]').forEach(function (el) { el.hidden = !keep(el); });
    var id = (qid && qid.value || '').toLowerCase();
    document.querySelectorAll('[data-qid]').forEach(function (el) {
      el.hidden = !!id && el.getAttribute('data-qid').toLowerCase().indexOf(id) < 0;
    });
    if (id) {
      document.querySelectorAll('details.cell').forEach(function (d) {
        if (d.querySelector('[data-qid]:not([hidden])')) { d.open = true; }
      });
    }
  }
  [q, st, qid].forEach(function (el) { if (el) { el.addEventListener('input', apply); } });
  // A link may preset the filters: report.html#cell=dp8&status=flagged&qid=gsm8k-12
  new URLSearchParams(location.hash.slice(1)).forEach(function (value, key) {
    var el = {cell: q, status: st, qid: qid}[key];
    if (el) { el.value = value; }
  });
  apply();
  document.documentElement.setAttribute('data-filters', 'ready');
})();
"""


def script_hash(script: str = SCRIPT) -> str:
    """`sha256-...` of the inline script, as a CSP source."""
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def page(heading: str, body: str) -> str:
    """The whole document: CSP first in <head>, inline CSS, the body, the one script at the end."""
    csp = (f"default-src 'none'; style-src 'unsafe-inline'; script-src '{script_hash()}'; "
           "base-uri 'none'; form-action 'none'")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(heading)}</title>\n<style>{CSS}</style></head>\n<body>\n{body}\n"
            f"<script>{SCRIPT}</script>\n</body></html>\n")


def _td(text: str, mark: str = "") -> str:
    sign = f'<span class="mark">{MARKS[mark]}</span>' if mark else ""
    return f'<td class="{mark}">{esc(text)}{sign}</td>' if mark else f"<td>{esc(text)}</td>"


def _pivot(p: Pivot) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in [p.corner, *p.columns])
    body = "".join("<tr>" + "".join(_td(t, m) for t, m in zip(line, marks)) + "</tr>" for line, marks in zip(p.rows, p.marks))
    return f'<h2>{esc(p.title)}</h2>\n<table class="pivot"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def filter_attrs(cell: CellRow) -> str:
    """The attributes the filters read: data-cell, data-status, data-flagged, data-search."""
    search = " ".join([cell.id, *map(str, cell.axes.values())]).lower()
    flagged = "1" if cell.flags else "0"
    return (f'data-cell="{esc(cell.id)}" data-status="{esc(cell.status)}" data-flagged="{flagged}" '
            f'data-search="{esc(search)}"')


def _matrix(summary: RunSummary, attrs: dict[str, str]) -> str:
    cols = columns(summary.specs(), summary.cells)
    head = "".join(f"<th>{esc(c.header)}</th>" for c in cols)
    body = "".join(f"<tr {attrs[row.cell_id]}>" + "".join(_td(row.texts[c.key], row.mark(c.key)) for c in cols) + "</tr>"
                   for row in table_rows(summary))
    return f'<table class="matrix"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _checks(summary: RunSummary | RunComparison) -> list[str]:
    """Checks: a line per threshold, and the table of cells x thresholds (INCONCLUSIVE marked ⚠)."""
    lines = check_lines(summary)
    if not lines:
        return []
    headers, rows, marks = check_table(summary)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_td(t, m) for t, m in zip(row, mark_row)) + "</tr>" for row, mark_row in zip(rows, marks))
    return ["<h2>Checks: PASS, FAIL or INCONCLUSIVE</h2>", '<ul class="checks">' + "".join(f"<li>{esc(line)}</li>" for line in lines)
            + "</ul>", f'<table class="checks"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>']


def _flags(summary: RunSummary | RunComparison) -> list[str]:
    """Thresholds: each broken (FAIL) or warned threshold's message, a run's or a comparison's."""
    flags = [f for c in summary.cells for f in c.flags]
    if not flags:
        return []
    return ["<h2>Thresholds</h2><ul class=\"thresholds\">" + "".join(
        f'<li class="{esc(f.action)}">{MARKS.get(f.action, "")} <b>{esc(f.action.upper())}</b> '
        f"{esc(f.message)}</li>" for f in flags) + "</ul>"]


def _verdict(summary: RunSummary | RunComparison, whose: str = "") -> str:
    """The headline (render/headline.py), the page's first line, with the threshold tallies under it."""
    ok, words = verdict_line(summary)
    return (f'<p class="verdict {"ok" if ok else "bad"}">{"✔" if ok else "✗"} {esc(whose + headline(summary))}</p>'
            f'<p class="tallies">{esc(whose + words)}</p>')


FILTERS = ('<div class="filters"><label>Cell or axis value <input id="filter-cell" type="search"></label>'
           '<label>Status <select id="filter-status"><option value="">all</option><option value="ok">ok</option>'
           '<option value="error">error</option><option value="flagged">flagged</option></select></label>'
           '<label>Question id <input id="filter-qid" type="search"></label></div>')


def report(summary: RunSummary, details: Details) -> str:
    """The run as one HTML page: facts, verdict, pivots, all cells, thresholds, drill-downs."""
    attrs = {cell.id: filter_attrs(cell) for cell in summary.cells}
    heading = title(summary)
    parts = [_verdict(summary), f"<h1>{esc(heading)}</h1>", f'<p class="facts">{esc(" · ".join(facts(summary, details.run)))}</p>']
    srcs = sources(summary)
    if srcs:
        parts.append("<ul class=\"sources\">" + "".join(
            f"<li>engine source <code>{esc(s.repo)}</code> @ <code>{esc(s.ref)}</code> → "
            f"<code>{esc(s.sha or '?')}</code>: {esc(', '.join(s.cells))}</li>" for s in srcs) + "</ul>")
    if summary.simulated:
        parts.append(f'<p class="note">{esc(SIM_NOTE)}</p>')
    parts += [_pivot(p) for p in pivots(summary)]
    if plot := forest.svg(summary):
        parts += ["<h2>Differences</h2>", f'<figure class="forest">{plot}</figure>']
    parts += ["<h2>All cells</h2>", FILTERS, _matrix(summary, attrs), f'<p class="legend">{esc(legend(summary))}</p>']
    parts += _checks(summary) + _flags(summary)
    parts += ["<h2>Cells</h2>", cell_sections(summary, details, attrs)]
    if summary.command:
        command = shlex.join(redact_argv(no_local_paths(str(a)) for a in summary.command))
        parts.append(f"<h2>Reproduce</h2><pre>{esc(command, 4_000)}</pre>")
    return page(heading, "\n".join(parts))


def _id_items(ids: list[str]) -> str:
    """Question ids as list items, so a reader can find each in the samples; a dash when none."""
    return "".join(f'<li data-qid="{esc(i)}">{esc(i)}</li>' for i in ids) or "<li>-</li>"


def comparison(result: RunComparison) -> str:
    """The compare table as one HTML page, B's verdict against A (its checks, its broken
    thresholds), and each cell's flipped question ids folded."""
    heading = compare_title(result)
    parts = [_verdict(result, "B against A: "), f"<h1>{esc(heading)}</h1>",
             f"<ul><li>A: {esc(run_facts(result.a))}</li><li>B: {esc(run_facts(result.b))}</li></ul>"]
    if result.a.simulated or result.b.simulated:
        parts.append(f'<p class="note">{esc(SIM_NOTE)}</p>')
    specs = result.specs()
    cols = compare_columns(specs)
    head = "".join(f"<th>{esc(c.header)}</th>" for c in cols)
    body = "".join(f'<tr data-cell="{esc(row.id)}" data-status="{esc(row.status_b or "")}" data-flagged="{1 if row.flags else 0}" '
                   f'data-search="{esc(row.id.lower())}">' + "".join(_td(texts[c.key]) for c in cols) + "</tr>"
                   for row, texts in zip(result.cells, compare_rows(result)))
    parts += [FILTERS, f'<table class="compare"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>',
              f'<p class="legend">{esc(compare_legend(result))}</p>']
    parts += [*_checks(result), *_flags(result)]
    for row in result.cells:
        for spec in flip_specs(specs):
            paired = flips(row, spec)
            if not paired or not (paired.flipped_to_wrong or paired.flipped_to_right):
                continue
            wrong, right = paired.flipped_to_wrong, paired.flipped_to_right
            parts.append(f'<details class="cell"><summary>{esc(row.id)}: {len(wrong)} to wrong, {len(right)} '
                         f"to right{esc(flips_suffix(spec, specs))}</summary><p>Right in A, wrong in B:</p>"
                         f'<ul class="ids">{_id_items(wrong)}</ul><p>Wrong in A, right in B:</p>'
                         f'<ul class="ids">{_id_items(right)}</ul>'
                         "</details>")
    return page(heading, "\n".join(parts))
