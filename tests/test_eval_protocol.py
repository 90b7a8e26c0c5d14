"""An eval is one module: a toy eval registered here runs in every cell, lands in summary.json,
the report and the thresholds, with no edit to the runner, verdicts, store or report.

The toy eval asks the (real, simulated) server a few questions and counts the words of each
answer: a continuous metric (words per answer) and a paired per-prompt one (answer not empty).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from pydantic import Field

from evalkit.cli import main
from evalkit.config import parse_config
from evalkit.errors import ConfigError
from evalkit.evals import registry
from evalkit.evals.base import (
    Comparison,
    Eval,
    EvalContext,
    EvalDisplay,
    EvalResult,
    EvalSettings,
    MetricDisplay,
    MetricSpec,
)
from evalkit.evals.capabilities import (
    CellFlags,
    Checks,
    ExtraDelta,
    LifecycleRecorded,
    Pairwise,
    Prepares,
    ReadsEarlierCells,
    ScansEarlierTexts,
    Subsets,
    Unmeasured,
)
from evalkit.store import read_json, read_jsonl


class WordsSettings(EvalSettings):
    prompts: int = Field(3, ge=1, description="Questions asked per cell.")


class Words(Eval):
    """Counts the words of short answers."""

    name = "words"
    settings_model = WordsSettings
    default_enabled = False
    metrics = (
        MetricSpec("words.per_answer", Comparison.CONTINUOUS,
                   MetricDisplay("words per answer", key="words", column="words/answer", delta_label="words",
                                 pivot="Words per answer by configuration")),
        MetricSpec("words.answered", Comparison.PAIRED, MetricDisplay("answered"), mark_field="answered"),
    )
    display = EvalDisplay(csv_fields=("words.per_answer", "words.n"))

    def run(self, ctx: EvalContext, settings: WordsSettings) -> EvalResult:
        samples = []
        for i in range(settings.prompts):
            r = httpx.post(f"{ctx.server.base_url}/v1/completions", timeout=60,
                           json={"model": ctx.server.served_name, "prompt": f"Question {i}: name three colours.",
                                 "max_tokens": 24, "temperature": 0})
            r.raise_for_status()
            text = r.json()["choices"][0]["text"]
            samples.append({"id": f"p-{i}", "words": len(text.split()), "answered": bool(text.strip()), "text": text})
            ctx.progress(len(samples), settings.prompts)
        per_answer = sum(s["words"] for s in samples) / len(samples)
        return EvalResult({"per_answer": per_answer, "n": len(samples),
                           "answered": sum(s["answered"] for s in samples) / len(samples)}, samples)

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return {"words.per_answer": raw["per_answer"], "words.answered": raw["answered"], "words.n": raw["n"]}


CONFIG = """\
model: sim/toy
engine:
  profile: sim
  args: ["--sim-startup-seconds", "0.1", "--sim-seed", "0"]
axes:
  graph:
    full: {settings: {graph_mode: FULL}}
  fix:
    fixon: {args: ["--sim-fix", "on"]}
    fixoff: {args: ["--sim-fix", "off"]}
baseline: {graph: full, fix: fixon}
ab: {axis: fix, on: fixon, off: fixoff}
evals:
  gsm8k: {num_fewshot: 1, num_concurrent: 8}
  repetition: {enabled: false}
  words: {prompts: 3}
thresholds:
  - {metric: words.per_answer, min: 1000}
timeouts: {startup: 60, stop_grace: 5}
"""


@pytest.fixture(scope="module")
def words_eval() -> Iterator[Words]:
    ev = registry.register(Words())
    yield ev
    registry.unregister(ev.name)


@pytest.fixture(scope="module")
def toy_run(words_eval: Words, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One two-cell matrix (2 engine starts, 10 questions), shared by the tests that read it. Those tests are
    about that real run (the eval in every cell of it), so each asks for `engine_processes`: e2e."""
    tmp_path = tmp_path_factory.mktemp("toy")
    config = tmp_path / "toy.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    result = CliRunner().invoke(main, ["matrix", "--config", str(config), "--run-id", "toy", "--limit", "10",
                                       "--results-dir", str(tmp_path / "results"), "--no-history", "--quiet"])
    return tmp_path / "results" / "toy", result


