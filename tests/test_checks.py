"""PASS, FAIL or INCONCLUSIVE per threshold and cell, from stored cells (no engine): what each
outcome needs, the family adjustment across cells, equivalence, and the exit codes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import parse_config
from evalkit.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_THRESHOLD, ConfigError
from evalkit.render.checks import check_lines
from evalkit.store import write_json, write_jsonl
from evalkit.verdict.deltas import strict_exit_code, summarize
from evalkit.verdict.summary import RunSummary


def make_run(tmp_path: Path, n: int, cells: dict[str, tuple[int, int]]) -> Path:
    """A baseline `base` right on questions 20.. (wrong on the first 20), and cells that, against
    it, lose `lost` of its right questions and gain `gained` of its wrong ones."""
    run = tmp_path / "run"
    ids = ["base", *cells]
    write_json(run / "run.json", {"run_id": "run", "model": "m", "engine": "sim", "status": "complete", "cells": ids,
                                  "config_path": "cfg.yaml", "config": {}})
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
    assert strict_exit_code(RunSummary.model_validate(small)) == EXIT_INCONCLUSIVE
    assert strict_exit_code(RunSummary.model_validate(summary)) == EXIT_OK
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


def test_a_detect_only_check_passes_when_it_could_see_the_change_it_exists_to_catch(tmp_path: Path) -> None:
    # 50 questions, one flipped each way: MDE ~25 points, far above 2 x a 2-point margin
    run = make_run(tmp_path / "healthy", 50, {"c": (1, 1)})
    assert outcomes(summarize(run, config(["c"])))["c"] == "INCONCLUSIVE"
    assert outcomes(summarize(run, config(["c"], detects=0.3)))["c"] == "PASS"  # it sees a 30-point drop
    unsure = summarize(run, config(["c"], detects=0.2))["cells"][1]["checks"][0]
    assert unsure["outcome"] == "INCONCLUSIVE" and unsure["n_needed"] > 50  # the n a 20-point drop needs
    # a significant drop past the margin still FAILs: 15 of 30 right answers lost, none gained
    assert outcomes(summarize(make_run(tmp_path / "broken", 50, {"c": (15, 0)}), config(["c"], detects=0.3)))["c"] == "FAIL"


def test_detects_is_refused_where_it_has_no_test_or_is_below_the_margin() -> None:
    for rule, words in (({"detects": 0.2, "alpha": None}, "detects: only a max_drop_* or max_rise_* check with alpha"),
                        ({"detects": 0.01}, "detects: 0.01 is below the margin max_drop_vs_baseline: 0.02")):
        with pytest.raises(ConfigError, match=re.escape(words)):
            config(["c"], **rule)


def test_an_inconclusive_threshold_says_once_what_the_run_saw_what_the_margin_asks_and_the_key(tmp_path: Path) -> None:
    run = make_run(tmp_path, 50, {"c1": (1, 1), "c2": (1, 1)})
    summary = RunSummary.model_validate(summarize(run, config(["c1", "c2"])))
    (line,) = check_lines(summary)
    needed = summary.cells[1].checks[0].n_needed  # type: ignore[index]
    assert line.startswith("#1 gsm8k.flexible max_drop_vs_baseline 0.02 alpha 0.01 (Holm over 2 cells): 0 PASS, "
                           "2 INCONCLUSIVE, 0 FAIL. 2 cells (c1, c2): 50 questions per cell see a drop of ")
    # 4% of the questions flip: a 2-point margin needs more questions than GSM8K has, all 1319 the most to run
    assert (f"points or more (power 80% at alpha 0.01), more than 2 x its margin of 2.0 points; the margin asks for "
            f"n ≈ {needed}, more than the 1319 questions gsm8k holds (this run scored 50; without --limit and with "
            "evals.gsm8k.limit unset, a run scores all 1319), or widen the margin to 0.13") in line and needed > 1319
    assert line.count("50 questions") == 1  # said once for the threshold, not once per cell
