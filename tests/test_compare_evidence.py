"""`evalkit compare` gives no verdict without evidence (issue 47 item 2).

Nothing to compare is bad input in one line (exit 2): a run with itself, two runs with no cell in
common, runs that scored no question in common, runs whose every shared cell ran differently. A
cell on one side only, not finished on both, or run differently (another flag, variable, model or
device: its comparability key, store/comparability.py) is listed with why and never said to hold;
runs that scored different questions are compared on those both scored and the headline says so;
`--strict` fails on anything not judged. The last test states it all as a property over
generated pairs of runs, with each judged verdict worked out again from the counts.

The runs are hand-made folders (tests/helpers/runs.py) whose marks are set per question.
"""

from __future__ import annotations

import io
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from scipy.stats import binomtest

from evalkit.config import parse_config
from evalkit.errors import EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_THRESHOLD, ConfigError
from evalkit.render import render_compare
from evalkit.render.header import verdict_line
from evalkit.render.headline import NAMED_IDS, headline
from evalkit.stats.power import mcnemar_mde
from evalkit.store import read_json, write_json
from evalkit.verdict.compare import compare_runs
from evalkit.verdict.deltas import strict_exit_code
from tests.helpers.cli import evalkit_cli
from tests.helpers.runs import CellSpec, config_dict, gfm, tables, write_run
from tests.test_comparison import set_marks

GATE = {"metric": "gsm8k.flexible", "max_drop_ab": 0.10, "alpha": 0.05}
CELLS = ("tp8-fixon", "tp8-fixoff", "dp8-fixon", "dp8-fixoff")


def two(tmp: Path, a_cells: dict[str, CellSpec], b_cells: dict[str, CellSpec],
        thresholds: list[dict] | None = None) -> tuple[Path, Path]:
    config = config_dict(thresholds=[GATE] if thresholds is None else thresholds)
    a, _ = write_run(tmp, "run-a", a_cells, config)
    b, _ = write_run(tmp, "run-b", b_cells, config)
    return a, b


def add_flag(run: Path, cell: str, *flag: str) -> None:
    """The cell's engine was launched with `flag` besides what its config says."""
    record = read_json(run / cell / "cell.json")
    record["launch"]["argv"] += list(flag)
    write_json(run / cell / "cell.json", record)


def cli(*args: str, results: Path) -> tuple[int, str, str]:
    done = evalkit_cli("compare", *args, "--results-dir", str(results))
    return done.returncode, done.stdout, done.stderr


def test_a_run_compared_with_itself_is_refused_in_one_line(tmp_path: Path) -> None:
    """`evalkit compare latest` (B defaults to latest) used to say OK of a run against itself."""
    write_run(tmp_path, "20261201-020000-demo", {"tp8-fixon": CellSpec()})
    for args in (["latest"], ["20261201-020000-demo", "20261201-020000-demo"], ["20261201-020000-demo"]):
        code, out, err = cli(*args, results=tmp_path)
        assert (code, out) == (EXIT_BAD_INPUT, ""), err
        assert err.strip().splitlines() == ["error: A and B are the same run (20261201-020000-demo): nothing to compare; "
                                            "name an earlier run as A (evalkit compare RUN_A 20261201-020000-demo)"]


def test_runs_with_no_cell_in_common_are_refused_even_without_strict(tmp_path: Path) -> None:
    """They used to print `all 13 cells held` and exit 0, with --strict too."""
    two(tmp_path, {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec()}, {"dp8-fixon": CellSpec()})
    for strict in ([], ["--strict"]):
        code, _, err = cli("run-a", "run-b", *strict, results=tmp_path)
        assert code == EXIT_BAD_INPUT and err.strip().splitlines() == [
            "error: A (run-a) and B (run-b) have no cell in common: A has tp8-fixon, tp8-fixoff, B has dp8-fixon; "
            "nothing to compare"]


