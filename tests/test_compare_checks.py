"""`evalkit compare` judges run B against run A with the matrix's checks: per cell, B's config's
delta thresholds against A's cell, PASS, FAIL or INCONCLUSIVE with the MDE, p-values adjusted
across the cells, the same words in every format and the matrix's exit codes.

The runs are hand-made folders whose GSM8K marks are set per question, so each outcome follows
from the counts: 2000 questions with 10 flipped each way (MDE about 1 point: PASS), 200 lost
(a 10-point drop: FAIL), 50 questions with one flip each way (MDE far above the margin:
INCONCLUSIVE).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from junitparser import JUnitXml

from evalkit.cli import main
from evalkit.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_THRESHOLD
from evalkit.verdict.compare import compare_runs
from evalkit.verdict.summary import RunComparison
from tests.helpers.runs import CellSpec, config_dict, write_run
from tests.test_comparison import set_marks

THRESHOLDS = [{"metric": "gsm8k.flexible", "min": 0.5},
              {"metric": "gsm8k.flexible", "max_drop_ab": 0.02, "alpha": 0.01},
              {"metric": "gsm8k.flexible", "max_drop_vs_baseline": 0.02, "alpha": 0.01}]
RULE = "gsm8k.flexible max_drop 0.02 alpha 0.01"
"""The rule as a comparison with one reference states it (the `_ab` and `_vs_baseline` forms are one)."""


def runs(tmp_path: Path, wrong: dict[str, tuple[set[int], set[int], int]],
         thresholds: list[dict] = THRESHOLDS) -> tuple[Path, Path]:
    """Run A and run B with the same cells, each cell's (A's wrong questions, B's, n)."""
    cells = dict.fromkeys(wrong, CellSpec())
    a, _ = write_run(tmp_path, "run-a", cells, config_dict(thresholds=thresholds))
    b, _ = write_run(tmp_path, "run-b", cells, config_dict(thresholds=thresholds))
    for cell_id, (a_wrong, b_wrong, n) in wrong.items():
        set_marks(a, cell_id, a_wrong, questions=range(n))
        set_marks(b, cell_id, b_wrong, questions=range(n))
    return a, b


HEALTHY = (set(range(100)), set(range(10, 110)), 2000)  # 10 flipped each way of 2000
DROPPED = (set(range(100)), set(range(300)), 2000)  # 200 more wrong: a 10-point drop
SMALL = ({0}, {1}, 50)  # one flipped each way of 50


def outcomes(result: RunComparison) -> dict[str, list[str]]:
    return {row.id: [c.outcome for c in row.checks] for row in result.cells}


def test_each_cell_is_pass_fail_or_inconclusive_against_a(tmp_path: Path) -> None:
    a, b = runs(tmp_path, {"tp8-fixon": HEALTHY, "dp8-fixoff": DROPPED, "tp8-fixoff": SMALL})
    result = compare_runs(a, b)
    # one check per cell: both delta forms are one rule against A; `min` judges B alone, not the change
    assert outcomes(result) == {"tp8-fixon": ["PASS"], "dp8-fixoff": ["FAIL"], "tp8-fixoff": ["INCONCLUSIVE"]}
    checks = {row.id: row.checks[0] for row in result.cells}
    assert all(c.rule == RULE and c.reference == "run-a" and c.family == 3 for c in checks.values())
    tp8_fixon_mde, tp8_fixoff_mde = checks["tp8-fixon"].mde, checks["tp8-fixoff"].mde
    assert tp8_fixon_mde is not None and tp8_fixoff_mde is not None and tp8_fixon_mde < 0.02 < tp8_fixoff_mde
    assert (checks["tp8-fixoff"].n_needed or 0) > 50
    assert checks["dp8-fixoff"].diff == pytest.approx(-0.1) and (checks["dp8-fixoff"].p_adj or 1) < 0.01
    (flag,) = [f for row in result.cells for f in row.flags]
    assert flag.message.startswith("dp8-fixoff: GSM8K flexible 0.850 vs run A run-a 0.950, -10.0 points, McNemar p")
    assert result.check_outcomes == {"FAIL": 1, "INCONCLUSIVE": 1, "PASS": 1, "NOT_CHECKED": 0}
    assert (result.exit_code, result.broken_thresholds, result.inconclusive_checks) == (EXIT_THRESHOLD, 1, 1)


