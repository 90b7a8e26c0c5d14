"""Where CI shows results: a run as a GitHub Actions step, and the history for dashboards."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest
import xmlschema
from click.testing import CliRunner
from junitparser import JUnitXml

from evalkit.cli import main
from evalkit.errors import EXIT_THRESHOLD
from evalkit.render.github import STEP_SUMMARY_LIMIT, command, step_summary, workflow_commands
from evalkit.store import read_json
from evalkit.verdict.summary import RunSummary
from tests.helpers.runs import hand_made
from tests.test_history_cli import three_runs  # noqa: F401 - three stored nightly runs

COMMAND = re.compile(r"^::(error|warning) title=([^:]*)::(.*)$")


def unescape(text: str) -> str:
    """GitHub's runner decodes workflow-command values this way (actions/runner, ActionCommand)."""
    for code, char in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(code, char)
    return text


def test_a_run_as_an_actions_step_annotates_each_broken_threshold_and_appends_its_report(
        demo_runs: dict[str, Path]) -> None:
    summary = read_json(demo_runs["a"] / "summary.json")
    flags = [f for cell in summary["cells"] for f in cell["flags"]]
    assert any(f["action"] == "fail" for f in flags)  # the bug's cell breaks a gate by design of the demo config
    printed = [COMMAND.match(line) for line in demo_runs["a_stdout"].read_text().splitlines() if line.startswith("::")]
    assert printed and all(printed)
    assert [(m.group(1), unescape(m.group(3))) for m in printed if m] == [
        ("error" if f["action"] == "fail" else "warning", f["message"]) for f in flags]
    written = demo_runs["step_summary"].read_text(encoding="utf-8")
    assert written == "# an earlier step's summary\n" + (demo_runs["a"] / "table.md").read_text(encoding="utf-8")


def test_an_annotation_is_one_line_whatever_the_message_holds() -> None:
    line = command("error", "cell x: 50% drop\n::error::forged\r", "evalkit run-1: dp8, piecewise")
    assert line.splitlines() == [line]  # the runner reads commands line by line: nothing can start a second one
    match = COMMAND.match(line)
    assert match and unescape(match.group(2)) == "evalkit run-1: dp8, piecewise"
    assert unescape(match.group(3)) == "cell x: 50% drop\n::error::forged\r"


def test_failed_cells_are_errors_even_without_flags() -> None:
    summary = {"run_id": "r", "cells": [{"id": "a", "status": "error", "error": "engine exited with code 1", "flags": []},
                                        {"id": "b", "status": "ok", "flags": [{"metric": "engine.tokens_per_s", "check": "min",
                                                                             "action": "warn", "message": "slow"}]}]}
    assert [line.split("::")[1].split(" ")[0] for line in workflow_commands(hand_made(summary))] == ["error", "warning"]
    assert "engine exited with code 1" in workflow_commands(hand_made(summary))[0]


def test_a_report_too_long_for_the_step_summary_is_cut_at_a_line_and_says_where_the_rest_is() -> None:
    block = "<details><summary>cell</summary>\n\n" + "\n".join(f"| q{i} | wrong |" for i in range(200)) + "\n</details>\n"
    markdown = "# report\n" + block * 400
    assert len(markdown.encode()) > STEP_SUMMARY_LIMIT
    cut = step_summary(markdown, "results/run-1/table.md", used_bytes=1000)
    assert len(cut.encode()) <= STEP_SUMMARY_LIMIT - 1000
    assert cut.rstrip().endswith("(upload the results folder as an artifact to keep it).")
    assert "results/run-1/table.md" in cut
    assert cut.count("<details>") == cut.count("</details>")  # the note is not folded away
    assert markdown.startswith(cut.split("\n\n> **Report cut here**")[0].rsplit("</details>", 1)[0])
    assert step_summary("# short\n", "x") == "# short\n"
    assert step_summary(markdown, "x", used_bytes=STEP_SUMMARY_LIMIT) == ""