def test_a_cell_on_one_side_is_listed_never_held_and_fails_strict(tmp_path: Path) -> None:
    untested = [{"metric": "gsm8k.flexible", "max_drop_ab": 0.10}]  # no alpha: 20 questions can PASS it
    a, b = two(tmp_path, {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec()}, {"tp8-fixon": CellSpec()}, untested)
    result = compare_runs(a, b)
    assert result.unjudged == ["tp8-fixoff"]
    assert headline(result) == "1 of 2 cells held; 1 of 2 cells not judged: tp8-fixoff (only in A)"
    assert verdict_line(result)[0] is False  # the report's mark: NOT OK, though nothing broke
    assert (result.exit_code, strict_exit_code(result)) == (EXIT_OK, EXIT_INCONCLUSIVE)
    assert [cli("run-a", "run-b", *s, results=tmp_path)[0] for s in ([], ["--strict"])] == [EXIT_OK, EXIT_INCONCLUSIVE]


def test_a_cell_that_ran_differently_is_not_judged_and_says_what_differed(tmp_path: Path) -> None:
    """The false regressions of public engine issues: a flag set on one side only."""
    a, b = two(tmp_path, {"tp8-fixon": CellSpec(), "dp8-fixon": CellSpec()},
               {"tp8-fixon": CellSpec(right=10), "dp8-fixon": CellSpec()})
    add_flag(b, "tp8-fixon", "--max-num-seqs", "128")
    result = compare_runs(a, b)
    cell = next(c for c in result.cells if c.id == "tp8-fixon")
    assert cell.differs == ["engine argv: --max-num-seqs 128 in B only"]
    assert [(c.outcome, c.why) for c in cell.checks] == [
        ("NOT_CHECKED", "ran differently: engine argv: --max-num-seqs 128 in B only")]
    assert cell.delta("gsm8k.flexible") is not None and cell.delta("gsm8k.flexible").diff is None  # type: ignore[union-attr]
    assert headline(result).endswith("1 of 2 cells not judged: tp8-fixon (ran differently: engine argv: "
                                     "--max-num-seqs 128 in B only)")
    # a not-checked failing threshold is broken, as a set-up that differs is (and as in the matrix)
    assert result.exit_code == EXIT_THRESHOLD
    allowed = compare_runs(a, b, allow=["argv"])
    judged = next(c for c in allowed.cells if c.id == "tp8-fixon")
    assert judged.differs == [] and [c.outcome for c in judged.checks] == ["FAIL"]  # 50 points down, now seen


def test_runs_whose_every_shared_cell_ran_differently_are_refused(tmp_path: Path) -> None:
    a, b = two(tmp_path, {"tp8-fixon": CellSpec()}, {"tp8-fixon": CellSpec()})
    record = read_json(b / "run.json")
    write_json(b / "run.json", record | {"model": "sim/other-model"})
    code, _, err = cli("run-a", "run-b", results=tmp_path)
    assert code == EXIT_BAD_INPUT and err.strip().splitlines() == [
        "error: A (run-a) and B (run-b) ran every shared cell differently (model: sim/test-model vs sim/other-model): "
        "nothing to compare; --allow PART compares them anyway"]
    assert cli("run-a", "run-b", "--allow", "model", results=tmp_path)[0] == EXIT_OK


