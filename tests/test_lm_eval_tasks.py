"""`evals.lm_eval`: any task lm-eval ships, scored by lm-eval against the (real, simulated)
engine over local data, with per-question records, paired deltas and thresholds on its metrics.

One two-cell matrix (the healthy baseline and the buggy DP-attention + PIECEWISE + fix-off cell)
(its accuracy bug made large, 0.5, so a dozen questions show it) runs gsm8k_cot (8-shot CoT, over the GSM8K copy evalkit ships) and aime24 (over a local file
the config names); the tests read what it stored.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.config import parse_config
from evalkit.errors import EXIT_BAD_INPUT, EXIT_THRESHOLD, ConfigError, EvalError
from evalkit.evals import registry
from evalkit.evals.evalset import spec_named
from evalkit.store import read_json, read_jsonl
from tests.helpers.runs import rerun
from tests.helpers.sim import gsm8k_test, reference_answer

LIMIT = 12
STRICT = "lm_eval.gsm8k_cot.exact_match.strict-match"
FLEXIBLE = "lm_eval.gsm8k_cot.exact_match.flexible-extract"
AIME = "lm_eval.aime24.exact_match"

CONFIG = """\
model: sim/toy
engine:
  profile: sim
  args: ["--sim-startup-seconds", "0.1", "--sim-seed", "0", "--sim-bug-accuracy", "0.5"]
axes:
  parallel:
    tp8: {{settings: {{tensor_parallel: 8}}}}
    dp8: {{settings: {{tensor_parallel: 8, dp_attention: true}}}}
  graph:
    piecewise: {{settings: {{graph_mode: PIECEWISE}}}}
  fix:
    fixoff: {{args: ["--sim-fix", "off"]}}
baseline: {{parallel: tp8, graph: piecewise, fix: fixoff}}
evals:
  gsm8k: {{enabled: false}}
  repetition: {{enabled: false}}
  lm_eval:
    num_concurrent: 8
    tasks:
      - gsm8k_cot
      - {{name: aime24, data_files: {{train: {aime}}}, limit: 3}}
      - {{name: mmlu_pro_law, data_files: {{test: {mmlu}, validation: {mmlu}}}, num_fewshot: 1, max_gen_toks: 16}}
thresholds:
  - {{metric: {strict}, max: 0.5, action: warn}}
  - {{metric: {strict}, max_drop_vs_baseline: 0.0}}
timeouts: {{startup: 60, stop_grace: 5}}
"""


def mmlu_pro_row(i: int) -> dict[str, Any]:
    return {"question_id": i, "question": f"Which option is listed {i}th?", "options": ["w", "x", "y", "z"],
            "answer": "ABCD"[i % 4], "answer_index": i % 4, "cot_content": "A: Let's think step by step. The answer is (A).",
            "category": "law" if i % 2 else "math", "src": "evalkit-test"}


def write_config(tmp_path: Path) -> Path:
    aime = tmp_path / "aime.jsonl"
    rows = gsm8k_test()[:3]  # AIME's columns, GSM8K's questions: the simulator knows them
    aime.write_text("".join(json.dumps({"Problem": r["question"], "Answer": reference_answer(r)}) + "\n" for r in rows),
                    encoding="utf-8")
    mmlu = tmp_path / "mmlu_pro.jsonl"  # MMLU-Pro's columns; its process_docs keeps the law rows
    mmlu.write_text("".join(json.dumps(mmlu_pro_row(i)) + "\n" for i in range(6)), encoding="utf-8")
    path = tmp_path / "tasks.yaml"
    path.write_text(CONFIG.format(aime=aime, mmlu=mmlu, strict=STRICT), encoding="utf-8")
    return path


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The matrix, run once for the module: its cells start simulator processes, so each test that
    reads it asks for `engine_processes` itself (module scope cannot), which makes it e2e."""
    tmp_path = tmp_path_factory.mktemp("lm_eval")
    result = run_cli("matrix", "--config", str(write_config(tmp_path)), "--run-id", "tasks", "--limit", str(LIMIT),
                     "--results-dir", str(tmp_path / "results"), "--no-history", "--quiet")
    return tmp_path / "results" / "tasks", result