def history(results: Path, *args: str) -> str:
    runner = CliRunner()
    assert runner.invoke(main, ["history", "--import", "all", "--results-dir", str(results)]).exit_code == 0
    result = runner.invoke(main, ["history", "--model", "demo", *args, "--results-dir", str(results)])
    assert result.exit_code == 0, result.output
    return result.output


def test_benchmark_json_is_github_action_benchmarks_custom_format_for_the_newest_run(three_runs: Path) -> None:  # noqa: F811
    for better, wanted in (("bigger", {"gsm8k.flexible", "gsm8k.strict"}), ("smaller", {"repetition.collapse_rate"})):
        entries = json.loads(history(three_runs, "--format", "benchmark-json", "--better", better))
        # src/extract.ts: an array of {name, value, unit, range?, extra?}; name and unit strings, value a number
        assert isinstance(entries, list) and entries
        for entry in entries:
            assert set(entry) <= {"name", "value", "unit", "range", "extra"}
            assert isinstance(entry["name"], str) and isinstance(entry["unit"], str)
            assert isinstance(entry["value"], (int, float)) and not isinstance(entry["value"], bool)
            assert entry["extra"].startswith("run night-3\n")
        names = {e["name"] for e in entries}
        assert len(names) == len(entries)  # one series per cell x metric
        assert {n.split(" ")[1] for n in names} == wanted
        assert {n.split(" ")[0] for n in names} == {"tp8-fixon", "tp8-fixoff", "dp8-fixon", "dp8-fixoff"}
    smaller = json.loads(history(three_runs, "--format", "benchmark-json", "--better", "smaller"))
    assert next(e["value"] for e in smaller if e["name"] == "dp8-fixoff repetition.collapse_rate") == 0.75


def test_csv_has_a_row_per_run_and_cell_and_a_column_per_metric(three_runs: Path) -> None:  # noqa: F811
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(history(three_runs, "--format", "csv", "--cell", "dp8-fixoff"))))
    assert [r["run_id"] for r in rows] == ["night-1", "night-2", "night-3"]
    assert [float(r["gsm8k.flexible"]) for r in rows] == [0.95, 0.8, 0.6]
    assert list(rows[0])[:5] == ["run_id", "started_at", "cell", "status", "source_sha"]


def test_the_workflow_example_uses_only_commands_and_options_evalkit_has() -> None:
    import yaml

    from tests.conftest import ROOT

    workflow = yaml.safe_load((ROOT / "examples" / "github-actions.yml").read_text())
    steps = workflow["jobs"]["matrix"]["steps"]
    scripts = " ".join(step.get("run", "") for step in steps).replace("\\\n", " ")
    calls = re.findall(r"evalkit (\w+)([^\n;|>]*)", scripts)
    assert {name for name, _ in calls} >= {"matrix", "compare", "history"}
    runner = CliRunner()
    for name, rest in calls:
        helptext = runner.invoke(main, [name, "--help"]).output
        for option in re.findall(r"(--[a-z][a-z-]*)", rest):
            assert option in helptext, f"evalkit {name} has no {option}"


JUNIT_SCHEMA = Path(__file__).parent / "data" / "junit-10.xsd"


@pytest.fixture(scope="session")
def junit_schema() -> xmlschema.XMLSchema:
    """Jenkins' JUnit schema (xunit plugin junit-10.xsd, MIT, its licence inside), as pytest 9.0.3
    ships it in its sdist (testing/example_scripts/junit-10.xsd) to check its own --junitxml
    output; kept in tests/data so the suite needs no download (the download timed out on a loaded box)."""
    return xmlschema.XMLSchema(str(JUNIT_SCHEMA))


