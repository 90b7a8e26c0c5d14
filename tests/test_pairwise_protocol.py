"""A PAIRWISE metric (a value measured between two cells by the eval that owns it) goes through
the verdicts, thresholds, every report format and the run comparison with no edit to any of them.

The toy eval here stores one text per sample and measures, between two cells, the share of
characters that differ; texts of different lengths cannot be compared and are refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import parse_config
from evalkit.errors import EXIT_OK, EXIT_THRESHOLD, ConfigError
from evalkit.evals import registry
from evalkit.evals.base import Comparison, Eval, EvalSettings, MetricDisplay, MetricSpec, fingerprint
from evalkit.render import render, render_compare
from evalkit.store import read_jsonl, write_json, write_jsonl
from evalkit.verdict.compare import compare_runs
from evalkit.verdict.deltas import summarize


class Letters(Eval):
    """Share of characters that differ between two cells' texts (a toy divergence), and that agree."""

    name = "letters"
    settings_model = EvalSettings
    default_enabled = False
    metrics = (
        MetricSpec("letters.mismatch", Comparison.PAIRWISE,
                   MetricDisplay("letter mismatch", key="mismatch", delta_label="mismatch", details="worst"),
                   higher_is_better=False, noise_floor=lambda raw: raw.get("floor")),
        MetricSpec("letters.same", Comparison.PAIRWISE, MetricDisplay("letters alike", key="same", delta_label="alike")),
    )

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return {"letters.n": raw["n"]}

    def pairwise(self, metric: MetricSpec, this_dir: Path, ref_dir: Path) -> dict[str, Any] | None:
        mine, theirs = (list(read_jsonl(d / self.samples_file)) for d in (this_dir, ref_dir))
        worst, differing, total = [], 0, 0
        for a, b in zip(mine, theirs):
            if len(a["text"]) != len(b["text"]):
                return {"diff": None, "p_value": None, "refused": f"sample {a['id']}: lengths differ"}
            for at, (x, y) in enumerate(zip(a["text"], b["text"])):
                total += 1
                if x != y:
                    differing += 1
                    worst.append({"id": a["id"], "at": at, "value": 1.0, "before": a["text"][:at], "here": x,
                                  "after": a["text"][at + 1:]})
        if metric.name == "letters.same":  # an agreement: 1 against itself
            return {"diff": -differing / total, "value": 1 - differing / total, "p_value": None}
        return {"diff": differing / total, "p_value": None, "worst": worst[:3]}


@pytest.fixture(scope="module", autouse=True)
def letters_eval() -> Iterator[Letters]:
    ev = registry.register(Letters())
    yield ev
    registry.unregister(ev.name)


TEXTS = {"fixon": "abcdefghij", "fixoff": "abcXefghYj", "short": "abc"}


def config(thresholds: list[dict[str, Any]]) -> Any:
    return parse_config({
        "model": "m", "engine": {"profile": "sim"},
        "axes": {"fix": {"fixon": {"args": ["-a"]}, "fixoff": {"args": ["-b"]}, "short": {"args": ["-c"]}}},
        "baseline": {"fix": "fixon"}, "ab": {"axis": "fix", "on": "fixon", "off": "fixoff"},
        "evals": {"letters": {}}, "thresholds": thresholds,
    }, "cfg.yaml")


def make_run(root: Path, run_id: str, texts: dict[str, str], floor: float | None = None) -> Path:
    run = root / run_id
    write_json(run / "run.json", {"run_id": run_id, "model": "m", "engine": "sim", "status": "complete",
                                  "cells": list(texts), "config_path": "cfg.yaml", "config": {}})
    for cell_id, text in texts.items():
        write_jsonl(run / cell_id / "letters.samples.jsonl", [{"id": "t-1", "text": text}])
        raw = {"n": 1, "floor": floor, "setup": fingerprint({"texts": "v1"})}
        write_json(run / cell_id / "cell.json", {"id": cell_id, "axes": {"fix": cell_id}, "status": "ok",
                                                  "metrics": {"letters": raw}})
    return run


def cell(summary: dict[str, Any], cell_id: str) -> dict[str, Any]:
    return next(c for c in summary["cells"] if c["id"] == cell_id)


def test_the_owning_eval_measures_it_between_each_cell_and_its_references(tmp_path: Path) -> None:
    summary = summarize(make_run(tmp_path, "r", TEXTS), config([]))
    off = cell(summary, "fixoff")
    assert off["vs_baseline"]["letters.mismatch"]["diff"] == pytest.approx(0.2)
    assert off["vs_ab"]["letters.mismatch"]["diff"] == pytest.approx(0.2)  # the twin is the baseline here
    assert [w["at"] for w in off["vs_baseline"]["letters.mismatch"]["worst"]] == [3, 8]
    assert "letters.mismatch" not in off["metrics"]  # no cell holds it alone
    assert cell(summary, "short")["vs_baseline"]["letters.mismatch"]["refused"] == "sample t-1: lengths differ"


