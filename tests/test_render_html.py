"""The HTML report (render/html.py): the markdown's numbers, hostile text only escaped, no network,
a strict CSP with the page's own script hash, capped texts, and `-o FILE` on report and compare.

Fast, no browser (tests/test_html_browser.py loads the page in Chromium)."""

from __future__ import annotations

import base64
import hashlib
import html
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.errors import EXIT_CELL_FAILED
from evalkit.render import render, render_compare
from evalkit.render.html import SCRIPT
from evalkit.render.html_details import MAX_SAMPLE_CHARS, marked_excerpt, onset_split
from evalkit.verdict.compare import compare_runs
from tests.helpers.runs import HOSTILE, CellSpec, loop_text, rerun, summary_of, tables, write_run

BIG_LOOP = "loop " * 200_000
"""A megabyte of one repeated word: must not reach the page whole."""


class Page(HTMLParser):
    """Every element with its attributes, the scripts' texts, comments and the tables' cell texts
    (without the threshold marks, which are spans of class `mark`)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.comments: list[str] = []
        self.tables: list[dict[str, Any]] = []
        self._stack: list[str] = []
        self._cell: list[str] | None = None
        self._mark = 0
        self._script: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.elements.append((tag, a))
        if tag == "script":
            self._script = []
        elif tag == "table":
            self.tables.append({"class": a.get("class"), "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th"):
            self._cell, self._marked = [], a.get("class") or ""
        elif tag == "span" and a.get("class") == "mark":
            self._mark += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.scripts.append("".join(self._script))
            self._script = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1]["rows"][-1].append(("".join(self._cell), self._marked))
            self._cell = None
        elif tag == "span" and self._mark:
            self._mark -= 1

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script.append(data)
        elif self._cell is not None and not self._mark:
            self._cell.append(data)

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def table(self, cls: str) -> list[list[tuple[str, str]]]:
        return [t["rows"] for t in self.tables if t["class"] == cls][0]


def md_plain(cell: str) -> tuple[str, str]:
    """A markdown table cell as (its text, its mark): md_cell's escapes undone, bold and ❌/⚠️ removed."""
    mark = "fail" if cell.endswith(" ❌") else "warn" if cell.endswith(" ⚠️") else ""
    cell = cell.removesuffix(" ❌").removesuffix(" ⚠️")
    if mark == "fail":
        cell = cell.removeprefix("**").removesuffix("**")
    return html.unescape(re.sub(r"\\(.)", r"\1", cell)).replace("\u2060", ""), mark


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """2 x 2: dp8-fixoff flips ten questions (one answered with HOSTILE text, one with a megabyte
    loop: 10 of 20 is shown below the min of 0.8), collapses (a loop of HOSTILE-ish text) and fails;
    dp8-fixon errors with a hostile message."""
    healthy = CellSpec(long_texts=["fine prose"] * 2, source_sha="abc123")
    cells = {"tp8-fixon": healthy, "tp8-fixoff": healthy,
             "dp8-fixon": CellSpec(status="error", error=HOSTILE),
             "dp8-fixoff": CellSpec(right=10, responses={16: HOSTILE, 17: BIG_LOOP}, source_sha="def456",
                                    long_texts=[loop_text("again <script>document.title='pwned'</script> "),
                                                loop_text("ab ", prefix=HOSTILE), "fine prose"])}
    run_path, config = write_run(tmp_path / "results", "html-run", cells)
    return run_path, summary_of(run_path, config)


def test_pivots_and_matrix_show_the_markdown_texts_and_marks(run: tuple[Path, dict]) -> None:
    run_path, summary = run
    page = Page(render(summary, "html", run_path) or "")
    md = tables(render(summary, "markdown", run_path) or "")
    html_tables = [t["rows"] for t in page.tables if t["class"] in ("pivot", "matrix")]
    assert len(html_tables) == len(md.bodies) - 1 == 3  # two pivots, the matrix (and the checks, compared below)
    for rows, header, body in zip(html_tables, md.headers, md.bodies):
        assert [text for text, _ in rows[0]] == [md_plain(h)[0] for h in header]
        assert [[(text, mark) for text, mark in row] for row in rows[1:]] == [[md_plain(c) for c in line] for line in body]
    (checks,) = [t["rows"] for t in page.tables if t["class"] == "checks"]
    assert [text for text, _ in checks[0]] == [md_plain(h)[0] for h in md.headers[-1]]
    assert [[text for text, _ in row] for row in checks[1:]] == [[md_plain(c)[0] for c in line] for line in md.bodies[-1]]
    matrix = page.table("matrix")
    fixoff = next(row for row in matrix if row[0][0] == "dp8-fixoff")
    assert fixoff[0][1] == "fail" and "0.500" in fixoff[3][0] and fixoff[3][1] == "fail"