def test_different_question_sets_are_compared_on_the_shared_ones_and_the_headline_says_so(tmp_path: Path) -> None:
    """A full run against a --limit run: A and B are shown on the questions both scored (marked *),
    not each run's own score beside a delta of other questions."""
    a, b = two(tmp_path, {"tp8-fixon": CellSpec()}, {"tp8-fixon": CellSpec()})
    set_marks(a, "tp8-fixon", flexible_wrong={1, 2, 3, 12, 13, 14, 15})  # 20 questions, 13 right
    set_marks(b, "tp8-fixon", flexible_wrong={1}, questions=range(8))  # --limit 8: 7 right
    write_json(b / "run.json", read_json(b / "run.json") | {"limit": 8})
    result = compare_runs(a, b)
    cell = result.cells[0]
    assert cell.question_sets == {"gsm8k": "gsm8k question set: 20 vs 8"}
    assert cell.on_shared["gsm8k.flexible"] == [pytest.approx(5 / 8), pytest.approx(7 / 8)]
    assert (cell.a["gsm8k.flexible"], cell.b["gsm8k.flexible"]) == (pytest.approx(13 / 20), pytest.approx(7 / 8))
    assert headline(result).startswith("on the 8 GSM8K questions both runs scored: ")
    markdown = render_compare(result, "markdown") or ""
    row = tables(markdown).bodies[0][0]
    assert row[:4] == ["tp8-fixon", "0.625\\*", "0.875\\*", "+25.0 (p=0.5)"]
    assert "\\* A and B on those questions alone" in markdown


def test_the_compare_table_fits_80_columns_and_says_what_it_left_out(tmp_path: Path) -> None:
    a, b = two(tmp_path, {c: CellSpec(long_texts=["fine prose"] * 2) for c in CELLS},
               {c: CellSpec(long_texts=["fine prose"] * 2) for c in CELLS})
    out = io.StringIO()
    render_compare(compare_runs(a, b), "terminal", console=Console(file=out, width=80, color_system=None))
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= 80
    assert any(line.startswith("│ dp8-fixoff ") and "+0.0 (p=1)" in line for line in lines)  # a row on one line
    said = " ".join(lines[next(i for i, line in enumerate(lines) if line.startswith("left out at 80")):])
    assert "left out at 80 columns:" in said and "collapse" in said
    markdown = render_compare(compare_runs(a, b), "markdown") or ""
    assert gfm().render(markdown).count("<table>") >= 1  # a PR comment renders it as a table


def test_a_config_that_judges_nothing_against_a_never_says_held(tmp_path: Path) -> None:
    """B's config has only an absolute floor (a compare judges the change, not the value): no
    cell was judged against A, and the headline says so instead of `all 4 cells held`."""
    a, b = two(tmp_path, dict.fromkeys(CELLS, CellSpec()), dict.fromkeys(CELLS, CellSpec()),
               thresholds=[{"metric": "gsm8k.flexible", "min": 0.5}])
    result = compare_runs(a, b)
    assert result.unjudged == list(CELLS)
    assert headline(result).startswith("4 of 4 cells not judged: tp8-fixon (no failing threshold applies to it)")
    assert "held" not in headline(result) and strict_exit_code(result) == EXIT_INCONCLUSIVE


# the property: every pair of runs, shared, disjoint, renamed and re-limited cells

RANGES = st.sampled_from([range(0, 20), range(0, 10), range(0, 5), range(10, 20), range(5, 15)])
SIDE = st.fixed_dictionaries({"status": st.sampled_from(["ok", "ok", "ok", "error"]), "questions": RANGES,
                              "wrong": st.sets(st.integers(0, 19), max_size=12), "flag": st.booleans()})
RUN = st.dictionaries(st.sampled_from(CELLS), SIDE, min_size=1, max_size=4)


def _holm(ps: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment, written out (the reference for evalkit's)."""
    order = sorted(ps, key=ps.__getitem__)
    out, running = {}, 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * ps[key]))
        out[key] = running
    return out