def cells(run_path: Path) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in read_json(run_path / "summary.json")["cells"]}


def samples(run_path: Path, cell: str) -> list[dict[str, Any]]:
    return list(read_jsonl(run_path / cell / "lm_eval.samples.jsonl"))


def test_each_task_is_scored_by_lm_eval_per_question(run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, result = run
    by_id = cells(run_path)
    assert [c["status"] for c in by_id.values()] == ["ok", "ok"], result.output
    for cell_id, cell in by_id.items():
        rows = samples(run_path, cell_id)
        cot = [r for r in rows if r["task"] == "gsm8k_cot"]
        assert [r["id"] for r in cot] == [f"gsm8k_cot-{i}" for i in range(LIMIT)]
        for r in cot:  # lm-eval's strict filter: the number after "The answer is" equals the target
            said = re.search(r"The answer is (-?[0-9.,]+)\.", r["response"])
            assert r[f"{STRICT.removeprefix('lm_eval.')}"] == bool(said and said.group(1) == r["target"])
            assert "Q:" not in r["response"]  # the task's stop string cut the next question
        metrics = cell["metrics"]
        assert metrics["lm_eval.gsm8k_cot.n"] == LIMIT
        assert metrics[STRICT] == pytest.approx(sum(r["gsm8k_cot.exact_match.strict-match"] for r in cot) / LIMIT)
        aime = [r for r in rows if r["task"] == "aime24"]
        assert [r["target"] for r in aime] == [reference_answer(row) for row in gsm8k_test()[:3]]  # the local file
        assert metrics["lm_eval.aime24.n"] == 3 and AIME in metrics
        law = [r for r in rows if r["task"] == "mmlu_pro_law"]  # a task whose process_docs filters the data
        assert [r["target"] for r in law] == [mmlu_pro_row(i)["answer"] for i in range(6) if i % 2]
        assert "lm_eval.mmlu_pro_law.exact_match" in metrics
    assert by_id["tp8-piecewise-fixoff"]["metrics"][FLEXIBLE] > 0.8  # the healthy cell answers the 8-shot CoT prompt


def test_paired_deltas_between_two_cells_come_from_the_per_question_marks(run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, _ = run
    buggy = cells(run_path)["dp8-piecewise-fixoff"]
    delta = buggy["vs_baseline"][FLEXIBLE]
    field = FLEXIBLE.removeprefix("lm_eval.")
    here = {r["id"]: r[field] for r in samples(run_path, "dp8-piecewise-fixoff") if field in r}
    there = {r["id"]: r[field] for r in samples(run_path, "tp8-piecewise-fixoff") if field in r}
    assert delta["n"] == LIMIT  # paired on gsm8k_cot's questions only, not aime24's
    assert delta["flipped_to_wrong"]  # the bug's signature: right at the baseline, wrong here
    assert delta["flipped_to_wrong"] == [i for i in there if there[i] and not here[i]]
    assert delta["flipped_to_right"] == [i for i in there if here[i] and not there[i]]
    assert delta["diff"] == pytest.approx(sum(here.values()) / LIMIT - sum(there.values()) / LIMIT)
    assert 0 <= delta["p_value"] <= 1  # McNemar exact
    assert buggy["vs_baseline"][AIME]["n"] == 3


def test_thresholds_name_the_task_metrics(run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, result = run
    summary = read_json(run_path / "summary.json")
    for cell in summary["cells"]:
        warned = [f for f in cell["flags"] if f["check"] == "max"]
        assert bool(warned) == (cell["metrics"][STRICT] > 0.5)
        if warned:
            assert f"{cell['id']}: gsm8k_cot exact_match.strict-match" in warned[0]["message"]
    by_id = cells(run_path)
    assert not [f for f in by_id["tp8-piecewise-fixoff"]["flags"] if f["check"] == "max_drop_vs_baseline"]
    drop = next(f for f in by_id["dp8-piecewise-fixoff"]["flags"] if f["check"] == "max_drop_vs_baseline")
    assert drop["diff"] == by_id["dp8-piecewise-fixoff"]["vs_baseline"][STRICT]["diff"] < 0
    assert "vs baseline tp8-piecewise-fixoff" in drop["message"] and "McNemar p = " in drop["message"]
    assert summary["exit_code"] == result.exit_code == EXIT_THRESHOLD


def test_each_task_has_its_setup_fingerprint(run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, _ = run
    raw = read_json(run_path / "tp8-piecewise-fixoff" / "cell.json")["metrics"]["lm_eval"]
    fields = raw["tasks"]["gsm8k_cot"]["setup"]["fields"]
    assert fields["task"] == "gsm8k_cot" and fields["num_fewshot"] == 8 and fields["task_version"] == 3.0
    assert fields["generation_kwargs"]["until"] == ["Q:", "</s>", "<|im_end|>"]
    assert fields["lm_eval_version"] == "0.4.13" and len(fields["data"]) == len(fields["task_yaml"]) == 16
    assert raw["setup"]["fields"]["aime24.data"] != fields["data"]  # the local file, hashed
    other = read_json(run_path / "dp8-piecewise-fixoff" / "cell.json")["metrics"]["lm_eval"]
    assert other["setup"]["hash"] == raw["setup"]["hash"]  # same setup: the cells are compared


def test_the_report_and_compare_of_a_stored_run_know_the_task_metrics(run: tuple[Path, Any], engine_processes: None) -> None:
    run_path, _ = run
    results = str(run_path.parent)
    markdown = run_cli("report", "tasks", "--format", "markdown", "--results-dir", results).output
    assert "| gsm8k\\_cot exact\\_match.strict-match |" in markdown
    assert "Δ gsm8k\\_cot exact\\_match.strict-match vs baseline" in markdown
    csv = run_cli("report", "tasks", "--format", "csv", "--results-dir", results).output.splitlines()[0].split(",")
    assert {STRICT, f"{STRICT}_stderr", "lm_eval.aime24.n", f"vs_baseline.{FLEXIBLE}.p_value"} <= set(csv)
    parse_config({"model": "m", "engine": {"profile": "sim"}}, "other.yaml")  # a config without lm_eval
    assert spec_named(STRICT, registry.builtins().metrics()) is None
    rerun(run_path, "tasks-again")
    compared = json.loads(run_cli("compare", "tasks", "tasks-again", "--format", "json", "--results-dir", results).output)
    row = next(c for c in compared["cells"] if c["id"] == "dp8-piecewise-fixoff")
    assert row[FLEXIBLE]["diff"] == 0 and row[FLEXIBLE]["n"] == LIMIT  # known again from the stored cells


def test_the_history_of_a_stored_run_knows_the_task_metrics(run: tuple[Path, Any], engine_processes: None, tmp_path: Path) -> None:
    run_path, _ = run
    results, db = str(run_path.parent), str(tmp_path / "history.db")
    assert run_cli("history", "--import", "tasks", "--db", db, "--results-dir", results).exit_code == 0
    parse_config({"model": "m", "engine": {"profile": "sim"}}, "other.yaml")  # a config without lm_eval
    shown = run_cli("history", "--model", "sim/toy", "--db", db, "--results-dir", results)
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    rows = lines[next(i for i, line in enumerate(lines) if line.startswith("┏")) + 1:
                 next(i for i, line in enumerate(lines) if line.startswith("┡"))]
    headers = ["".join(part.strip() for part in parts) for parts in zip(*(row.split("┃")[1:-1] for row in rows))]
    # a header wider than its column wraps onto more lines, never cut (a cut name hides the metric)
    assert {"gsm8k_cot.exact_match.strict-match", "aime24.exact_match"} <= set(headers) and "…" not in shown.output


def test_a_task_without_local_data_fails_before_any_engine_starts(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text(config.read_text(encoding="utf-8").replace(", data_files: {train: %s}" % (tmp_path / "aime.jsonl"),
                                                                 ""), encoding="utf-8")
    result = run_cli("matrix", "--config", str(config), "--results-dir", str(tmp_path / "results"), "--no-history")
    assert result.exit_code == EXIT_BAD_INPUT
    line = result.output.strip()
    assert "\n" not in line and "'aime24'" in line and "evals.lm_eval.tasks[1].data_files" in line, line
    assert not (tmp_path / "results").exists()


def test_an_unknown_task_is_refused_with_the_close_names(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text(config.read_text(encoding="utf-8").replace("- gsm8k_cot\n", "- gsm8k_cott\n"), encoding="utf-8")
    result = run_cli("matrix", "--config", str(config), "--results-dir", str(tmp_path / "results"), "--no-history")
    assert result.exit_code == EXIT_BAD_INPUT
    line = result.output.strip()
    assert "\n" not in line and "evals.lm_eval.tasks[0].name: unknown lm-eval task 'gsm8k_cott'" in line, line
    assert re.search(r"\(close: .*gsm8k_cot\b", line)


def config_with(lm_eval: dict[str, Any], thresholds: list[dict[str, Any]] | None = None) -> Any:
    return parse_config({"model": "m", "engine": {"profile": "sim"}, "evals": {"lm_eval": lm_eval},
                         "thresholds": thresholds or []}, "cfg.yaml")


def test_the_config_section_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"cfg.yaml: evals.lm_eval.tasks: List should have at least 1 item"):
        config_with({"tasks": []})
    with pytest.raises(ConfigError, match=r"evals.lm_eval.tasks\[0\].data_file: unknown key"):
        config_with({"tasks": [{"name": "aime24", "data_file": {"train": "x.jsonl"}}]})
    with pytest.raises(ConfigError, match=r"evals.lm_eval.tasks\[0\]: set data_files or dataset_path, not both"):
        config_with({"tasks": [{"name": "aime24", "data_files": {"train": "x.jsonl"}, "dataset_path": "/d"}]})
    with pytest.raises(ConfigError, match=r"thresholds\[0\].metric: unknown metric \(known: .*"
                                          r"lm_eval.gsm8k_cot.exact_match.strict-match"):
        config_with({"tasks": ["gsm8k_cot"]}, [{"metric": "lm_eval.gsm8k_cot.exact_match", "min": 0.5}])
    config = config_with({"tasks": ["mmlu_pro"]}, [{"metric": "lm_eval.mmlu_pro_law.exact_match", "min": 0.5}])
    assert config.thresholds[0].metric == "lm_eval.mmlu_pro_law.exact_match"
    assert len(registry.builtins().get("lm_eval").metrics_for(config.evals.lm_eval)) == 14  # a group: its tasks, one each
    assert registry.builtins().get("lm_eval").metrics == ()  # validating a config taught the eval nothing


def test_preflight_names_the_field_of_bad_local_data(tmp_path: Path) -> None:
    ev = registry.builtins().get("lm_eval")
    config = config_with({"tasks": [{"name": "mmlu_pro_law", "data_files": {"test": str(tmp_path / "no.jsonl")}}]})
    with pytest.raises(EvalError, match=r"task 'mmlu_pro_law' reads split\(s\) validation: "
                                        r"evals.lm_eval.tasks\[0\].data_files has test$"):
        ev.check(config.evals.lm_eval)
    config = config_with({"tasks": [{"name": "aime24", "data_files": {"train": str(tmp_path / "no.jsonl")}}]})
    with pytest.raises(EvalError, match=r"evals.lm_eval.tasks\[0\].data_files.train: .*no.jsonl does not exist"):
        ev.check(config.evals.lm_eval)
    with pytest.raises(EvalError, match=r"task 'arc_easy' is multiple_choice: evalkit runs generate_until tasks"):
        ev.check(config_with({"tasks": [{"name": "arc_easy", "dataset_path": str(tmp_path)}]}).evals.lm_eval)
    with pytest.raises(EvalError, match=r"'gsm8k_cot_self_consistency' samples 64 answers per question"):
        ev.check(config_with({"tasks": ["gsm8k_cot_self_consistency"]}).evals.lm_eval)
    ev.check(config_with({"tasks": ["gsm8k_cot_zeroshot", "gsm8k_cot_llama"]}).evals.lm_eval)  # shipped data
