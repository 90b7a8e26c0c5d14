"""The HTML report of a real demo run, loaded from disk by headless Chromium (Debian's `chromium`).

The session's run A of test_report_cli (one small run of `evalkit matrix` on the simulator: the
baseline pair tp8-full and the bug's pair dp8-piecewise, 40 questions, 8 long generations of at
most 1,024 tokens), copied, with a `<script>`
planted in a flipped answer of the failing cell after the run. Chromium dumps the DOM after the
page's own script ran (`--dump-dom`) and takes a screenshot under tmp_path (its path is printed).
Skipped, saying so, where /usr/bin/chromium is absent (`apt-get install chromium`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from evalkit.store import read_json, read_jsonl, write_jsonl
from tests.helpers.cli import evalkit_cli
from tests.test_render_html import Page

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[1]
PLANTED = ("<script>document.title='pwned';document.body.insertAdjacentHTML('beforeend','<p id=pwned></p>')"
           "</script><img src=x onerror=\"document.title='pwned'\"><p id=\"pwned\">")

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="SKIP browser test: /usr/bin/chromium is absent "
                                "(apt-get install -y chromium)")


def chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run",
                           f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, demo_runs: dict[str, Path]) -> dict[str, Any]:
    """The demo run with a planted script, its HTML report, and the DOM Chromium dumped: a copy of
    the session's run A (test_report_cli.make_demo_runs), as the planting changes its files."""
    tmp = tmp_path_factory.mktemp("html-browser")
    run_path = tmp / "results" / "run-a"
    shutil.copytree(demo_runs["a"], run_path)
    summary = read_json(run_path / "summary.json")
    failing = [c for c in summary["cells"] if any(f["action"] == "fail" for f in c["flags"])]
    assert failing, "the demo's bug cell should break a threshold"
    cell = failing[0]
    flipped = cell["vs_ab"]["gsm8k.flexible"]["flipped_to_wrong"]
    samples = run_path / cell["id"] / "gsm8k.samples.jsonl"
    rows = list(read_jsonl(samples))
    for row in rows:
        if row["id"] == flipped[0]:
            row["response"] = PLANTED + row["response"]
    write_jsonl(samples, rows)  # text only: the numbers and summary.json stay as they were

    report = tmp / "report.html"
    done = evalkit_cli("report", str(run_path), "--format", "html", "-o", str(report), cwd=tmp)  # in this process
    # the file's path, then the headline; the run's own exit code (its bug cell broke a threshold: 1)
    assert (done.returncode, done.stdout.splitlines()[0]) == (summary["exit_code"], str(report)), done.stderr[-3000:]
    url = report.as_uri() + f"#cell={cell['id']}"
    started = time.monotonic()
    dumped = chromium(url, tmp / "profile", "--dump-dom")
    load_s = time.monotonic() - started
    assert dumped.returncode == 0 and "</html>" in dumped.stdout, dumped.stderr[-3000:]
    shot = tmp / "report.png"
    chromium(url, tmp / "profile", f"--screenshot={shot}", "--window-size=1280,2000")
    print(f"\nHTML report {report} ({report.stat().st_size:,} bytes); Chromium load + dump {load_s:.2f} s; "
          f"screenshot {shot}")
    return {"summary": summary, "cell": cell, "flipped": flipped, "dom": dumped.stdout, "shot": shot,
            "html": report.read_text(encoding="utf-8"), "report": report, "tmp": tmp}


def _not_blank(png: Path) -> bool:
    """A screenshot with something drawn on it: more than a few distinct colours."""
    import matplotlib.image

    pixels = matplotlib.image.imread(str(png))
    return len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::7]}) > 20


def _pivot_cells(dom: Page, index: int) -> dict[tuple[str, str], str]:
    rows = [t["rows"] for t in dom.tables if t["class"] == "pivot"][index]
    header = [text for text, _ in rows[0]]
    return {(row[0][0], header[i]): text for row in rows[1:] for i, (text, _) in enumerate(row) if i}


def test_the_pivots_show_summary_json_numbers(page: dict[str, Any]) -> None:
    dom, summary = Page(page["dom"]), page["summary"]
    ab = summary["ab"]["axis"]
    gsm8k, collapse = _pivot_cells(dom, 0), _pivot_cells(dom, 1)
    for cell in summary["cells"]:
        key = (" · ".join(v for a, v in cell["axes"].items() if a != ab), cell["axes"][ab])
        m = cell["metrics"]
        assert gsm8k[key].startswith(f"{m['gsm8k.flexible']:.3f} ("), (key, gsm8k[key])
        assert collapse[key] == f"{m['repetition.collapse_rate']:.3f} ({m['repetition.collapsed']}/{m['repetition.n']})"