def test_junit_is_valid_and_reports_each_cell_and_check_as_ci_reporters_read_it(
        demo_runs: dict[str, Path], junit_schema: xmlschema.XMLSchema, tmp_path: Path) -> None:
    out = tmp_path / "junit.xml"
    result = CliRunner().invoke(main, ["report", "run-a", "--format", "junit", "-o", str(out),
                                       "--results-dir", str(demo_runs["results"])])
    expected_exit = read_json(demo_runs["a"] / "summary.json")["exit_code"]  # report exits as the run did
    print(CliRunner().invoke(main, ["compare", "run-a", "run-b", "--allow", "argv", "--format", "markdown", "--results-dir", str(demo_runs["results"])]).output)
    assert result.exit_code == expected_exit, result.output
    junit_schema.validate(str(out))
    assert out.read_text() == demo_runs["a_junit"].read_text()  # `matrix --junit` wrote the same document
    summary = read_json(demo_runs["a"] / "summary.json")
    xml = JUnitXml.fromfile(str(out))
    [suite] = list(xml)
    cases = {(case.classname.split(".")[-1], case.name): case for case in suite}
    for row in summary["cells"]:
        runs = cases[(row["id"], "runs")]
        assert runs.is_passed == (row["status"] == "ok")
        checks = row.get("checks") or []
        for check in checks:
            name = check["rule"] + (f" vs {check['reference']}" if check.get("reference") else "")
            case = cases[(row["id"], name)]
            kinds = {type(r).__name__ for r in case.result}
            if check["outcome"] == "FAIL" and check["action"] == "fail":
                assert kinds == {"Failure"}
            elif check["outcome"] in ("INCONCLUSIVE", "NOT_CHECKED"):
                assert kinds == {"Skipped"} and case.result[0].message
            else:
                assert kinds == set()
    failures = sum(1 for row in summary["cells"] for f in row["flags"] if f["action"] == "fail")
    assert suite.failures == failures and failures >= 1
    assert suite.errors == summary["failed_cells"]
    props = {p.name: p.value for p in suite.properties()}
    assert props["run_id"] == "run-a" and props["cell.tp8-full-fixoff.axis.fix"] == "fixoff"
    system_out = ElementTree.parse(out).getroot().find("testsuite/system-out")
    assert system_out is not None and system_out.text == (demo_runs["a"] / "table.md").read_text(encoding="utf-8")


def test_junit_errors_for_a_cell_that_did_not_run_and_drops_what_xml_cannot_hold(
        junit_schema: xmlschema.XMLSchema) -> None:
    from evalkit.render.junit import run_document

    summary = {"run_id": "r", "model": "m", "engine": "sim", "cells": [
        {"id": "dead", "status": "error", "error": "engine exited with code 1 \x1b[31m\x00", "flags": []},
        {"id": "later", "status": "skipped", "error": "over the run budget", "flags": []},
        {"id": "old", "status": "ok", "flags": [{"metric": "gsm8k.flexible", "check": "min", "limit": 0.9,
                                                 "action": "fail", "message": "old: GSM8K flexible 0.8 < min 0.9"}]}]}
    text = run_document(hand_made(summary), "# report")
    junit_schema.validate(io.StringIO(text))
    suite = next(iter(JUnitXml.fromstring(text.encode())))
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (4, 1, 1, 1)
    dead = next(c for c in suite if c.classname.endswith(".dead"))
    assert dead.result[0].message == "engine exited with code 1 [31m"


