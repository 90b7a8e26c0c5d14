"""JUnit XML: a run where Jenkins, GitLab, Buildkite and GitHub test reporters show test results.

The shape is the one Jenkins' xunit plugin validates (junit-10.xsd, which pytest ships in its
sdist as testing/example_scripts/junit-10.xsd and checks its own output against; the tests do the
same with this module's output and parse it with junitparser):

* `<testsuites>` holding one `<testsuite>` per run, named after the run;
* per cell, one testcase `runs` (an `<error>` with the engine's message and log tail when the
  cell did not run, `<skipped>` when it was not run), and one testcase per threshold checked on
  it, named by the rule and reference. A FAIL of a failing threshold is a `<failure>`; a check
  that could not decide (INCONCLUSIVE) or was not checked (NOT_CHECKED) is `<skipped>` with the
  reason; a PASS is a plain testcase; a broken warning threshold passes with the warning in its
  `<system-out>` (JUnit has no warning). A summary from before per-check outcomes existed has only
  its broken thresholds, one testcase each;
* `<properties>` for the run (id, model, engine, simulated, exit code) and per cell (its axes, its
  engine source SHA, the first bad commit `--bisect-on-regression` found), and the markdown report
  as the suite's `<system-out>`.

`evalkit compare A B --format junit` (a PR's run against the last nightly) is one testsuite too:
per cell, `runs` (an `<error>` when B did not run it, `<skipped>` when only A had it) and one
testcase per delta threshold of B's config checked against A's cell (verdict/compare.py), with the
same outcomes as a run's: a FAIL is a `<failure>`, an INCONCLUSIVE or NOT_CHECKED (the two runs'
eval setups differ) check is `<skipped>` with the reason.

Text that XML 1.0 cannot hold (control characters in model output) is dropped, not escaped: a
parser refuses a file with it whatever the escaping.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from evalkit.render.checks import checks_of
from evalkit.render.markdown import comparison as markdown_comparison
from evalkit.render.markdown import report as markdown_report
from evalkit.verdict.summary import CellRow, CheckRecord, ComparedCell, RunComparison, RunSummary

if TYPE_CHECKING:
    from evalkit.render.details import Details

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SKIPPED = ("INCONCLUSIVE", "NOT_CHECKED")


def _x(text: Any) -> str:
    return _NOT_XML.sub("", str(text))


def _check_name(check: CheckRecord) -> str:
    return f"{check.rule} vs {check.reference}" if check.reference else check.rule


def _flag_message(row: CellRow | ComparedCell, check: CheckRecord) -> str | None:
    """The broken-threshold message of this check (the flag the summary made for it)."""
    for flag in row.flags:
        if flag.metric == check.metric and flag.check == check.check and (
                flag.reference == check.reference or check.reference is None):
            return flag.message
    return check.message


def _skip_reason(check: CheckRecord) -> str:
    if check.outcome == "NOT_CHECKED":
        return f"not checked: {check.why or check.message or 'no value'}"
    mde, margin = check.mde, check.margin
    power = f"MDE {mde:.3g} at this n against a margin of {margin:g}" if mde is not None and margin is not None else ""
    need = f"; about {check.n_needed} samples would decide it" if check.n_needed else ""
    return f"inconclusive: not significant and underpowered ({power}{need})" if power else "inconclusive"


def _testcase(suite: ET.Element, classname: str, name: str, time_s: float = 0.0) -> ET.Element:
    return ET.SubElement(suite, "testcase", name=_x(name), classname=_x(classname), time=f"{max(time_s, 0.0):.3f}")


def _add_cell(suite: ET.Element, run_id: str, row: CellRow, counts: dict[str, int]) -> None:
    classname = f"evalkit.{run_id}.{row.id}"
    total = float(row.timings.get("total_s") or 0.0)
    runs = _testcase(suite, classname, "runs", total)
    counts["tests"] += 1
    status = row.status
    if status == "error":
        counts["errors"] += 1
        ET.SubElement(runs, "error", message=_x(row.error or "the cell failed"), type="CellError").text = _x(
            row.error or "")
        return
    if status != "ok":
        counts["skipped"] += 1
        ET.SubElement(runs, "skipped", message=_x(f"cell {status}: {row.error or 'not run'}"))
        return
    _add_checks(suite, classname, row, counts)


def _add_checks(suite: ET.Element, classname: str, row: CellRow | ComparedCell, counts: dict[str, int]) -> None:
    """One testcase per threshold checked on a run's cell or a compared cell (rule in the module docstring)."""
    for check in checks_of(row):
        case = _testcase(suite, classname, _check_name(check))
        counts["tests"] += 1
        outcome = check.outcome
        if outcome == "FAIL" and check.action == "fail":
            counts["failures"] += 1
            message = _flag_message(row, check) or _check_name(check)
            ET.SubElement(case, "failure", message=_x(message), type="ThresholdBroken").text = _x(message)
        elif outcome in _SKIPPED:
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=_x(_skip_reason(check)))
        elif outcome == "FAIL":
            ET.SubElement(case, "system-out").text = _x(f"WARNING: {_flag_message(row, check) or _check_name(check)}")