def _reference(a: dict, b: dict) -> dict[str, str | None]:
    """Per cell: the gate's outcome worked out from the counts (McNemar exact by scipy, Holm by hand,
    the MDE rule), None for a cell that cannot be judged."""
    gate = parse_config(config_dict(thresholds=[GATE]), "x.yaml").thresholds[0]
    judged: dict[str, tuple[int, int, int, float]] = {}
    for cell in CELLS:
        x, y = a.get(cell), b.get(cell)
        if not x or not y or x["status"] != "ok" or y["status"] != "ok" or x["flag"] != y["flag"]:
            continue
        shared = sorted(set(x["questions"]) & set(y["questions"]))
        if not shared:
            continue
        right_a = {q for q in shared if q not in x["wrong"]}
        right_b = {q for q in shared if q not in y["wrong"]}
        only_b, only_a = len(right_b - right_a), len(right_a - right_b)
        p = binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
        judged[cell] = (len(shared), only_a, only_b, p)
    adjusted = _holm({cell: p for cell, (_, _, _, p) in judged.items()})
    out: dict[str, str | None] = dict.fromkeys(set(a) | set(b))
    for cell, (n, only_a, only_b, _) in judged.items():
        drop = (only_a - only_b) / n
        mde = mcnemar_mde(n, (only_a + only_b) / n, gate.alpha, gate.power)
        if drop > gate.value and adjusted[cell] < gate.alpha:
            out[cell] = "FAIL"
        elif drop > gate.value or mde is None or mde > gate.value * gate.inconclusive_factor:
            out[cell] = "INCONCLUSIVE"
        else:
            out[cell] = "PASS"
    return out


def _write(tmp: Path, run_id: str, cells: dict) -> Path:
    specs = {cell: CellSpec(status=side["status"]) for cell, side in cells.items()}
    run, _ = write_run(tmp, run_id, specs, config_dict(thresholds=[GATE]))
    for cell, side in cells.items():
        if side["status"] == "ok":
            set_marks(run, cell, side["wrong"], questions=side["questions"])
        if side["flag"]:
            add_flag(run, cell, "--max-num-seqs", "128")
    return run


@settings(max_examples=60)
@given(RUN, RUN)
def test_compare_never_holds_what_it_did_not_judge_and_judges_by_the_counts(a_cells: dict, b_cells: dict) -> None:
    """Whatever two runs hold (cells on one side, failed, launched with another flag, questions cut
    to other ranges), compare either refuses in one line for the reason the counts give, or every
    cell it did not judge is named as such, never held, never PASS, fails --strict, and every cell
    it judged gets the outcome worked out from its counts."""
    expected = _reference(a_cells, b_cells)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = _write(Path(tmp), "run-a", a_cells), _write(Path(tmp), "run-b", b_cells)
        shared = set(a_cells) & set(b_cells)
        both_ok = [c for c in shared if a_cells[c]["status"] == b_cells[c]["status"] == "ok"]
        alike = [c for c in both_ok if a_cells[c]["flag"] == b_cells[c]["flag"]]
        try:
            result = compare_runs(a, b)
        except ConfigError as e:
            said = str(e)
            assert "\n" not in said
            if not shared:
                assert "have no cell in common" in said
            elif not alike:
                assert both_ok and "ran every shared cell differently" in said
            else:
                assert "scored no question or sample in common" in said
                assert all(not set(a_cells[c]["questions"]) & set(b_cells[c]["questions"]) for c in alike)
            return
    outcomes = {cell.id: [c.outcome for c in cell.checks] for cell in result.cells}
    for cell_id, outcome in expected.items():
        if outcome is None:
            assert cell_id in result.unjudged
            assert not {"PASS", "FAIL", "INCONCLUSIVE"} & set(outcomes[cell_id])
        else:
            assert outcomes[cell_id] == [outcome], (cell_id, outcomes)
    assert set(result.unjudged) == {c for c, o in expected.items() if o is None}
    line, n = headline(result), len(result.cells)
    held = sum(o == "PASS" for o in expected.values())
    said_held = re.search(r"(all|\d+)(?: of \d+)? cells held", line)
    if said_held:
        assert int(said_held.group(1) if said_held.group(1) != "all" else n) == held
    if result.unjudged:
        assert f"{len(result.unjudged)} of {n} cells not judged: " in line
        assert all(cell in line for cell in result.unjudged[:NAMED_IDS])
        assert verdict_line(result)[0] is False and strict_exit_code(result) != EXIT_OK