def test_hostile_text_appears_only_escaped(run: tuple[Path, dict]) -> None:
    run_path, summary = run
    text = render(summary, "html", run_path) or ""
    page = Page(text)
    assert page.scripts == [SCRIPT]  # the page's own script, nothing planted
    assert not [(tag, k) for tag, attrs in page.elements for k in attrs if k.lower().startswith("on")]
    assert not page.comments  # `<!-- x -->` in model output stays text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;/details&gt; &lt;/pre&gt;" in text
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in text
    assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e]", text)  # ANSI/OSC escapes, bidi override
    assert "hunter2" not in text and "sk-cmd-secret" not in text  # clone credential, --api-key


def test_no_network_reference_and_a_csp_with_the_scripts_own_hash(run: tuple[Path, dict]) -> None:
    run_path, summary = run
    text = render(summary, "html", run_path) or ""
    page = Page(text)
    assert not [(tag, k, v) for tag, attrs in page.elements for k, v in attrs.items()
                if k in ("src", "href", "action", "srcset", "poster", "data") or "http" in (v or "").lower()]
    assert "url(" not in text and "@import" not in text and "<link" not in text
    csp = [a["content"] for tag, a in page.elements if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    digest = base64.b64encode(hashlib.sha256(page.scripts[0].encode()).digest()).decode()
    assert csp == [f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
                   "base-uri 'none'; form-action 'none'"]
    assert text.index("Content-Security-Policy") < text.index("<script>")


def test_drill_down_flips_onset_mark_status_source_timings(run: tuple[Path, dict]) -> None:
    run_path, summary = run
    text = render(summary, "html", run_path) or ""
    cell = text[text.index('<details class="cell" id="cell-dp8-fixoff"'):]
    cell = cell[: cell.index("</details>")]
    assert " open>" in cell.split("\n", 1)[0] or cell.split(">", 1)[0].endswith(" open")
    for qid in ("test-15", "test-16", "test-19"):
        assert f'<li data-qid="{qid}">{qid}</li>' in cell and f'<div class="flip" data-qid="{qid}">' in cell
    assert "vs baseline tp8-fixon" in cell and "vs twin" not in cell  # the twin dp8-fixon errored
    assert '<mark class="onset"> again &lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;</mark>' in cell
    assert "def456" in cell and "total_s 1.5" in cell and "html-run/dp8-fixoff/repetition.samples.jsonl" in cell
    error_cell = text[text.index('id="cell-dp8-fixon"'):]
    assert "&lt;script&gt;alert(1)" in error_cell[: error_cell.index("</details>")]


def test_long_texts_are_capped(run: tuple[Path, dict]) -> None:
    run_path, summary = run
    text = render(summary, "html", run_path) or ""
    assert len(text) < 200_000  # a megabyte of loop in one response
    longest = max(len(m) for m in re.findall(r"<pre>(.*?)</pre>", text, flags=re.S))
    assert MAX_SAMPLE_CHARS - 10 < longest <= MAX_SAMPLE_CHARS * 6  # capped before escaping (&lt; is 4 chars)
    assert "white-space:pre-wrap;overflow-wrap:anywhere" in text


def test_onset_split_of_text_and_token_id_excerpts() -> None:
    unit = "again "
    text_sample = {"evidence": {"excerpt": "x" * 50 + unit * 20, "unit_text": unit}}
    assert onset_split(text_sample) == ("x" * 50, unit * 20)
    early = {"evidence": {"excerpt": "Hi. " + unit * 30, "unit_text": unit}}
    assert onset_split(early) == ("Hi. ", unit * 30)
    ids = {"evidence": {"excerpt": "1 2 3 | 7 8 7 8", "unit_text": None}}
    assert onset_split(ids) == ("1 2 3", "7 8 7 8")
    ids["evidence"]["period"] = 2
    assert marked_excerpt(ids) == '<pre class="excerpt">1 2 3<mark class="onset">7 8</mark> 7 8</pre>'


def test_filter_attributes_name_status_and_flags(run: tuple[Path, dict]) -> None:
    run_path, summary = run
    page = Page(render(summary, "html", run_path) or "")
    rows = {a["data-cell"]: a for tag, a in page.elements if tag == "tr" and "data-cell" in a}
    assert rows["dp8-fixoff"]["data-flagged"] == "1" and rows["dp8-fixoff"]["data-search"] == "dp8-fixoff dp8 fixoff"
    assert rows["dp8-fixon"]["data-status"] == "error" and rows["tp8-fixon"]["data-flagged"] == "0"
    assert {a.get("id") for _, a in page.elements} >= {"filter-cell", "filter-status", "filter-qid"}


def test_compare_shows_the_markdown_compare_texts(run: tuple[Path, dict]) -> None:
    run_path, _ = run
    result = compare_runs(run_path, rerun(run_path, "again"))
    page = Page(render_compare(result, "html") or "")
    md = tables(render_compare(result, "markdown") or "")
    rows = page.table("compare")
    assert [t for t, _ in rows[0]] == [md_plain(h)[0] for h in md.headers[0]]
    assert [[t for t, _ in row] for row in rows[1:]] == [[md_plain(c)[0] for c in line] for line in md.bodies[0]]
    assert page.scripts == [SCRIPT]


def test_cli_report_and_compare_write_the_file_and_print_its_path(run: tuple[Path, dict], tmp_path: Path) -> None:
    run_path, summary = run
    out = tmp_path / "out" / "report.html"
    result = CliRunner().invoke(main, ["report", str(run_path), "--format", "html", "-o", str(out)])
    # the path, then the headline; the run's exit code (its dp8-fixon failed to run: 3, as the matrix)
    assert (result.exit_code, result.stdout.splitlines()[0]) == (summary["exit_code"], str(out))
    assert out.read_text(encoding="utf-8") == render(summary, "html", run_path)
    cmp = tmp_path / "compare.html"
    result = CliRunner().invoke(main, ["compare", str(run_path), str(rerun(run_path, "again")), "--format", "html",
                                       "--output", str(cmp)])
    # the run against a copy of itself: nothing moved, but its dp8-fixon failed to run (in B too): exit 3, as the matrix
    assert (result.exit_code, result.output) == (EXIT_CELL_FAILED, f"{cmp}\n") and "evalkit compare" in cmp.read_text()
    md = tmp_path / "r.md"
    result = CliRunner().invoke(main, ["report", str(run_path), "--format", "markdown", "-o", str(md)])
    assert result.exit_code == summary["exit_code"] and md.read_text() == render(summary, "markdown", run_path)
    result = CliRunner().invoke(main, ["report", str(run_path), "-o", str(tmp_path / "t.txt")])
    assert result.exit_code == 2 and "needs a document format" in result.output


def test_drill_down_shows_the_engine_argv_env_and_log_tail_escaped(run: tuple[Path, dict]) -> None:
    from evalkit.render import render
    from evalkit.store import read_json, write_json

    run_path, summary = run
    cell_id = summary["cells"][0]["id"]
    record = read_json(run_path / cell_id / "cell.json")
    record["launch"] = {"argv": ["python3", "-m", "evalkit.sim", "--api-key", "***", "--note", "<b>x</b>"],
                        "env": {"HF_TOKEN": "***", "ATOM_MOE_GU_ITLV": "1"}, "host": "127.0.0.1", "port": 1}
    write_json(run_path / cell_id / "cell.json", record)
    (run_path / cell_id / "engine.log").write_text("".join(f"line {i}\n" for i in range(40)) + "<script>bad()</script>\n")
    page = render(summary, "html", run_path) or ""
    assert "python3 -m evalkit.sim --api-key &#x27;***&#x27; --note &#x27;&lt;b&gt;x&lt;/b&gt;&#x27;" in page
    assert "HF_TOKEN=&#x27;***&#x27; ATOM_MOE_GU_ITLV=1" in page
    assert "line 39" in page and "line 20\n" not in page  # the last 20 lines only
    assert "&lt;script&gt;bad()&lt;/script&gt;" in page and "<script>bad()" not in page