def _properties(summary: RunSummary) -> list[tuple[str, str]]:
    props = [(key, str(value)) for key, value in (("run_id", summary.run_id), ("model", summary.model),
             ("engine", summary.engine), ("simulated", summary.simulated), ("exit_code", summary.exit_code),
             ("baseline", summary.baseline))]
    for row in summary.cells:
        props += [(f"cell.{row.id}.axis.{axis}", str(value)) for axis, value in row.axes.items()]
        if row.source is not None and row.source.sha:
            props.append((f"cell.{row.id}.source_sha", row.source.sha))
    for found in summary.regressions or []:
        if found.first_bad:
            props.append((f"cell.{found.cell}.first_bad_commit", found.first_bad))
    return props


def report(summary: RunSummary, details: Details) -> str:
    """The run as a JUnit XML document, its markdown report in the suite's system-out."""
    return run_document(summary, markdown_report(summary, details))


def comparison(result: RunComparison) -> str:
    """Two runs compared as a JUnit XML document, the comparison's markdown in system-out."""
    return comparison_document(result, markdown_comparison(result))


def run_document(summary: RunSummary, markdown: str) -> str:
    """The run as a JUnit XML document; `markdown` is the report put in the suite's system-out."""
    run_id = summary.run_id
    root = ET.Element("testsuites", name="evalkit")
    suite = ET.SubElement(root, "testsuite", name=_x(f"evalkit {run_id}: {summary.model} on {summary.engine}"))
    properties = ET.SubElement(suite, "properties")
    for name, value in _properties(summary):
        ET.SubElement(properties, "property", name=_x(name), value=_x(value))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for row in summary.cells:
        _add_cell(suite, run_id, row, counts)
    ET.SubElement(suite, "system-out").text = _x(markdown)
    total = sum(float(r.timings.get("total_s") or 0.0) for r in summary.cells)
    suite.attrib.update({k: str(v) for k, v in counts.items()} | {"time": f"{total:.3f}"})
    if summary.started_at:
        suite.set("timestamp", summary.started_at)
    root.attrib.update({k: str(counts[k]) for k in ("tests", "failures", "errors")} | {"time": f"{total:.3f}"})
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _compare_cell(suite: ET.Element, row: ComparedCell, counts: dict[str, int]) -> None:
    classname = f"evalkit.compare.{row.id}"
    runs = _testcase(suite, classname, "runs")
    counts["tests"] += 1
    if not row.both_ok:
        if row.found_in == "a":
            counts["skipped"] += 1
            ET.SubElement(runs, "skipped", message="only in A: not run in B")
        elif row.status_b not in ("ok", None):
            counts["errors"] += 1
            ET.SubElement(runs, "error", message=_x(f"cell {row.status_b} in B"), type="CellError")
        else:
            counts["skipped"] += 1
            ET.SubElement(runs, "skipped", message=_x(f"not compared: in {row.found_in}, status A "
                                                      f"{row.status_a}, B {row.status_b}"))
        return
    _add_checks(suite, classname, row, counts)


def comparison_document(result: RunComparison, markdown: str) -> str:
    """Two runs compared (verdict.compare.compare_runs) as a JUnit XML document, `markdown` in system-out."""
    a, b = result.a, result.b
    root = ET.Element("testsuites", name="evalkit compare")
    suite = ET.SubElement(root, "testsuite", name=_x(f"evalkit compare {a.run_id} -> {b.run_id}"))
    properties = ET.SubElement(suite, "properties")
    for side, meta in (("a", a), ("b", b)):
        for key, value in (("run_id", meta.run_id), ("model", meta.model), ("engine", meta.engine), ("limit", meta.limit)):
            ET.SubElement(properties, "property", name=f"{side}.{key}", value=_x(value))
        ET.SubElement(properties, "property", name=f"{side}.source_shas", value=_x(",".join(meta.source_shas)))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for row in result.cells:
        _compare_cell(suite, row, counts)
    ET.SubElement(suite, "system-out").text = _x(markdown)
    suite.attrib.update({k: str(v) for k, v in counts.items()} | {"time": "0.000"})
    root.attrib.update({k: str(counts[k]) for k in ("tests", "failures", "errors")})
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
