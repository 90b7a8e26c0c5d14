"""A bisect step's judgement (evalkit/bisect/step.py, ends.py, render/bisect.py) in this process.

The ends and the steps are cells of one config evaluated on simulators served by a thread of this
process (tests/helpers/served.py: an external server's cell, so no engine is started): the good
end and a healthy step on the DP-attention + PIECEWISE layout with the fix, the bad end and a
buggy step without it. What only an engine process shows (a commit that does not start, an engine
that dies mid-step, Ctrl-C stopping it) is tests/test_bisect_step.py's, in the `e2e` tier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from evalkit.bisect.ends import Ends, judge_ends
from evalkit.bisect.state import BisectRecord, CommitInfo, EndRecord, StepRecord
from evalkit.bisect.step import StepOutcome, run_step
from evalkit.config import MatrixConfig, load_config
from evalkit.config.cells import expand
from evalkit.errors import ConfigError, Interrupted
from evalkit.evals import evalset
from evalkit.evals.cancel import Stop
from evalkit.render import bisect as bisect_report
from evalkit.run.cell import CellControl, CellJob, run_cell
from evalkit.run.options import Silent
from evalkit.store import RunStore, read_json, read_jsonl
from tests.helpers.served import served_sim

pytestmark = pytest.mark.xdist_group("bisect-inprocess")  # the module's ends are made once, on one worker

QUESTIONS, GENERATIONS = 400, 32
LAYOUT = ("--enable-dp-attention", "-tp", "8", "--cudagraph-mode", "PIECEWISE", "--sim-seed", "0", "--sim-race-rate", "0")
"""The buggy layout; no race between requests sharing a batch, so every step answers alike run to run."""
CONFIG = f"""
model: sim/bisect-inprocess
served_name: sim-model
engine: {{profile: sim}}
evals:
  gsm8k: {{num_fewshot: 3, num_concurrent: 32}}
  repetition: {{count: {GENERATIONS}, max_tokens: 1024, concurrency: 16}}
thresholds:
  - {{metric: gsm8k.flexible, min: 0.90}}
  - {{metric: gsm8k.flexible, max_drop_vs_baseline: 0.02, alpha: 0.01}}
  - {{metric: repetition.collapse_rate, max_rise_vs_baseline: 0.05, alpha: 0.01}}
