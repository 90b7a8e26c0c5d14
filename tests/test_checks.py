"""PASS, FAIL or INCONCLUSIVE per threshold and cell, from stored cells (no engine): what each
outcome needs, the family adjustment across cells, equivalence, and the exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.config import parse_config
from evalkit.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_THRESHOLD
from evalkit.store import write_json, write_jsonl
from evalkit.verdict.deltas import strict_exit_code, summarize


def make_run(tmp_path: Path, n: int, cells: dict[str, tuple[int, int]]) -> Path:
    """A baseline `base` right on questions 20.. (wrong on the first 20), and cells that, against
    it, lose `lost` of its right questions and gain `gained` of its wrong ones."""
    run = tmp_path / "run"
    ids = ["base", *cells]
    write_json(run / "run.json", {"run_id": "run", "model": "m", "engine": "sim", "status": "complete", "cells": ids})
    for cell_id, (lost, gained) in {"base": (0, 0), **cells}.items():
        marks = [(i >= 20 and not 20 <= i < 20 + lost) or i < gained for i in range(n)]
        write_jsonl(run / cell_id / "gsm8k.samples.jsonl",
                    [{"id": f"test-{i}", "strict-match.correct": m, "flexible-extract.correct": m} for i, m in enumerate(marks)])
        acc = sum(marks) / n
        write_json(run / cell_id / "cell.json", {"id": cell_id, "axes": {"a": cell_id}, "status": "ok",
                                                  "metrics": {"gsm8k": {"strict": acc, "flexible": acc, "n": n}}})
    return run


def config(cells: list[str], **threshold: Any) -> Any:
    rule = {"metric": "gsm8k.flexible", "max_drop_vs_baseline": 0.02, "alpha": 0.01} | threshold
    multiplicity = rule.pop("multiplicity", "holm")
    return parse_config({"model": "m", "engine": {"profile": "sim"},
                         "axes": {"a": {c: {"args": [f"-{c}"]} for c in ["base", *cells]}},
                         "baseline": {"a": "base"}, "thresholds": [rule], "multiplicity": multiplicity}, "cfg")


def outcomes(summary: dict[str, Any]) -> dict[str, str]:
    return {cell["id"]: check["outcome"] for cell in summary["cells"] for check in cell["checks"]}


def test_a_healthy_cell_passes_only_when_its_test_could_have_seen_the_margin(tmp_path: Path) -> None:
    # 2000 questions, 10 flipped each way: MDE at alpha 0.01 ~1 point < 2 x 2 points: PASS
    summary = summarize(make_run(tmp_path / "big", 2000, {"c": (10, 10)}), config(["c"]))
    (check,) = summary["cells"][1]["checks"]
    assert check["outcome"] == "PASS" and check["mde"] < 0.04 and check["p"] == check["p_adj"] == 1.0
    # the same cell on 50 questions: the test could not see a 4-point drop (MDE ~25 points)
    small = summarize(make_run(tmp_path / "small", 50, {"c": (1, 1)}), config(["c"]))
    (check,) = small["cells"][1]["checks"]
    assert check["outcome"] == "INCONCLUSIVE" and check["mde"] > 0.04 and check["n_needed"] > 50
    assert small["exit_code"] == EXIT_OK and small["inconclusive_checks"] == 1
    assert strict_exit_code(small) == EXIT_INCONCLUSIVE and strict_exit_code(summary) == EXIT_OK
    assert small["cells"][1]["flags"] == []  # flags stay "broken or warned"


def test_the_inconclusive_factor_is_how_far_the_mde_may_exceed_the_margin(tmp_path: Path) -> None:
    run = make_run(tmp_path, 1319, {"c": (22, 22)})  # ~3.3% discordant: MDE ~2.3 points
    assert outcomes(summarize(run, config(["c"])))["c"] == "PASS"  # default factor 2 (NeMo's)
    assert outcomes(summarize(run, config(["c"], inconclusive_factor=1)))["c"] == "INCONCLUSIVE"


def test_a_drop_beyond_the_margin_without_significance_is_inconclusive_not_pass(tmp_path: Path) -> None:
    # 400 questions: 12 lost, 2 gained = -2.5 points, McNemar p = 0.013 > 0.01
    summary = summarize(make_run(tmp_path, 400, {"c": (12, 2)}), config(["c"]))
    assert outcomes(summary)["c"] == "INCONCLUSIVE" and summary["exit_code"] == EXIT_OK


def test_holm_adjusts_each_threshold_across_its_cells(tmp_path: Path) -> None:
    # c1 loses 12 (p = 2^-11 = 0.00049 alone), nine healthy cells: Holm multiplies the smallest p by 10
    cells = {"c1": (12, 0), **{f"h{i}": (3, 3) for i in range(9)}}
    run = make_run(tmp_path, 400, cells)
    holm = summarize(run, config(list(cells), alpha=0.001))
    none = summarize(run, config(list(cells), alpha=0.001, multiplicity="none"))
    (c1,) = next(c for c in holm["cells"] if c["id"] == "c1")["checks"]
    assert c1["p_adj"] == min(1.0, 10 * c1["p"]) and c1["family"] == 10 and c1["multiplicity"] == "holm"
    assert outcomes(none)["c1"] == "FAIL" and none["exit_code"] == EXIT_THRESHOLD
    assert outcomes(holm)["c1"] == "INCONCLUSIVE" and holm["exit_code"] == EXIT_OK
    (flag,) = [f for c in none["cells"] for f in c["flags"]]
    assert flag["message"].endswith("McNemar p = 0.00049 < 0.001")


def test_a_plain_failure_still_fails_after_holm_and_says_both_p_values(tmp_path: Path) -> None:
    cells = {"c1": (40, 0), "h": (3, 3)}
    summary = summarize(make_run(tmp_path, 400, cells), config(list(cells)))
    assert outcomes(summary) == {"c1": "FAIL", "h": "PASS"} and summary["exit_code"] == EXIT_THRESHOLD
    (flag,) = summary["cells"][1]["flags"]
    assert "McNemar p = 1.8e-12, Holm p = 3.6e-12 < 0.01" in flag["message"]


def test_equivalence_passes_only_inside_the_margin_and_fails_when_shown_outside(tmp_path: Path) -> None:
    cells = {"same": (10, 10), "moved": (60, 0), "unsure": (2, 1)}
    run = make_run(tmp_path, 2000, cells)
    rule = {"max_drop_vs_baseline": None, "equivalent_vs_baseline": 0.02, "alpha": 0.05}
    summary = summarize(run, config(list(cells), **rule))
    assert outcomes(summary) == {"same": "PASS", "moved": "FAIL", "unsure": "PASS"}
    small = summarize(make_run(tmp_path / "small", 100, {"unsure": (2, 1)}), config(["unsure"], **rule))
    (check,) = small["cells"][1]["checks"]
    assert check["outcome"] == "INCONCLUSIVE" and check["n_needed"] > 100 and check["ci"][0] < -0.02
    (flag,) = summary["cells"][2]["flags"]
    assert "outside ±2 points (90% CI" in flag["message"]
