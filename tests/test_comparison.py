"""verdict/compare.py: two runs of one matrix, per cell B - A, with exact tests on known marks.

The runs are hand-made folders (tests/helpers/runs.py (write_run)) whose GSM8K marks and
collapse counts are set per question here, so every expected number is worked out from them
and the p-values are checked against scipy on the same tables.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from scipy.stats import binomtest, fisher_exact

from evalkit.errors import ConfigError
from evalkit.store import read_json, write_json, write_jsonl
from evalkit.verdict.compare import compare_runs
from tests.helpers.runs import QUESTIONS, CellSpec, write_run


def set_marks(run_path: Path, cell_id: str, flexible_wrong: set[int], strict_wrong: set[int] | None = None,
              questions: range = range(QUESTIONS)) -> None:
    """Give a cell these GSM8K marks (question `test-<i>` for i in `questions`; the rest right)."""
    strict_wrong = flexible_wrong if strict_wrong is None else strict_wrong
    rows = [{"doc_id": i, "id": f"test-{i}", "target": f"#### {i}", "response": f"#### {i}",
             "strict-match.correct": i not in strict_wrong, "flexible-extract.correct": i not in flexible_wrong}
            for i in questions]
    write_jsonl(run_path / cell_id / "gsm8k.samples.jsonl", rows)
    record = read_json(run_path / cell_id / "cell.json")
    n = len(questions)
    record["metrics"]["gsm8k"] = {"strict": sum(r["strict-match.correct"] for r in rows) / n,
                                  "flexible": sum(r["flexible-extract.correct"] for r in rows) / n, "n": n}
    write_json(run_path / cell_id / "cell.json", record)


def set_collapses(run_path: Path, cell_id: str, collapsed: int, n: int) -> None:
    record = read_json(run_path / cell_id / "cell.json")
    record["metrics"]["repetition"] = {"collapse_rate": collapsed / n, "collapsed": collapsed, "n": n}
    write_json(run_path / cell_id / "cell.json", record)


def two_runs(tmp_path: Path, a_cells: dict[str, CellSpec], b_cells: dict[str, CellSpec]) -> tuple[Path, Path]:
    a, _ = write_run(tmp_path, "run-a", a_cells)
    b, _ = write_run(tmp_path, "run-b", b_cells)
    return a, b


def compared(a: Path, b: Path) -> dict:
    """B against A as `--format json` has it (the comparison's dump)."""
    return compare_runs(a, b).dump()


def row(result: dict, cell_id: str) -> dict:
    (found,) = [c for c in result["cells"] if c["id"] == cell_id]
    return found


def ids(numbers: list[int]) -> list[str]:
    return [f"test-{i}" for i in numbers]


def test_paired_metrics_are_b_minus_a_with_mcnemar_on_the_discordant_questions(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path, {"tp8-fixon": CellSpec()}, {"tp8-fixon": CellSpec()})
    set_marks(a, "tp8-fixon", flexible_wrong={0, 1, 3, 11}, strict_wrong={4})
    set_marks(b, "tp8-fixon", flexible_wrong={2, 9, 10, 11, 15, 17}, strict_wrong={4})
    cell = row(compared(a, b), "tp8-fixon")
    flexible = cell["gsm8k.flexible"]
    # A right on 16, B on 14: B - A = -2/20. Discordant: 3 right only in B, 5 right only in A.
    assert flexible["diff"] == pytest.approx(14 / 20 - 16 / 20)
    assert flexible["n"] == 20
    assert flexible["flipped_to_right"] == ids([0, 1, 3])
    assert flexible["flipped_to_wrong"] == ids([2, 9, 10, 15, 17])  # question order, not "test-10" < "test-2"
    assert flexible["p_value"] == pytest.approx(binomtest(3, 8, 0.5).pvalue)
    low, high = flexible["ci95"]
    assert -1 <= low < flexible["diff"] < high <= 1
    # strict has its own marks: the same in both runs, so no change and nothing flipped
    assert cell["gsm8k.strict"] == {"diff": 0.0, "p_value": 1.0, "ci95": cell["gsm8k.strict"]["ci95"], "n": 20,
                                    "flipped_to_wrong": [], "flipped_to_right": []}
    assert (cell["a"]["gsm8k.flexible"], cell["b"]["gsm8k.flexible"]) == (0.8, 0.7)


def test_swapping_the_runs_negates_the_diff_and_swaps_the_flips(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path, {"tp8-fixon": CellSpec()}, {"tp8-fixon": CellSpec()})
    set_marks(a, "tp8-fixon", flexible_wrong={0, 5, 6, 7, 8})
    set_marks(b, "tp8-fixon", flexible_wrong={5})
    forward = row(compared(a, b), "tp8-fixon")["gsm8k.flexible"]
    backward = row(compared(b, a), "tp8-fixon")["gsm8k.flexible"]
    assert forward["diff"] == pytest.approx(4 / 20) and backward["diff"] == pytest.approx(-4 / 20)
    assert forward["flipped_to_right"] == backward["flipped_to_wrong"] == ids([0, 6, 7, 8])
    assert forward["flipped_to_wrong"] == backward["flipped_to_right"] == []
    assert forward["p_value"] == backward["p_value"] == pytest.approx(binomtest(4, 4, 0.5).pvalue)


def test_collapse_rate_delta_is_b_minus_a_with_a_two_sided_fisher_test(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path, {"dp8-fixoff": CellSpec()}, {"dp8-fixoff": CellSpec()})
    set_collapses(a, "dp8-fixoff", collapsed=1, n=16)
    set_collapses(b, "dp8-fixoff", collapsed=7, n=16)
    rise = row(compared(a, b), "dp8-fixoff")["repetition.collapse_rate"]
    fall = row(compared(b, a), "dp8-fixoff")["repetition.collapse_rate"]
    table = [[7, 9], [1, 15]]  # B's collapsed/healthy over A's
    assert rise["diff"] == pytest.approx(6 / 16) and fall["diff"] == pytest.approx(-6 / 16)
    assert rise["p_value"] == pytest.approx(fisher_exact(table, alternative="two-sided")[1])
    assert rise["p_greater"] == pytest.approx(fisher_exact(table, alternative="greater")[1])
    # a fall is as significant as the same rise: the p-value that counts is two-sided
    assert fall["p_value"] == pytest.approx(rise["p_value"])
    assert fall["p_greater"] == pytest.approx(fisher_exact([[1, 15], [7, 9]], alternative="greater")[1])
    assert fall["p_greater"] > 0.9 > rise["p_value"]


def test_a_collapse_delta_needs_collapse_counts_in_both_runs(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path, {"tp8-fixon": CellSpec()}, {"tp8-fixon": CellSpec()})
    set_collapses(b, "tp8-fixon", collapsed=2, n=8)
    assert row(compared(a, b), "tp8-fixon")["repetition.collapse_rate"] is None


def test_runs_with_limit_pair_on_the_questions_both_answered(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path, {"tp8-fixon": CellSpec()}, {"tp8-fixon": CellSpec()})
    set_marks(a, "tp8-fixon", flexible_wrong={1, 12, 13, 14, 15})  # the full 20 questions
    set_marks(b, "tp8-fixon", flexible_wrong={5, 6, 7}, questions=range(8))  # --limit 8
    write_json(b / "run.json", read_json(b / "run.json") | {"limit": 8})
    result = compared(a, b)
    flexible = row(result, "tp8-fixon")["gsm8k.flexible"]
    # on test-0..7 only: A right 7/8, B right 5/8 (A's misses on 12-15 do not count)
    assert flexible["n"] == 8
    assert flexible["diff"] == pytest.approx(5 / 8 - 7 / 8)
    assert flexible["flipped_to_wrong"] == ids([5, 6, 7]) and flexible["flipped_to_right"] == ids([1])
    assert flexible["p_value"] == pytest.approx(binomtest(1, 4, 0.5).pvalue)
    assert (result["a"]["limit"], result["b"]["limit"]) == (QUESTIONS, 8)


def test_a_cell_sharing_no_question_is_not_compared_and_says_why(tmp_path: Path) -> None:
    """Not a diff of 0, and not silence either: the delta says nothing was shared."""
    a, b = two_runs(tmp_path, {"tp8-fixon": CellSpec(), "dp8-fixon": CellSpec()},
                    {"tp8-fixon": CellSpec(), "dp8-fixon": CellSpec()})
    set_marks(a, "tp8-fixon", flexible_wrong=set(), questions=range(0, 10))
    set_marks(b, "tp8-fixon", flexible_wrong={12}, questions=range(10, 20))
    cell = row(compared(a, b), "tp8-fixon")
    for metric in ("gsm8k.flexible", "gsm8k.strict"):
        assert cell[metric] == {"diff": None, "p_value": None, "refused": "no question or sample scored by both"}


def test_runs_sharing_no_question_at_all_are_refused_in_one_line(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path, {"tp8-fixon": CellSpec()}, {"tp8-fixon": CellSpec()})
    set_marks(a, "tp8-fixon", flexible_wrong=set(), questions=range(0, 10))
    set_marks(b, "tp8-fixon", flexible_wrong={12}, questions=range(10, 20))
    with pytest.raises(ConfigError, match=r"^A \(run-a, limit 20\) and B \(run-b, limit 20\) scored no question "
                                          r"or sample in common: nothing to compare$"):
        compare_runs(a, b)


def test_cells_only_in_one_run_are_listed_without_deltas(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path, {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec(right=12)},
                    {"tp8-fixon": CellSpec(right=18), "dp8-fixon": CellSpec(right=15)})
    cells = compared(a, b)["cells"]
    assert [(c["id"], c["in"], c["status_a"], c["status_b"]) for c in cells] == [
        ("tp8-fixon", "both", "ok", "ok"), ("tp8-fixoff", "a", "ok", None), ("dp8-fixon", "b", None, "ok")]
    both, only_a, only_b = cells
    assert both["gsm8k.flexible"]["diff"] == pytest.approx(-2 / 20)
    assert only_a["axes"] == {"parallel": "tp8", "fix": "fixoff"}
    assert only_b["axes"] == {"parallel": "dp8", "fix": "fixon"}
    assert only_a["a"]["gsm8k.flexible"] == 0.6 and only_a["b"] == {}
    assert only_b["a"] == {} and only_b["b"]["gsm8k.flexible"] == 0.75
    for one_sided in (only_a, only_b):
        assert not {"gsm8k.flexible", "gsm8k.strict", "repetition.collapse_rate"} & set(one_sided)


def test_a_cell_that_failed_or_never_ran_in_one_run_is_not_compared(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path, {"tp8-fixon": CellSpec(), "tp8-fixoff": CellSpec(), "dp8-fixon": CellSpec()},
                    {"tp8-fixon": CellSpec(status="error", error="engine exited 1"),
                     "tp8-fixoff": CellSpec(), "dp8-fixon": CellSpec(status="error")})
    shutil.rmtree(b / "tp8-fixoff")  # planned in B, but B was interrupted before it ran
    result = compared(a, b)
    assert [(c["id"], c["in"], c["status_a"], c["status_b"]) for c in result["cells"]] == [
        ("tp8-fixon", "both", "ok", "error"), ("tp8-fixoff", "both", "ok", "not run"),
        ("dp8-fixon", "both", "ok", "error")]
    for cell in result["cells"]:
        assert cell["a"]["gsm8k.flexible"] == 1.0 and cell["b"] == {}
        assert not {"gsm8k.flexible", "gsm8k.strict", "repetition.collapse_rate"} & set(cell)
    swapped = compared(b, a)["cells"]
    assert [(c["status_a"], c["status_b"]) for c in swapped] == [("error", "ok"), ("not run", "ok"), ("error", "ok")]
    assert not any("gsm8k.flexible" in c for c in swapped)


def test_run_metadata_names_both_runs_and_never_a_secret(tmp_path: Path) -> None:
    a, b = two_runs(tmp_path, {"tp8-fixon": CellSpec(source_sha="bbb"), "tp8-fixoff": CellSpec(source_sha="aaa")},
                    {"tp8-fixon": CellSpec(source_sha="ccc"), "tp8-fixoff": CellSpec(source_sha="ccc")})
    result = compared(a, b)
    assert result["a"]["run_id"] == "run-a" and result["b"]["run_id"] == "run-b"
    assert result["a"]["model"] == "sim/test-model" and result["a"]["engine"] == "sim"
    assert result["a"]["status"] == "complete" and result["a"]["simulated"] is True
    assert result["a"]["source_shas"] == ["aaa", "bbb"] and result["b"]["source_shas"] == ["ccc"]
    assert result["a"]["command"][-2:] == ["--api-key", "***"]
    text = json.dumps(result)
    for secret in ("sk-cmd-secret", "sk-launch-secret", "hunter2"):
        assert secret not in text