"""


@dataclasses.dataclass
class Bisect:
    config: MatrixConfig
    store: RunStore
    urls: dict[str, str]
    """`fixed` / `buggy`: the two served simulators."""
    ends: Ends

    def job(self, name: str, server: str, progress: object = None) -> CellJob:
        cell = dataclasses.replace(expand(self.config)[0], id=name)
        return CellJob(self.config, cell, self.store, progress or Silent(), limit=QUESTIONS, base_url=self.urls[server])

    def step(self, name: str, server: str, control: CellControl | None = None) -> StepOutcome:
        return run_step(self.job(name, server), control or CellControl(Stop()), self.store.cell_dir("good"),
                        self.ends, seed=0)


@pytest.fixture(scope="module")
def bisect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bisect]:
    root = tmp_path_factory.mktemp("bisect-inprocess")
    (root / "bisect.yaml").write_text(CONFIG)
    config = load_config(root / "bisect.yaml")
    store = RunStore(root / "results", "bisect-t")
    store.create()
    evalset.prepare(config.evals.enabled(), store.path)
    with served_sim(*LAYOUT, "--sim-fix", "on") as fixed, served_sim(*LAYOUT, "--sim-fix", "off") as buggy:
        world = Bisect(config, store, {"fixed": fixed, "buggy": buggy}, ends=None)  # type: ignore[arg-type]
        for name, server in (("good", "fixed"), ("bad", "buggy")):
            assert run_cell(world.job(name, server), CellControl(Stop())).status == "ok"
        world.ends = judge_ends(config, store.cell_dir("good"), store.cell_dir("bad"), alpha=0.01)
        yield world


def test_the_bad_end_breaks_the_collapse_rise_against_the_good_end(bisect: Bisect) -> None:
    """The ends are judged as a cell against its baseline: the bad end's rise in collapses fails,
    and every step will be paired with the good end per GSM8K question and counted for collapses."""
    ends = bisect.ends
    assert ends.bad and ends.test is not None, ends.reason
    assert (ends.paired_metric, ends.count_metric) == ("gsm8k.flexible", "repetition.collapse_rate")
    assert "max_rise_vs_baseline" in {f.check for f in ends.flags if f.action == "fail"}
    outcome = {c["rule"]: c["outcome"] for c in ends.to_dict()["checks"]}
    assert outcome["repetition.collapse_rate max_rise 0.05 alpha 0.01"] == "FAIL"


def test_a_good_end_judged_against_itself_gives_no_bisect(bisect: Bisect) -> None:
    good = bisect.store.cell_dir("good")
    ends = judge_ends(bisect.config, good, good, alpha=0.01)
    assert not ends.bad and ends.test is None
    assert ends.reason == "the bad end breaks no failing threshold vs the good end"


def test_a_buggy_step_is_bad_before_every_question_is_asked(bisect: Bisect) -> None:
    """The sequential test stops at a boundary, and the step's folder reads as a run's cell, with
    the step's verdict, its evidence against the good end and one collapsed excerpt."""
    step = bisect.step("step-bad", "buggy")
    assert step.verdict == "bad", step.reason
    assert 0 < step.questions < QUESTIONS and 0 < step.generations <= GENERATIONS
    vs_good = step.evidence["vs_good"]
    assert vs_good["repetition.collapse_rate"]["diff"] > 0
    assert step.evidence["excerpt"]["id"] in {c["id"] for c in vs_good["repetition.collapse_rate"]["new_collapses"]}
    record = read_json(bisect.store.cell_dir("step-bad") / "cell.json")
    assert record["status"] == "ok" and record["step"]["verdict"] == "bad"
    assert record["metrics"]["gsm8k"]["n"] == step.questions
    assert len(list(read_jsonl(bisect.store.cell_dir("step-bad") / "gsm8k.samples.jsonl"))) == step.questions
    assert record["step"]["generation_tokens"] == step.generation_tokens > 0


def test_a_healthy_step_is_good_with_no_excerpt(bisect: Bisect) -> None:
    step = bisect.step("step-good", "fixed")
    assert step.verdict == "good", step.reason
    assert step.evidence["excerpt"] is None and step.evidence["looks"][-1]["verdict"] == "good"


def test_a_step_whose_server_fails_after_its_first_batch_is_untestable_with_the_cell_s_error(bisect: Bisect) -> None:
    """`git bisect skip`: the cell's one-line error is the reason, and what the step answered before
    the failure stays in its folder."""
    with served_sim(*LAYOUT, "--sim-fix", "off", "--sim-fault", "http-500", "--sim-fault-after", "40") as failing:
        bisect.urls["failing"] = failing
        step = bisect.step("step-failing", "failing")
    assert step.verdict == "untestable" and "\n" not in step.reason
    assert step.reason.startswith(("gsm8k: ", "repetition: ")) and "500" in step.reason, step.reason
    assert read_json(bisect.store.cell_dir("step-failing") / "cell.json")["status"] == "error"
    assert step.questions > 0  # it failed after answering some: what it answered is kept in its folder
    assert len(list(read_jsonl(bisect.store.cell_dir("step-failing") / "gsm8k.samples.jsonl"))) == step.questions


def test_a_step_needs_ends_as_claimed(bisect: Bisect) -> None:
    good = bisect.store.cell_dir("good")
    not_claimed = judge_ends(bisect.config, good, good, alpha=0.01)
    with pytest.raises(ConfigError, match="a step needs ends as claimed: the bad end breaks no failing threshold"):
        run_step(bisect.job("step-no-ends", "fixed"), CellControl(Stop()), good, not_claimed, seed=0)