def test_max_rise_breaks_on_the_value_unless_the_noise_floor_covers_it(tmp_path: Path) -> None:
    rule = [{"metric": "letters.mismatch", "max_rise_vs_baseline": 0.1}]
    summary = summarize(make_run(tmp_path, "r", {k: TEXTS[k] for k in ("fixon", "fixoff")}), config(rule))
    assert summary["exit_code"] == EXIT_THRESHOLD
    assert [f["message"] for f in cell(summary, "fixoff")["flags"]] == [
        "fixoff: letter mismatch vs baseline fixon 0.2 (rise 0.2 > 0.1)"]
    quiet = summarize(make_run(tmp_path, "q", {k: TEXTS[k] for k in ("fixon", "fixoff")}, floor=0.25), config(rule))
    assert quiet["exit_code"] == EXIT_OK
    assert cell(quiet, "fixoff")["vs_baseline"]["letters.mismatch"]["noise_floor"] == 0.25


def test_an_agreement_drops_from_one_and_max_drop_reads_that_drop(tmp_path: Path) -> None:
    rule = [{"metric": "letters.same", "max_drop_ab": 0.1}]
    summary = summarize(make_run(tmp_path, "r", {k: TEXTS[k] for k in ("fixon", "fixoff")}), config(rule))
    assert cell(summary, "fixoff")["vs_ab"]["letters.same"]["value"] == pytest.approx(0.8)
    assert [f["message"] for f in cell(summary, "fixoff")["flags"]] == [
        "fixoff: letters alike vs fix-on twin fixon 0.8 (drop 0.2 > 0.1)"]


def test_a_refused_comparison_is_flagged_never_passed(tmp_path: Path) -> None:
    summary = summarize(make_run(tmp_path, "r", TEXTS),
                        config([{"metric": "letters.mismatch", "max_rise_vs_baseline": 0.5}]))
    (flag,) = cell(summary, "short")["flags"]
    assert flag["message"] == "short: letter mismatch not compared with fixon: sample t-1: lengths differ"
    assert flag["refused"] == "sample t-1: lengths differ"


@pytest.mark.parametrize("rule, words", [
    ({"min": 0.1}, "min: letters.mismatch is measured between two cells: use max_rise_vs_baseline or max_rise_ab"),
    ({"max_drop_ab": 0.1}, "max_drop_ab: letters.mismatch is measured between two cells"),
    ({"max_rise_ab": 0.1, "metric": "letters.same"}, "max_rise_ab: letters.same is measured between two cells: use "
                                                     "max_drop_vs_baseline"),
    ({"max_rise_ab": 0.1, "alpha": 0.01}, "alpha: letters.mismatch has no test"),
])
def test_a_rule_that_could_never_break_on_it_is_a_config_error(rule: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=rf"cfg.yaml: thresholds.0.*{words}"):
        config([{"metric": "letters.mismatch"} | rule])


def test_every_report_format_shows_it_as_a_value_between_cells(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r", TEXTS)
    summary = summarize(run, config([]))
    markdown = render(summary, "markdown", run)
    assert "| mismatch vs baseline | mismatch vs twin | alike vs baseline | alike vs twin |" in markdown
    rows = {line.split(" | ")[0]: line for line in markdown.splitlines() if line.startswith("| ")}
    assert rows["| fixoff"].endswith("| 0.2 | 0.2 | 0.8 | 0.8 |")
    assert rows["| short"].endswith("| not compared | - | not compared | - |")
    assert "#### Letter mismatch: worst places" in markdown and "abc⟦X⟧efghYj" in markdown
    assert "mismatch, alike: measured between the cell's and its reference's outputs" in markdown
    page = render(summary, "html", run)
    assert 'abc<mark class="onset">X</mark>efghYj' in page and "sample t-1: lengths differ" in page
    header = render(summary, "csv", run).splitlines()[0].split(",")
    assert "vs_baseline.letters.mismatch.diff" in header and "letters.mismatch" not in header
    assert json.loads(render(summary, "json", run))["cells"][1]["vs_ab"]["letters.mismatch"]["diff"] == pytest.approx(0.2)


def test_two_runs_compare_each_cell_with_itself_through_the_same_hook(tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", {"fixon": "abcdefghij"})
    b = make_run(tmp_path, "b", {"fixon": "Abcdefghij"})
    result = compare_runs(a, b)
    mismatch = result.cells[0].delta("letters.mismatch")
    assert mismatch is not None and mismatch.diff == pytest.approx(0.1)
    markdown = render_compare(result, "markdown")
    header, _, row = next(block for block in markdown.split("\n\n") if block.startswith("| ")).splitlines()[:3]
    column = header.split(" | ").index("mismatch B vs A")
    assert row.split(" | ")[0] == "| fixon" and row.split(" | ")[column] == "0.1"