def test_the_failing_cells_drill_down_has_its_flips_and_the_onset_marked(page: dict[str, Any]) -> None:
    dom, cell = page["dom"], page["cell"]
    block = dom[dom.index(f'id="cell-{cell["id"]}"'):]
    block = block[: block.index("</details>")]
    for against in ("vs_baseline", "vs_ab"):
        delta = cell[against]["gsm8k.flexible"]
        for qid in delta["flipped_to_wrong"] + delta["flipped_to_right"]:
            assert f'data-qid="{qid}"' in block
    assert page["flipped"] and f'<div class="flip" data-qid="{page["flipped"][0]}">' in block
    if cell["metrics"]["repetition.collapsed"]:
        assert re.search(r'<mark class="onset">[^<]+</mark>', block)


def test_the_planted_script_did_not_run_and_the_pages_own_did(page: dict[str, Any]) -> None:
    dom = Page(page["dom"])
    assert "&lt;script&gt;document.title='pwned'" in page["dom"] or "&lt;script&gt;document.title=&#x27;pwned" in page["dom"]
    titles = re.findall(r"<title>(.*?)</title>", page["dom"], flags=re.S)
    assert titles and "pwned" not in titles[0]
    assert not [a for _, a in dom.elements if a.get("id") == "pwned"]
    assert not [tag for tag, a in dom.elements if tag == "img"]
    assert 'data-filters="ready"' in page["dom"]  # the CSP let the page's own script run (hash matched)
    rows = {a["data-cell"]: "hidden" in a for tag, a in dom.elements if tag == "tr" and "data-cell" in a}
    assert rows[page["cell"]["id"]] is False and all(hidden for cid, hidden in rows.items() if cid != page["cell"]["id"])


def test_no_network_reference_and_a_screenshot(page: dict[str, Any]) -> None:
    assert not [(tag, k) for tag, a in Page(page["html"]).elements for k in a if k in ("src", "href", "srcset", "action")]
    assert "url(" not in page["html"]
    assert page["shot"].is_file() and page["shot"].stat().st_size > 10_000


def test_a_reader_filters_clicks_into_the_flagged_cell_and_searches_a_question(page: dict[str, Any]) -> None:
    """Driven like a person would (Playwright on the same Chromium): the status filter keeps the
    flagged cell, its drill-down opens on a click, the question search keeps only that flip, and
    nothing planted ever ran."""
    sync_api = pytest.importorskip("playwright.sync_api")
    cell_id, qid = page["cell"]["id"], page["flipped"][0]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu",
                                                                          "--disable-background-networking"])
        try:
            view = browser.new_page(viewport={"width": 1400, "height": 1000})
            view.goto(page["report"].as_uri())
            view.select_option("#filter-status", "flagged")
            shown = view.locator("tr[data-cell]:not([hidden])").evaluate_all("rows => rows.map(r => r.dataset.cell)")
            assert shown == [c["id"] for c in page["summary"]["cells"] if any(f["action"] == "fail" for f in c["flags"])]
            details = view.locator(f"details#cell-{cell_id}")
            details.locator("summary").click()  # failing cells open by default: the click closes it ...
            assert details.evaluate("d => d.open") is False
            details.locator("summary").click()  # ... and opens it again
            assert details.evaluate("d => d.open") is True
            view.fill("#filter-qid", qid)
            visible = details.locator("div.flip:not([hidden])").evaluate_all("els => els.map(e => e.dataset.qid)")
            assert visible and set(visible) == {qid}
            assert "&lt;script&gt;" in details.inner_html() and view.title() != "pwned"
            assert view.locator("#pwned").count() == 0
            view.screenshot(path=str(page["tmp"] / "clicked.png"), full_page=False)
            plot = view.locator("figure.forest svg")
            box = plot.bounding_box()
            assert box is not None and box["width"] > 600 and box["height"] > 150
            drawn = page["tmp"] / "forest.png"
            plot.screenshot(path=str(drawn))
            assert _not_blank(drawn)
            print(f"the deltas plot as Chromium drew it: {drawn}")
            print(f"\nscreenshot after the clicks: {page['tmp'] / 'clicked.png'}")
        finally:
            browser.close()


def test_the_forest_plot_fits_a_1280_pixel_window(page: dict[str, Any]) -> None:
    """A laptop's browser window: the plot is drawn whole inside it, never scrolled sideways."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu",
                                                                          "--disable-background-networking"])
        try:
            view = browser.new_page(viewport={"width": 1280, "height": 900})
            view.goto(page["report"].as_uri())
            box = view.locator("figure.forest svg").bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 1280 and box["width"] > 500
            shot = page["tmp"] / "forest-1280.png"
            view.locator("figure.forest").screenshot(path=str(shot))
            assert _not_blank(shot)
            print(f"\nthe plot in a 1,280-px window: {shot}")
        finally:
            browser.close()