def test_a_registered_eval_runs_in_every_cell_and_lands_in_summary_json(
        toy_run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, result = toy_run
    summary = read_json(run_path / "summary.json")
    assert [c["status"] for c in summary["cells"]] == ["ok", "ok"], result.output
    for cell in summary["cells"]:
        assert cell["metrics"]["words.per_answer"] > 0 and cell["metrics"]["words.n"] == 3
        assert cell["metrics"]["gsm8k.n"] == 10  # the built-ins still run beside it
        samples = list(read_jsonl(run_path / cell["id"] / "words.samples.jsonl"))
        assert [s["id"] for s in samples] == ["p-0", "p-1", "p-2"]
        assert read_json(run_path / cell["id"] / "cell.json")["timings"]["words_s"] >= 0
    off = summary["cells"][1]
    words_delta = off["vs_ab"]["words.per_answer"]
    assert words_delta["diff"] == pytest.approx(off["metrics"]["words.per_answer"]
                                                - summary["cells"][0]["metrics"]["words.per_answer"])
    assert off["vs_ab"]["words.answered"]["n"] == 3  # paired on the three prompts


def test_a_registered_eval_metric_is_a_threshold_like_any_other(toy_run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, result = toy_run
    summary = read_json(run_path / "summary.json")
    flags = [f for c in summary["cells"] for f in c["flags"]]
    assert [(f["metric"], f["check"]) for f in flags] == [("words.per_answer", "min")] * 2
    assert "words per answer" in flags[0]["message"] and "< min 1000" in flags[0]["message"]
    assert summary["exit_code"] == 1 and result.exit_code == 1


def test_a_registered_eval_shows_in_the_report_and_csv(toy_run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, _ = toy_run
    results = str(run_path.parent)
    markdown = CliRunner().invoke(main, ["report", "toy", "--format", "markdown", "--results-dir", results]).output
    assert "| words/answer |" in markdown and "Δ words vs twin" in markdown
    assert "#### Words per answer by configuration" not in markdown or "fixoff" in markdown
    csv = CliRunner().invoke(main, ["report", "toy", "--format", "csv", "--results-dir", results]).output
    header = csv.splitlines()[0].split(",")
    assert "words.per_answer" in header and "vs_ab.words.per_answer.diff" in header
    as_json = json.loads(CliRunner().invoke(main, ["report", "toy", "--format", "json", "--results-dir", results]).stdout)
    assert as_json["cells"][0]["metrics"]["words.per_answer"] > 0


def test_its_config_section_is_validated_like_the_built_ins(words_eval: Words) -> None:
    data = {"model": "m", "engine": {"profile": "sim"}, "evals": {"words": {"prompts": 0}}}
    with pytest.raises(ConfigError, match=r"cfg.yaml: evals.words.prompts: Input should be greater than or equal to 1"):
        parse_config(data, "cfg.yaml")
    data["evals"] = {"words": {"promts": 2}}
    with pytest.raises(ConfigError, match=r"cfg.yaml: evals.words.promts: unknown key"):
        parse_config(data, "cfg.yaml")
    config = parse_config({"model": "m", "engine": {"profile": "sim"}}, "cfg.yaml")
    assert config.evals.words is None  # not a built-in: runs only where a config asks for it
    assert [ev.name for ev, _ in config.evals.enabled()] == ["gsm8k", "repetition"]


def test_an_unregistered_eval_or_metric_is_bad_input() -> None:
    with pytest.raises(ConfigError, match=r"cfg.yaml: evals.nosuch: unknown key"):
        parse_config({"model": "m", "engine": {"profile": "sim"}, "evals": {"nosuch": {}}}, "cfg.yaml")
    with pytest.raises(ConfigError, match=r"thresholds\[0\].metric: unknown metric \(known: gsm8k.strict, "
                                          r"gsm8k.flexible, repetition.collapse_rate"):
        parse_config({"model": "m", "engine": {"profile": "sim"},
                      "thresholds": [{"metric": "nosuch.metric", "min": 1}]}, "cfg.yaml")


CAPABILITIES = (Pairwise, ExtraDelta, Subsets, Checks, Prepares, ReadsEarlierCells, ScansEarlierTexts, LifecycleRecorded,
                Unmeasured, CellFlags)


def test_what_an_eval_can_do_beyond_its_core_is_asked_one_way() -> None:
    """Each capability is a method the eval defines; the toy eval, core only, has none, and the
    built-ins have exactly those their docstrings and the protocol's documentation name."""
    def can(name: str) -> list[str]:
        ev = registry.builtins().get(name)
        return [c.__name__ for c in CAPABILITIES if isinstance(ev, c)]

    assert [c.__name__ for c in CAPABILITIES if isinstance(Words(), c)] == []
    assert can("gsm8k") == ["Subsets", "Checks", "Prepares"]
    # the GSM8K answers scanned once the wave is done; a cell whose long generations stopped early says so
    assert can("repetition") == ["ExtraDelta", "Subsets", "ScansEarlierTexts", "Unmeasured", "CellFlags"]
    assert can("lm_eval") == ["Checks", "Prepares"]
    assert can("divergence") == ["Pairwise", "Checks", "ReadsEarlierCells"]
    assert can("consistency") == ["Checks"]
    assert can("engine") == ["LifecycleRecorded", "Unmeasured", "CellFlags"]
    config = parse_config({"model": "m", "engine": {"profile": "sim"}}, "cfg.yaml")
    assert "engine" not in [ev.name for ev, _ in config.evals.enabled()]  # recorded, never run