def test_an_equivalence_threshold_passes_only_what_is_shown_not_to_move(tmp_path: Path) -> None:
    rule = {"metric": "gsm8k.flexible", "equivalent_ab": 0.02, "alpha": 0.05}
    a, b = runs(tmp_path, {"tp8-fixon": HEALTHY, "dp8-fixoff": DROPPED, "tp8-fixoff": SMALL}, [rule])
    result = compare_runs(a, b)
    assert outcomes(result) == {"tp8-fixon": ["PASS"], "dp8-fixoff": ["FAIL"], "tp8-fixoff": ["INCONCLUSIVE"]}
    assert {c.rule for row in result.cells for c in row.checks} == {"gsm8k.flexible equivalent 0.02 alpha 0.05"}


def test_exit_status_follows_the_matrix_codes_and_strict_refuses_inconclusive(tmp_path: Path) -> None:
    a, b = runs(tmp_path, {"tp8-fixon": HEALTHY, "tp8-fixoff": SMALL})
    args = ["compare", str(a), str(b), "--format", "json"]
    plain, strict = CliRunner().invoke(main, args), CliRunner().invoke(main, [*args, "--strict"])
    assert plain.exit_code == EXIT_OK and strict.exit_code == EXIT_INCONCLUSIVE, plain.output
    assert json.loads(plain.output)["inconclusive_checks"] == 1
    healthy_only = runs(tmp_path / "healthy", {"tp8-fixon": HEALTHY})
    assert CliRunner().invoke(main, ["compare", *map(str, healthy_only), "--strict"]).exit_code == EXIT_OK
    dropped = runs(tmp_path / "dropped", {"dp8-fixoff": DROPPED, "tp8-fixoff": SMALL})
    assert CliRunner().invoke(main, ["compare", *map(str, dropped), "--strict"]).exit_code == EXIT_THRESHOLD


def test_every_format_says_pass_fail_or_inconclusive_with_the_mde(tmp_path: Path) -> None:
    a, b = runs(tmp_path, {"tp8-fixon": HEALTHY, "dp8-fixoff": DROPPED, "tp8-fixoff": SMALL})

    def shown(fmt: str, *more: str) -> str:
        done = CliRunner().invoke(main, ["compare", str(a), str(b), "--format", fmt, *more])
        assert done.exit_code == EXIT_THRESHOLD, done.output
        return done.output

    line = f"#1 {RULE} (Holm over 3 cells): 1 PASS, 1 INCONCLUSIVE, 1 FAIL. tp8-fixoff: "
    for fmt in ("terminal", "markdown", "html"):
        # the terminal folds long lines; markdown escapes `_` and bolds FAIL; HTML wraps it in <b>
        text = " ".join(shown(fmt).split()).replace("\\_", "_").replace("**", "").replace("<b>", "").replace("</b>", "")
        assert line in text and "FAIL dp8-fixoff: GSM8K flexible 0.850 vs run A run-a" in text, fmt
        assert "B against A: 1 threshold broken, 1 check INCONCLUSIVE" in text, fmt
    html = shown("html")  # the page's "flagged" filter finds the cell that FAILed
    assert 'data-cell="dp8-fixoff" data-status="ok" data-flagged="1"' in html and html.count('data-flagged="1"') == 1
    frame = pd.read_csv(io.StringIO(shown("csv"))).set_index("cell")
    assert frame["check.1.outcome"].to_dict() == {"tp8-fixon": "PASS", "dp8-fixoff": "FAIL", "tp8-fixoff": "INCONCLUSIVE"}
    assert frame.loc["tp8-fixoff", "check.1.mde"] > 0.04
    out = tmp_path / "compare.xml"
    shown("junit", "-o", str(out))
    suite = next(iter(JUnitXml.fromfile(str(out))))
    found = {c.classname.rsplit(".", 1)[-1]: (c.name, {type(r).__name__ for r in c.result}) for c in suite if c.name != "runs"}
    assert found == {"tp8-fixon": (f"{RULE} vs run-a", set()), "dp8-fixoff": (f"{RULE} vs run-a", {"Failure"}),
                     "tp8-fixoff": (f"{RULE} vs run-a", {"Skipped"})}
    skipped = next(r for c in suite if c.classname.endswith("tp8-fixoff") for r in c.result)
    assert skipped.message.startswith("inconclusive: not significant and underpowered (MDE")
