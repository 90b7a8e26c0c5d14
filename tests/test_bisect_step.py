"""A bisect step on the real simulator: one engine start, batches until the sequential test decides.

The engine repo is the throwaway one of tests/helpers/git.py: the simulator reads the fix from
`simfix.py` on the engine's PYTHONPATH, so a commit without it has the DP-attention + PIECEWISE
bug and a broken commit does not start. The two ends run once per module as full cells (all
1319 GSM8K questions, 64 long generations at 1024 tokens: a few seconds on the simulator) and
every step is judged against them. Every test reads them and starts engines itself, so every
test asks for `engine_processes` (the `e2e` tier).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
import pytest

from evalkit.bisect.ends import Ends, judge_ends
from evalkit.bisect.step import StepOutcome, run_step, seeded_order
from evalkit.config import MatrixConfig, Source, load_config
from evalkit.config.cells import expand
from evalkit.engine.sources import checkout
from evalkit.errors import Interrupted
from evalkit.evals import evalset, registry
from evalkit.evals.base import Comparison, Eval, EvalContext, EvalResult, EvalSettings, MetricDisplay, MetricSpec
from evalkit.evals.cancel import Stop
from evalkit.evals.gsm8k import GSM8K_TEST_SIZE
from evalkit.render import bisect as bisect_report
from evalkit.render.numbers import p_text
from evalkit.run.cell import CellControl, CellJob, run_cell
from evalkit.run.options import Silent
from evalkit.store import RunStore, read_jsonl
from tests.helpers.git import add_branch, config_text, make_repo

pytestmark = pytest.mark.usefixtures("engine_processes")

FIRST_BAD, BROKEN = 4, 3
GENERATIONS = 64


@dataclasses.dataclass
class World:
    config: MatrixConfig
    store: RunStore
    shas: list[str]
    cache: Path
    repo: Path
    ends: Ends
    text: str
    """The config file's text."""

    def job(self, name: str, sha: str) -> CellJob:
        cell = dataclasses.replace(expand(self.config)[0], id=name)
        source = checkout(Source(repo=str(self.repo), ref=sha), self.cache)
        return CellJob(self.config, cell, self.store, Silent(), source=source)

    def step(self, name: str, sha: str, control: CellControl | None = None, seed: int = 0) -> StepOutcome:
        return run_step(self.job(name, sha), control or CellControl(Stop()), self.store.cell_dir("good"),
                        self.ends, seed=seed)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("bisect-step")
    repo, _ = make_repo(root)
    shas = add_branch(repo, "line", 8, first_bad=FIRST_BAD, broken=frozenset({BROKEN}))
    path = root / "bisect.yaml"
    text = config_text(
        repo, name="bisect-step", stop_grace=2,
        evals=f"gsm8k: {{num_fewshot: 3, num_concurrent: 32}}\n"
              f"  repetition: {{count: {GENERATIONS}, max_tokens: 1024, concurrency: 16}}",
        thresholds="- {metric: gsm8k.flexible, min: 0.90}\n"
                   "  - {metric: gsm8k.flexible, max_drop_ab: 0.02, alpha: 0.01}\n"
                   "  - {metric: gsm8k.flexible, max_drop_vs_baseline: 0.02, alpha: 0.01}\n"
                   "  - {metric: repetition.collapse_rate, max_rise_vs_baseline: 0.05, alpha: 0.01}")
    path.write_text(text)
    config = load_config(path)
    store = RunStore(root / "results", "bisect-t")
    store.create()
    evalset.prepare(config.evals.enabled(), store.path)
    world = World(config, store, shas, root / "cache", repo, ends=None, text=text)  # type: ignore[arg-type]
    for name, sha in (("good", shas[0]), ("bad", shas[-1])):
        assert run_cell(world.job(name, sha), CellControl(Stop())).status == "ok"
    world.ends = judge_ends(config, store.cell_dir("good"), store.cell_dir("bad"), alpha=0.01)
    return world


