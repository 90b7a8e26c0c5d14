"""Verdicts from stored cells: paired deltas, thresholds with significance and the noise floor."""

from __future__ import annotations

from pathlib import Path

from evalkit.config import parse_config
from evalkit.errors import EXIT_OK, EXIT_THRESHOLD
from evalkit.store import write_json, write_jsonl
from evalkit.verdict.deltas import summarize

N = 400


def make_run(tmp_path: Path, wrong_in_cell: int, floor: float | None) -> Path:
    """Baseline right on every question; `cell` wrong on the first `wrong_in_cell` ones."""
    run = tmp_path / "run"
    write_json(run / "run.json", {"run_id": "run", "model": "m", "engine": "sim", "status": "complete",
                                  "config_path": "cfg.yaml", "config": {},
                                  "cells": ["base", "cell"]})
    for cell_id, wrong in (("base", 0), ("cell", wrong_in_cell)):
        rows = [{"id": f"test-{i}", "strict-match.correct": i >= wrong, "flexible-extract.correct": i >= wrong}
                for i in range(N)]
        write_jsonl(run / cell_id / "gsm8k.samples.jsonl", rows)
        acc = (N - wrong) / N
        gsm8k = {"strict": acc, "flexible": acc, "n": N}
        if floor is not None:
            gsm8k["repeats"] = {"n": 2, "noise_floor": {k: {"max_pairwise_diff": floor} for k in ("strict", "flexible")}}
        write_json(run / cell_id / "cell.json", {"id": cell_id, "axes": {"a": cell_id}, "status": "ok",
                                                  "metrics": {"gsm8k": gsm8k}})
    return run


CONFIG = parse_config({
    "model": "m", "engine": {"profile": "sim"},
    "axes": {"a": {"base": {"args": ["-x"]}, "cell": {"args": ["-y"]}}},
    "baseline": {"a": "base"},
    "thresholds": [{"metric": "gsm8k.flexible", "max_drop_vs_baseline": 0.02, "alpha": 0.01}],
}, "cfg")


def flags(summary: dict) -> list[str]:
    return [f["message"] for c in summary["cells"] for f in c["flags"]]


def test_a_significant_drop_beyond_the_limit_breaks_the_threshold(tmp_path: Path) -> None:
    summary = summarize(make_run(tmp_path, wrong_in_cell=20, floor=None), CONFIG)
    assert summary["exit_code"] == EXIT_THRESHOLD
    (message,) = flags(summary)
    assert message.startswith("cell: GSM8K flexible 0.950 vs baseline base 1.000, -5.0 points, McNemar p = ")
    delta = summary["cells"][1]["vs_baseline"]["gsm8k.flexible"]
    assert (delta["right_only_in_reference"], delta["right_only_in_cell"]) == (20, 0)
    assert delta["flipped_to_wrong"][:2] == ["test-0", "test-1"]


def test_a_drop_that_is_not_significant_does_not_count(tmp_path: Path) -> None:
    # 3 of 400 flipped: -0.75 points, under the limit. 9 of 400: -2.25 points, but McNemar p = 2^-8 = 0.0039 > 0.001.
    assert summarize(make_run(tmp_path, wrong_in_cell=3, floor=None), CONFIG)["exit_code"] == EXIT_OK
    loose = CONFIG.model_copy(update={"thresholds": [CONFIG.thresholds[0].model_copy(update={"alpha": 0.001})]})
    assert summarize(make_run(tmp_path, wrong_in_cell=9, floor=None), loose)["exit_code"] == EXIT_OK


def test_a_drop_inside_the_noise_floor_is_not_a_regression(tmp_path: Path) -> None:
    assert summarize(make_run(tmp_path, wrong_in_cell=20, floor=0.06), CONFIG)["exit_code"] == EXIT_OK
    assert summarize(make_run(tmp_path, wrong_in_cell=20, floor=0.01), CONFIG)["exit_code"] == EXIT_THRESHOLD