def test_a_step_stopped_before_its_first_batch_raises_interrupted_and_writes_nothing(bisect: Bisect) -> None:
    control = CellControl(Stop())
    control.stop.set()
    with pytest.raises(Interrupted):
        bisect.step("step-stopped", "fixed", control)
    assert not (bisect.store.cell_dir("step-stopped") / "cell.json").exists()


@pytest.fixture(scope="module")
def found(bisect: Bisect) -> tuple[dict[str, Any], StepOutcome]:
    """bisect.json of a found bisect, as the driver writes it, whose one step is a buggy commit."""
    step = bisect.step("step-report", "buggy")
    good, first_bad, bad = (CommitInfo(sha=c * 40, subject=f"commit {c}", author_date="2026-12-01T00:00:00+00:00")
                            for c in "abc")
    record = BisectRecord(
        bisect_id="t", status="found", config_path="bisect.yaml", config={}, cell="head", repo="engine",
        good_ref=good.sha, bad_ref=bad.sha, alpha=0.01, commits=[first_bad, bad],
        good=EndRecord(**good.model_dump(), cell_dir="good", status="ok"),
        bad=EndRecord(**bad.model_dump(), cell_dir="bad", status="ok"), ends=bisect.ends.to_dict(),
        steps=[StepRecord(**first_bad.model_dump(), index=0, verdict=step.verdict, reason=step.reason,
                          questions=step.questions, generations=step.generations, evidence=step.evidence,
                          wall_s=step.wall_s, cell_dir="step-report")],
        first_bad=first_bad.sha, message="first bad commit", engine_starts=3,
        excerpt={"sha": first_bad.sha, **step.evidence["excerpt"], "text": step.evidence["excerpt"]["excerpt"]},
    ).model_dump(mode="json")
    return record, step


def test_the_report_names_the_first_bad_commit_the_checks_on_the_bad_end_and_each_step(
        found: tuple[dict[str, Any], StepOutcome]) -> None:
    """render/bisect.py: a found bisect's markdown, from bisect.json as the driver writes it, names
    the first bad commit, the checks on the bad end against the good end, the step's verdict and
    the step's collapsed excerpt."""
    record, step = found
    first_bad = "b" * 40
    text = bisect_report.markdown(record)
    assert text.startswith(f"## evalkit bisect: `head`\n\n**First bad commit:** `{first_bad}` commit b "
                           "(authored 2026-12-01T00:00:00+00:00)")
    assert "- FAIL repetition.collapse\\_rate max\\_rise 0.05 alpha 0.01: " in text
    assert "<summary>One collapsed long generation</summary>" in text
    step_row = next(line for line in text.splitlines() if line.startswith("| bbbbbbbbbbbb | commit b |"))
    assert f"| {step.questions} | {step.generations} |" in step_row
    assert bisect_report.headline(record) == f"first bad commit: {first_bad} commit b (2026-12-01T00:00:00+00:00)"


def test_the_terminal_report_says_the_same_within_80_columns(found: tuple[dict[str, Any], StepOutcome]) -> None:
    """The terminal form of the same record: the headline in its first lines, the bad end's checks,
    the collapsed excerpt and the step's row, no line wider than 80 columns."""
    record, step = found
    console = Console(width=80, record=True, color_system=None)
    for renderable in bisect_report.render(record, "terminal"):  # type: ignore[union-attr]
        console.print(renderable)
    text = console.export_text()
    lines = text.splitlines()
    assert lines[0] == "evalkit bisect t: cell head, 2 commits of engine"
    assert lines[1].startswith("first bad commit: " + "b" * 40)
    assert any(line.startswith("  FAIL repetition.collapse_rate max_rise 0.05 alpha 0.01") for line in lines)
    assert any(line.startswith("collapsed excerpt: ") for line in lines)
    assert not any("?" in line for line in lines if line.startswith("sequential test"))
    step_row = next(line for line in lines if line.startswith("│ bbbbbbbbbbbb "))
    assert "BAD" in step_row and f" {step.questions} " in step_row and f" {step.generations} " in step_row
    assert f"  bbbbbbbbbbbb {step.reason}"[:60] in text.replace("\n", " ")
    assert max(map(len, lines)) <= 80