def synthetic(cells: int, seed: int = 0) -> RunSummary:
    """A summary of `cells` cells compared with a baseline and a twin on GSM8K and collapses, one
    in six failing a drop gate and one in six inconclusive: what the plot reads of a summary."""
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(cells):
        diff = rng.uniform(-0.08, 0.02)
        outcome = "FAIL" if i % 6 == 5 else "INCONCLUSIVE" if i % 6 == 4 else "PASS"
        delta = {"gsm8k.flexible": {"diff": diff, "ci95": [diff - 0.03, diff + 0.03], "p_value": 0.5},
                 "repetition.collapse_rate": {"diff": 0.0, "p_value": 1.0}}
        rows.append({"id": f"cell{i:02d}-tp8-piecewise-fixoff", "status": "ok", "flags": [],
                     "metrics": {"repetition.collapsed": 1, "repetition.n": 64},
                     "vs_baseline": {"reference": "base", **delta}, "vs_ab": {"reference": "base", **delta},
                     "checks": [{"threshold": 0, "rule": "gsm8k.flexible max_drop_vs_baseline 0.02",
                                 "metric": "gsm8k.flexible", "check": "max_drop_vs_baseline", "margin": 0.02,
                                 "outcome": outcome},
                                {"threshold": 1, "rule": "repetition.collapse_rate max_rise_ab 0.05",
                                 "metric": "repetition.collapse_rate", "check": "max_rise_ab", "margin": 0.05,
                                 "outcome": "PASS"}]})
    rows.append({"id": "base", "status": "ok", "flags": [], "metrics": {"repetition.collapsed": 1, "repetition.n": 64}})
    return hand_made({"run_id": f"synthetic-{cells}", "cells": rows})


def test_the_deltas_plot_marks_failing_and_undecided_rows_and_draws_the_margins() -> None:
    from evalkit.render.forest import panels
    from evalkit.stats.tests import newcombe_unpaired

    found = {panel.spec.name: panel for panel in panels(synthetic(12))}
    gsm8k, collapse = found["gsm8k.flexible"], found["repetition.collapse_rate"]
    assert len(gsm8k.rows) == 24 and gsm8k.margins == [-0.02]
    assert [r.outcome for r in gsm8k.rows if r.reference == "baseline"][4:6] == ["INCONCLUSIVE", "FAIL"]
    assert collapse.margins == [0.05]
    row = collapse.rows[0]  # a count: Newcombe's interval from the two cells' 1/64 each
    assert (row.diff, row.low, row.high) == (0.0, *newcombe_unpaired(1, 64, 1, 64))


def test_the_deltas_plot_is_a_png_and_inline_svg_for_12_and_48_cells(tmp_path: Path) -> None:
    import matplotlib.image

    from evalkit.render.forest import png, svg

    heights = {}
    for cells in (12, 48):
        out = tmp_path / f"deltas-{cells}.png"
        assert png(synthetic(cells), out)
        pixels = matplotlib.image.imread(str(out))
        heights[cells] = pixels.shape[0]
        print(f"\n{cells} cells: {out} ({pixels.shape[1]} x {pixels.shape[0]} px)")
        drawn = svg(synthetic(cells))
        assert drawn is not None and drawn.startswith("<svg") and "cell47" in drawn if cells == 48 else True
    # every row gets its own height: 96 labelled rows stay as far apart as 24
    assert heights[48] > 3 * heights[12] * 0.8
    assert not png(hand_made({"run_id": "r", "cells": [{"id": "a", "status": "ok", "flags": []}]}), tmp_path / "none.png")


def test_report_plot_writes_the_png_of_a_real_run_and_the_html_holds_it(demo_runs: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    out, page = tmp_path / "deltas.png", tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", "run-a", "--format", "html", "-o", str(page), "--plot", str(out),
                                       "--results-dir", str(demo_runs["results"])])
    assert result.exit_code == read_json(demo_runs["a"] / "summary.json")["exit_code"], result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    html = page.read_text(encoding="utf-8")
    figure = html[html.index('<figure class="forest">'):]
    figure = figure[: figure.index("</figure>")]
    summary = read_json(demo_runs["a"] / "summary.json")
    compared = [row["id"] for row in summary["cells"] if row.get("vs_baseline") or row.get("vs_ab")]
    assert compared and all(f"{cell} vs " in figure for cell in compared)


