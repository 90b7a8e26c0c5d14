"""The markdown, terminal and CSV reports on hand-made runs: what a PR reader sees, and that model
output cannot change it."""

from __future__ import annotations

import io
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from evalkit.clean import clean, clean_block
from evalkit.evals import registry
from evalkit.evals.recorded import specs_of
from evalkit.render import render
from evalkit.render.table import columns
from evalkit.render.text import html_pre, md_cell, md_code, md_fence
from tests.helpers.runs import HOSTILE, CellSpec, gfm, loop_text, summary_of, tables, write_run

HEADERS = [c.header for c in columns(registry.builtins().metrics())]
"""The matrix table's headers of a run without divergence or lm-eval tasks (the evals' fixed metrics)."""


class _Html(HTMLParser):
    """Counts elements and collects the text of every <pre> and <summary> in rendered HTML."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.starts: dict[str, int] = {}
        self.ends: dict[str, int] = {}
        self.pre: list[str] = []
        self.summaries: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.starts[tag] = self.starts.get(tag, 0) + 1
        self._in.append(tag)
        if tag == "pre":
            self.pre.append("")
        if tag == "summary":
            self.summaries.append("")

    def handle_endtag(self, tag: str) -> None:
        self.ends[tag] = self.ends.get(tag, 0) + 1
        if tag == "pre" and self.pre[-1].startswith("\n"):
            self.pre[-1] = self.pre[-1][1:]  # browsers drop the newline right after <pre> (HTML spec)
        if tag in self._in:
            del self._in[len(self._in) - 1 - self._in[::-1].index(tag):]

    def handle_data(self, data: str) -> None:
        if "pre" in self._in:
            self.pre[-1] += data
        if "summary" in self._in:
            self.summaries[-1] += data


def rendered(markdown: str) -> _Html:
    parser = _Html()
    parser.feed(gfm().render(markdown))
    return parser


@pytest.fixture
def hostile_run(tmp_path: Path) -> tuple[Path, dict]:
    """A 2 x 2 matrix whose fix-off DP cell flips questions with hostile answers, collapses into a
    hostile loop and whose other fix-off cell failed with a hostile error message."""
    cells = {
        "tp8-fixon": CellSpec(right=19, long_texts=["fine prose " + str(i) for i in range(4)], source_sha="a" * 40),
        "tp8-fixoff": CellSpec(status="error", error=HOSTILE, source_sha="b" * 40),
        "dp8-fixon": CellSpec(right=19, long_texts=["fine prose " + str(i) for i in range(4)], source_sha="a" * 40),
        # 10 of 20: shown below the min of 0.8 (exact binomial p 0.0026), 9 flips against its twin
        "dp8-fixoff": CellSpec(right=10, responses={12: HOSTILE, 13: HOSTILE}, source_sha="b" * 40,
                               long_texts=[loop_text(HOSTILE[:60]), loop_text("| </details> `` <b>"), "fine", "ok"]),
    }
    run_path, config = write_run(tmp_path / "results", "run-hostile", cells)
    return run_path, summary_of(run_path, config)


# --- escaping primitives ------------------------------------------------------------------------


def test_md_cell_keeps_a_table_cell_one_cell() -> None:
    escaped = md_cell(HOSTILE)
    assert "\n" not in escaped and "\r" not in escaped and "\x1b" not in escaped and "\u202e" not in escaped
    assert "<" not in escaped and ">" not in escaped
    assert all(escaped[i - 1] == "\\" for i, c in enumerate(escaped) if c in "|`")
    (row,) = tables(f"| a | b |\n|---|---|\n| {escaped} | x |\n").bodies[0]
    assert len(row) == 2 and row[1] == "x"
    assert "@someone" not in escaped  # GitHub would notify that user


def test_clean_drops_terminal_sequences_not_their_neighbours() -> None:
    assert clean("\x1b[1;31mred\x1b[0m \x1b]8;;http://x\x07link\x1b]8;;\x07 bell\x07") == "red link bell"


@pytest.mark.parametrize("text", ["plain", "a ` b", "``x``", "`", "ends with `", " x "])
def test_code_span_and_fence_cannot_be_closed_by_their_content(text: str) -> None:
    tokens = gfm().parseInline(md_code(text))[0].children
    assert [t.type for t in tokens] == ["code_inline"] and tokens[0].content == text
    fenced = gfm().parse(md_fence(text + "\n```\n````\nafter"))
    assert [t.type for t in fenced] == ["fence"] and fenced[0].content.endswith("after\n")


def test_html_pre_round_trips_the_text_minus_control_sequences() -> None:
    html = rendered(html_pre(HOSTILE, limit=10_000))
    assert html.starts == {"pre": 1} and html.ends == {"pre": 1}
    assert html.pre == [clean_block(HOSTILE)]


# --- the markdown report -------------------------------------------------------------------------


def test_matrix_table_has_one_row_per_cell_and_the_documented_columns(hostile_run: tuple[Path, dict]) -> None:
    run_path, summary = hostile_run
    md = render(summary, "markdown", run_path)
    found = tables(md)
    matrix = found.headers.index(HEADERS)
    body = found.bodies[matrix]
    assert [row[0].split(" ")[0].strip("*") for row in body] == ["tp8-fixon", "tp8-fixoff", "dp8-fixon", "dp8-fixoff"]
    assert all(len(row) == len(HEADERS) for row in body)


def test_hostile_output_cannot_break_the_table_or_the_details(hostile_run: tuple[Path, dict]) -> None:
    run_path, summary = hostile_run
    md = render(summary, "markdown", run_path)
    html = rendered(md)
    assert "script" not in html.starts and "\x1b" not in md and "\u202e" not in md
    # the fold under the paste and, in it, every check; dp8-fixoff's flips and its collapse evidence
    assert html.starts["details"] == html.ends["details"] == 4
    assert html.starts["summary"] == 4
    assert html.starts["pre"] == html.ends["pre"]
    assert html.starts.get("table") == html.ends.get("table") == 4  # two pivots, the matrix and the checks
    # The reader sees the model's words, minus control sequences, exactly as written.
    assert clean_block(HOSTILE) in html.pre
    assert any("</pre> <script>" in text for text in html.pre)  # from the loop evidence
    # The failed cell's hostile error message stays inside its status cell.
    body = tables(md).bodies[tables(md).headers.index(HEADERS)]
    assert all(len(row) == len(HEADERS) for row in body)
    status = gfm().renderInline(body[1][1])
    assert status.startswith("error: a | b ` c ``` d &lt;/details&gt; &lt;/pre&gt; &lt;script&gt;")


def test_title_names_model_engine_source_shas_and_date(hostile_run: tuple[Path, dict]) -> None:
    _, summary = hostile_run
    first = render(summary, "markdown").splitlines()[2]  # under the headline
    assert first.startswith("<sub>evalkit · sim/test-model on sim · ")
    assert "aaaaaaaaaaaa (fix=fixon)" in first and "bbbbbbbbbbbb (fix=fixoff)" in first
    assert "2026-12-03 02:00 UTC · run " in first
    assert "hunter2" not in render(summary, "markdown")  # a clone URL's credential never reaches the PR


def test_broken_thresholds_are_bold_with_a_marker_in_their_own_column(hostile_run: tuple[Path, dict]) -> None:
    _, summary = hostile_run
    body = tables(render(summary, "markdown")).bodies[tables(render(summary, "markdown")).headers.index(HEADERS)]
    dp8_off = dict(zip(HEADERS, body[3]))
    assert dp8_off["cell"] == "**dp8-fixoff** ❌"
    assert dp8_off["GSM8K flexible (95% CI)"].startswith("**0.500") and dp8_off["GSM8K flexible (95% CI)"].endswith("❌")
    assert dp8_off["Δ flexible vs twin"] == "**-45.0 (p=0.0039)** ❌"
    assert dp8_off["Δ collapse vs baseline"].endswith("⚠️") and "**" not in dp8_off["Δ collapse vs baseline"]
    assert dict(zip(HEADERS, body[2]))["cell"] == "dp8-fixon"  # healthy rows carry no marker


def test_pivot_puts_the_ab_axis_in_columns_with_the_delta(hostile_run: tuple[Path, dict]) -> None:
    _, summary = hostile_run
    found = tables(render(summary, "markdown"))
    assert found.headers[0] == ["parallel", "fixon", "fixoff", "Δ fixoff − fixon"]
    assert found.bodies[0] == [
        ["tp8", "0.950 (0.764–0.991)", "error", "-"],
        ["dp8", "0.950 (0.764–0.991)", "**0.500 (0.299–0.701)** ❌", "**-45.0 (p=0.0039)** ❌"],
    ]
    assert found.headers[1][0] == "parallel" and found.bodies[1][1][2] == "0.500 (2/4)"


def test_flipped_questions_and_evidence_are_folded(hostile_run: tuple[Path, dict]) -> None:
    run_path, summary = hostile_run
    html = rendered(render(summary, "markdown", run_path))
    assert html.summaries == [
        "All cells, every check, engine sources",
        "Every check (outcome · adjusted p · minimum detectable effect)",
        "dp8-fixoff: flipped questions (9 to wrong, 0 to right vs baseline; 9 to wrong, 0 to right vs twin)",
        "dp8-fixoff: 2 of 4 long generations collapsed",
    ]


def test_without_details_or_repetition_the_report_still_renders(tmp_path: Path) -> None:
    run_path, config = write_run(tmp_path, "plain", {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec(right=18)})
    summary = summary_of(run_path, config)
    md = render(summary, "markdown")  # no run folder to read: flipped ids from the summary, no answers
    assert "Collapse" not in md and "<pre>" not in md
    assert "right there, wrong here (2): test-18, test-19" in md
    found = tables(md)
    assert [row[4] for row in found.bodies[found.headers.index([c.header for c in columns(specs_of(summary))])]] == ["-", "-"]


def test_footer_is_the_command_in_a_fence_with_keys_redacted(hostile_run: tuple[Path, dict]) -> None:
    _, summary = hostile_run
    fences = [t for t in gfm().parse(render(summary, "markdown")) if t.type == "fence"]
    assert fences[-1].info == "sh"
    assert fences[-1].content == "evalkit matrix --model demo --only 'fix=fixon|fixoff' --api-key '***'\n"


def test_details_stay_within_the_github_comment_budget(tmp_path: Path) -> None:
    long = "x" * 5000
    cells = {f"{p}-{f}": CellSpec(right=10 if f == "fixoff" else 20, responses={i: long for i in range(20)},
                                  long_texts=[loop_text("loop " * 3)] * 6) for p in ("tp8", "dp8") for f in ("fixon", "fixoff")}
    run_path, config = write_run(tmp_path, "big", cells)
    summary = summary_of(run_path, config)
    assert len(render(summary, "markdown", run_path)) < 65_536


# --- terminal and CSV ---------------------------------------------------------------------------


def test_terminal_shows_the_table_and_no_control_sequences(hostile_run: tuple[Path, dict]) -> None:
    _, summary = hostile_run
    out = io.StringIO()
    assert render(summary, "terminal", console=Console(file=out, width=250, color_system=None)) is None
    text = out.getvalue()
    assert "\x1b" not in text and "dp8-fixoff" in text and "FAIL dp8-fixoff: GSM8K flexible 0.500 < min 0.8" in text
    assert "NOT OK" in text


def test_a_narrow_terminal_leaves_out_unmarked_columns_and_says_which(hostile_run: tuple[Path, dict]) -> None:
    """Folded into a too-narrow terminal, a table's values become unreadable stacks: columns go,
    least telling first, never the cell or its status, and a column that marks a broken threshold
    only when nothing else is left to go."""
    _, summary = hostile_run
    wide, narrow = io.StringIO(), io.StringIO()
    render(summary, "terminal", console=Console(file=wide, width=250, color_system=None))
    render(summary, "terminal", console=Console(file=narrow, width=90, color_system=None))
    assert "left out" not in wide.getvalue()
    lines = narrow.getvalue().splitlines()
    assert max(map(len, lines)) <= 90
    (note,) = [line for line in lines if line.startswith("left out at 90 columns: ")]
    assert "Δ flexible vs baseline" not in note and "GSM8K flexible" not in note  # they mark broken thresholds
    title = next(i for i, line in enumerate(lines) if line.strip().startswith("evalkit · "))
    header = "\n".join(lines[title:title + 8])
    assert "cell" in header and "status" in header and "flexible" in header
    assert "GSM8K strict" in wide.getvalue() and "GSM8K strict" in note


def test_csv_has_one_row_per_cell_with_metrics_deltas_and_p_values(hostile_run: tuple[Path, dict]) -> None:
    _, summary = hostile_run
    frame = pd.read_csv(io.StringIO(render(summary, "csv")))
    assert list(frame["cell"]) == ["tp8-fixon", "tp8-fixoff", "dp8-fixon", "dp8-fixoff"]
    row = frame.set_index("cell").loc["dp8-fixoff"]
    assert row["gsm8k.flexible"] == 0.5 and row["axis.parallel"] == "dp8" and row["broken"] == 2
    assert row["vs_ab.gsm8k.flexible.diff"] == pytest.approx(-0.45)
    assert row["vs_ab.gsm8k.flexible.p_value"] == pytest.approx(2 * 0.5 ** 9)  # McNemar: 9 flips, all one way
    assert row["vs_baseline.repetition.collapse_rate.diff"] == pytest.approx(0.5)
    assert row["source_repo"] == "https://github.com/ROCm/ATOM.git"
    for column in ("gsm8k.flexible_ci95_low", "gsm8k.flexible_ci95_high", "repetition.collapse_rate",
                   "vs_baseline.gsm8k.strict.p_value", "flags", "total_s"):
        assert column in frame.columns


def test_csv_text_cannot_run_as_a_spreadsheet_formula(tmp_path: Path) -> None:
    run_path, config = write_run(tmp_path, "f", {"tp8-fixon": CellSpec(status="error", error="=HYPERLINK(\"x\")")})
    frame = pd.read_csv(io.StringIO(render(summary_of(run_path, config), "csv")))
    assert frame["error"][0] == "'=HYPERLINK(\"x\")"