def test_the_ends_are_judged_like_a_cell_against_its_baseline(world: World) -> None:
    ends = world.ends
    assert ends.bad and ends.test is not None
    assert ends.reason.startswith(f"bad end {world.shas[-1][:10]}: GSM8K flexible")
    assert f"vs good end {world.shas[0][:10]}" in ends.reason and "McNemar p" in ends.reason
    checks = sorted(f.check for f in ends.flags)
    assert checks == ["max_drop_vs_baseline", "max_rise_vs_baseline", "min"]  # the _ab twin counted once
    assert ends.evidence is not None
    paired, collapses = ends.evidence.of("gsm8k.flexible"), ends.evidence.of("repetition.collapse_rate")
    assert paired is not None and paired.n == GSM8K_TEST_SIZE
    assert collapses is not None and collapses.p_value is not None and collapses.p_value < 1e-4
    assert (ends.paired_metric, ends.count_metric) == ("gsm8k.flexible", "repetition.collapse_rate")


def test_the_report_says_pass_fail_or_inconclusive_of_each_threshold_on_the_bad_end(world: World) -> None:
    """The ends' checks are verdict/checks.py's records, worded as every report words them, the reference
    the good end (the `_ab` and `_vs_baseline` forms of a rule checked once)."""
    ends = world.ends.to_dict()
    outcome = {c["rule"]: c["outcome"] for c in ends["checks"]}
    assert outcome == {"gsm8k.flexible max_drop 0.02 alpha 0.01": "FAIL", "repetition.collapse_rate max_rise 0.05 alpha 0.01": "FAIL",
                       "gsm8k.flexible min 0.9": "FAIL"}
    good, bad = world.shas[0], world.shas[-1]
    record = {"bisect_id": "t", "cell": "head", "repo": "engine", "commits": [], "status": "ends_not_as_claimed",
              "message": "stopped", "ends": ends, "good": {"sha": good}, "bad": {"sha": bad}}
    text = bisect_report.markdown(record)
    drop = next(c for c in ends["checks"] if c["metric"] == "gsm8k.flexible" and c["check"] != "min")
    assert (f"Thresholds: the bad end {bad[:12]} against the good end {good[:12]}:\n\n"
            f"- FAIL gsm8k.flexible max\\_drop 0.02 alpha 0.01: {drop['diff'] * 100:+.1f} points, "
            f"p {p_text(drop['p_adj'])}, MDE {drop['mde'] * 100:.1f} points\n") in text
    # only a share changes in points: an engine figure (tokens/s) is its own unit
    assert [line for line in text.splitlines() if "tokens" in line and "points" in line] == []


def test_a_good_end_against_itself_is_not_a_bisect(world: World) -> None:
    good = world.store.cell_dir("good")
    ends = judge_ends(world.config, good, good, alpha=0.01)
    assert not ends.bad and ends.test is None
    assert ends.reason == f"the bad end breaks no failing threshold vs the good end {world.shas[0][:10]}"


@pytest.fixture(scope="module")
def bad_step(world: World) -> StepOutcome:
    return world.step("step-bad", world.shas[FIRST_BAD + 1])


@pytest.fixture(scope="module")
def good_step(world: World) -> StepOutcome:
    return world.step("step-good", world.shas[FIRST_BAD - 2])


def ids(folder: Path) -> list[str]:
    return [row["id"] for row in read_jsonl(folder / "gsm8k.samples.jsonl")]


def test_a_step_with_the_bug_is_bad_after_a_small_share_of_the_questions(world: World, bad_step: StepOutcome) -> None:
    assert bad_step.verdict == "bad", bad_step.reason
    assert bad_step.evidence["sequential"]["decided_by"] == "boundary"  # at alpha, not the exhausted fallback
    assert 0 < bad_step.questions <= GSM8K_TEST_SIZE // 4 and 0 < bad_step.generations < GENERATIONS
    vs_good = bad_step.evidence["vs_good"]
    assert vs_good["gsm8k.flexible"]["diff"] < 0 and vs_good["gsm8k.flexible"]["n"] == bad_step.questions
    assert vs_good["repetition.collapse_rate"]["diff"] > 0
    excerpt = bad_step.evidence["excerpt"]
    assert excerpt["id"] in {c["id"] for c in vs_good["repetition.collapse_rate"]["new_collapses"]}
    # the step's folder reads like a run's cell: cell.json, its metrics and the samples asked
    folder = world.store.cell_dir("step-bad")
    record = json.loads((folder / "cell.json").read_text())
    assert record["status"] == "ok" and record["source"]["sha"] == world.shas[FIRST_BAD + 1]
    assert record["metrics"]["gsm8k"]["n"] == bad_step.questions == len(ids(folder))
    assert record["metrics"]["repetition"]["n"] == bad_step.generations
    assert record["step"]["verdict"] == "bad" and record["step"]["generation_tokens"] == bad_step.generation_tokens > 0