def test_compare_as_junit_has_a_testcase_per_check_and_per_cell_run(junit_schema: xmlschema.XMLSchema) -> None:
    from evalkit.render.junit import comparison_document
    from evalkit.verdict.summary import RunComparison

    def check(outcome: str, **more: object) -> dict:
        return {"threshold": 0, "rule": "gsm8k.flexible max_drop 0.02 alpha 0.01", "reference": "main-1", "metric": "gsm8k.flexible",
                "check": "max_drop_vs_baseline", "margin": 0.02, "action": "fail", "outcome": outcome, **more}

    def cell(cell_id: str, found_in: str, status_a: str | None, status_b: str | None, **more: object) -> dict:
        return {"id": cell_id, "axes": {}, "in": found_in, "status_a": status_a, "status_b": status_b, "a": {}, "b": {},
                **more}

    def run(run_id: str, sha: str) -> dict:
        return {"run_id": run_id, "model": "m", "engine": "sim", "started_at": None, "status": "complete",
                "limit": None, "simulated": True, "source_shas": [sha * 40], "command": None}

    result = RunComparison.model_validate({
        "a": run("main-1", "a"), "b": run("pr-7", "b"), "metrics": [], "multiplicity": "holm",
        "check_outcomes": {"FAIL": 1, "PASS": 1, "INCONCLUSIVE": 1, "NOT_CHECKED": 1}, "inconclusive_checks": 1,
        "failed_cells": 1, "broken_thresholds": 2, "warnings": 0, "exit_code": 1,
        "cells": [
            cell("worse", "both", "ok", "ok", checks=[check("FAIL")],
                 flags=[{"metric": "gsm8k.flexible", "check": "max_drop_vs_baseline", "reference": "main-1",
                         "action": "fail", "message": "worse: GSM8K flexible 0.870 vs run A main-1 0.940"}]),
            cell("same", "both", "ok", "ok", checks=[check("PASS", mde=0.011)]),
            cell("small", "both", "ok", "ok", checks=[check("INCONCLUSIVE", mde=0.25, n_needed=1806)]),
            cell("other-setup", "both", "ok", "ok", checks=[check("NOT_CHECKED", why="eval setup differs (num_fewshot)")]),
            cell("dropped", "a", "ok", None),
            cell("crashed", "both", "ok", "error")]})
    text = comparison_document(result, "# compare")
    junit_schema.validate(io.StringIO(text))
    suite = next(iter(JUnitXml.fromstring(text.encode())))
    outcome = {(c.classname.rsplit(".", 1)[-1], c.name): {type(r).__name__ for r in c.result} for c in suite}
    name = "gsm8k.flexible max_drop 0.02 alpha 0.01 vs main-1"
    assert outcome[("worse", name)] == {"Failure"} and outcome[("same", name)] == set()
    assert outcome[("small", name)] == outcome[("other-setup", name)] == {"Skipped"}
    assert outcome[("dropped", "runs")] == {"Skipped"} and outcome[("crashed", "runs")] == {"Error"}
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (10, 1, 1, 3)


def test_compare_of_real_runs_writes_valid_junit(demo_runs: dict[str, Path], junit_schema: xmlschema.XMLSchema,
                                                 tmp_path: Path) -> None:
    out = tmp_path / "compare.xml"
    result = CliRunner().invoke(main, ["compare", "run-a", "run-b", "--allow", "argv", "--format", "junit", "-o", str(out),
                                       "--results-dir", str(demo_runs["results"])])
    # B ran the buggy cell at another sim seed: beyond the margin of a check of B's without a test
    # (its KL p99 against A's; a GSM8K drop without alpha too, on some question subsets), each a
    # failure; the exit status says so
    assert result.exit_code == EXIT_THRESHOLD, result.output
    junit_schema.validate(str(out))
    suite = next(iter(JUnitXml.fromfile(str(out))))
    assert suite.failures in (1, 2)
    names = {(c.classname.rsplit(".", 1)[-1], c.name) for c in suite}
    assert any(cell == "dp8-piecewise-fixoff" and "vs run-a" in name for cell, name in names)  # the one cell both runs have
    assert ("tp8-full-fixon", "runs") in names  # only in A: listed, skipped