def test_a_healthy_step_is_good(good_step: StepOutcome) -> None:
    assert good_step.verdict == "good", good_step.reason
    assert good_step.evidence["sequential"]["decided_by"] == "boundary"
    assert 0 < good_step.questions <= GSM8K_TEST_SIZE // 4 and good_step.evidence["excerpt"] is None


def test_a_subset_gets_the_full_runs_prompts_answers_and_marks(world: World, good_step: StepOutcome) -> None:
    """lm-eval's samples= run of a subset: the same prompts (few-shot examples included), answers,
    extractions and marks as the good end's full run gave the same questions."""
    fields = ("prompt_hash", "target", "response", "strict-match.extracted", "strict-match.correct",
              "flexible-extract.extracted", "flexible-extract.correct")
    full = {row["id"]: row for row in read_jsonl(world.store.cell_dir("good") / "gsm8k.samples.jsonl")}
    subset = list(read_jsonl(world.store.cell_dir("step-good") / "gsm8k.samples.jsonl"))
    assert len(subset) == good_step.questions and len({row["doc_id"] for row in subset}) == len(subset)
    assert [{f: row[f] for f in fields} for row in subset] == [{f: full[row["id"]][f] for f in fields} for row in subset]
    # the batches' metrics combined: what one run over those questions reports
    metrics = good_step.record.metrics["gsm8k"]
    assert metrics["flexible"] == pytest.approx(sum(full[r["id"]]["flexible-extract.correct"] for r in subset) / len(subset))
    assert metrics["n"] == sum(metrics["parts"]) == len(subset) and len(metrics["parts"]) > 1


def test_every_step_asks_a_prefix_of_one_seeded_order(world: World, bad_step: StepOutcome,
                                                      good_step: StepOutcome) -> None:
    pool = ids(world.store.cell_dir("good"))
    order = seeded_order(pool, 0, "gsm8k")
    for name in ("step-bad", "step-good"):
        asked = ids(world.store.cell_dir(name))
        assert set(asked) == set(order[: len(asked)])
    assert sorted(order) == sorted(pool) and order[:32] != pool[:32]
    assert seeded_order(pool, 1, "gsm8k")[:32] != order[:32]


def test_a_commit_whose_engine_does_not_start_is_untestable(world: World) -> None:
    outcome = world.step("step-broken", world.shas[BROKEN])
    assert outcome.verdict == "untestable"
    assert "\n" not in outcome.reason and outcome.reason.startswith("engine exited with code 2"), outcome.reason
    assert outcome.reason.endswith("this commit does not build")  # the engine log says why
    assert outcome.questions == outcome.generations == 0
    assert json.loads((world.store.cell_dir("step-broken") / "cell.json").read_text())["status"] == "error"


def test_a_commit_whose_setup_fails_is_untestable(world: World) -> None:
    """A source's setup (its build) that fails at a commit: `git bisect skip`, with the build's own last line."""
    job = world.job("step-unbuilt", world.shas[1])
    build = ["{python}", "-c", "import sys; sys.exit('error: _C.cpp: no member named half2')"]
    assert job.cell.source is not None
    job = dataclasses.replace(job, cell=dataclasses.replace(job.cell, source=job.cell.source.model_copy(
        update={"ref": world.shas[1], "setup": build})))
    outcome = run_step(job, CellControl(Stop()), world.store.cell_dir("good"), world.ends, seed=0)
    assert outcome.verdict == "untestable" and outcome.questions == 0
    assert outcome.reason.startswith(f"source {world.repo}@{world.shas[1]}: setup exited with 1; log ")
    assert outcome.reason.endswith("error: _C.cpp: no member named half2"), outcome.reason
    cell = json.loads((world.store.cell_dir("step-unbuilt") / "cell.json").read_text())
    assert cell["status"] == "error" and cell["setup"]["status"] == "failed" and "launch" not in cell


@pytest.mark.parametrize(("fault", "words"), [("crash-after", "exited"), ("fatal-log", "Memory access fault")])
def test_an_engine_that_fails_mid_step_is_untestable(world: World, fault: str, words: str) -> None:
    """The engine serves the first batch, then crashes or prints ATOM's fatal GPU line."""
    job = world.job(f"step-{fault}", world.shas[1])
    job = dataclasses.replace(job, cell=dataclasses.replace(
        job.cell, args=(*job.cell.args, "--sim-fault", fault, "--sim-fault-after", "40")))
    outcome = run_step(job, CellControl(Stop()), world.store.cell_dir("good"), world.ends, seed=0)
    assert outcome.verdict == "untestable" and words in outcome.reason and "\n" not in outcome.reason, outcome.reason
    assert outcome.questions > 0  # it failed after answering some: what it answered is kept in its folder
    assert len(list(read_jsonl(world.store.cell_dir(f"step-{fault}") / "gsm8k.samples.jsonl"))) == outcome.questions


class Whole(Eval):
    """An eval that can only run all of its samples (not `Subsets`)."""

    name = "whole"
    settings_model = EvalSettings
    default_enabled = False
    metrics = (MetricSpec("whole.n", Comparison.CONTINUOUS, MetricDisplay("samples")),)

    def run(self, ctx: EvalContext, settings: EvalSettings) -> EvalResult:
        return EvalResult({"n": 0}, [])

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return {"whole.n": raw["n"]}


def test_an_eval_that_cannot_run_a_subset_is_skipped_with_a_note(world: World, tmp_path: Path) -> None:
    registry.register(Whole())
    try:
        path = tmp_path / "whole.yaml"
        path.write_text(world.text.replace("evals:\n", "evals:\n  whole: {enabled: true}\n"))
        job = dataclasses.replace(world.job("step-whole", world.shas[1]), config=load_config(path))
        outcome = run_step(job, CellControl(Stop()), world.store.cell_dir("good"), world.ends, seed=0)
    finally:
        registry.unregister("whole")
    assert outcome.verdict == "good", outcome.reason
    assert outcome.evidence["notes"] == ["whole: not run (cannot run a subset of its samples)"]
    assert set(outcome.record.metrics) == {"gsm8k", "repetition"}


def test_a_stopped_step_raises_interrupted_and_writes_nothing_finished(world: World) -> None:
    control = CellControl(Stop())
    control.stop.set()  # Ctrl-C before the engine is ready
    with pytest.raises(Interrupted):
        world.step("step-stopped", world.shas[1], control)
    assert not (world.store.cell_dir("step-stopped") / "cell.json").exists()


class StopAfterFirstLook:
    """What Ctrl-C does during a step (the driver's signal handling): the stop is set, the engine
    stopped, here as soon as the step reports its first look."""

    def __init__(self, control: CellControl) -> None:
        self.control = control

    def update(self, cell_id: str, state: str, detail: str = "") -> None:
        if state == "step" and detail.startswith("look 1"):
            self.control.stop.set()
            if self.control.engine is not None:
                self.control.engine.stop()


def test_a_step_stopped_half_way_raises_interrupted_and_leaves_no_engine(world: World) -> None:
    control = CellControl(Stop())
    job = dataclasses.replace(world.job("step-halfway", world.shas[1]), progress=StopAfterFirstLook(control))
    with pytest.raises(Interrupted):
        run_step(job, control, world.store.cell_dir("good"), world.ends, seed=0)
    assert not (world.store.cell_dir("step-halfway") / "cell.json").exists()
    engine = control.engine
    # exited (`running` polls, which also reaps it: a reaped child is gone, not a zombie pid)
    assert engine is not None and not engine.running and not psutil.pid_exists(engine.pid)

