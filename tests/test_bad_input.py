"""Bad input: one clear line naming file and field, exit code 2, nothing started or overwritten."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CONFIGS
from tests.helpers.cli import Ran, evalkit_cli

GOOD = (CONFIGS / "demo.yaml").read_text()


def in_process(tmp_path: Path, *args: str) -> Ran:
    """`evalkit ARGS` from `tmp_path` through the CLI's own click group in this process: bad input
    is refused before anything starts, so a process per case would only add its start-up. Only
    the usage-error test keeps the real program (its name in the usage line is the process's)."""
    return evalkit_cli(*args, cwd=tmp_path)


CASES = {
    "malformed YAML": (GOOD.replace("axes:", "axes: [", 1), [], r"cfg.yaml: line \d+, column \d+: invalid YAML"),
    "unknown key": (GOOD.replace("  profile: sim", "  profile: sim\n  profil: sim"), [], r"cfg.yaml: engine.profil: unknown key"),
    "wrong type": (GOOD.replace("startup: 120", "startup: soon"), [], r"cfg.yaml: timeouts.startup: Input should be a valid number"),
    "axis value naming nothing": (GOOD.replace("full: {settings: {graph_mode: FULL}}", "full: {}"), [],
                                  r"cfg.yaml: axes.graph.full: an axis value must set at least one of"),
    "duplicate cell ids": (GOOD.replace("    eager: {settings: {graph_mode: eager}}",
                                        "    eager: {settings: {graph_mode: eager}}\n    full: {settings: {graph_mode: NONE}}"),
                           [], r"cfg.yaml: line \d+, column \d+: invalid YAML: duplicate key 'full'"),
    "only matching nothing": (GOOD, ["--only", "graph=full,fix=nofix"], r"--only .*fix=nofix is not a value of fix"),
    "baseline that is excluded": (GOOD + "exclude: [{parallel: tp8, graph: full}]\n", [],
                                  r"baseline: .* is not a cell of the matrix"),
    "unknown profile": (GOOD.replace("profile: sim", "profile: trt"), [], r"engine.profile: unknown profile 'trt'"),
    "run id with slash": (GOOD, ["--run-id", "../evil"], r"run id '../evil': use letters"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    text, args, pattern = CASES[case]
    (tmp_path / "cfg.yaml").write_text(text)
    done = in_process(tmp_path, "matrix", "--config", "cfg.yaml", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert __import__("re").search(pattern, lines[0]), lines[0]
    assert not (tmp_path / "results").exists(), "nothing is started or written"


def test_unknown_model_config(tmp_path: Path) -> None:
    done = in_process(tmp_path, "matrix", "--model", "no-such-model")
    assert done.returncode == 2
    assert done.stderr.startswith("error: --model no-such-model: no configs/no-such-model.yaml (known: ")


def test_results_folder_that_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text(GOOD)
    (tmp_path / "a-file").write_text("")
    done = in_process(tmp_path, "matrix", "--config", "cfg.yaml", "--results-dir", "a-file/results")
    assert done.returncode == 2
    assert done.stderr == "error: a-file/results: results folder is under a file, not a folder (--results-dir)\n"
    done = in_process(tmp_path, "matrix", "--config", "cfg.yaml", "--results-dir", "a-file")
    assert done.stderr == "error: a-file: results folder is a file, not a folder (--results-dir)\n"


def test_a_bad_baseline_names_the_field_and_never_prints_the_config(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text(GOOD.replace("baseline: {parallel: tp8,", "baseline: {parallel: tp9,"))
    done = in_process(tmp_path, "matrix", "--config", "cfg.yaml")
    assert done.returncode == 2
    assert done.stderr == "error: cfg.yaml: baseline: parallel='tp9' is not a value of parallel (tp8, dp8)\n"


def test_every_error_of_a_config_is_listed_one_line_each(tmp_path: Path) -> None:
    bad = GOOD.replace("num_fewshot: 3", "num_fewshot: -1").replace("count: 64", "count: 0").replace("startup: 120", "startup: -5")
    (tmp_path / "cfg.yaml").write_text(bad)
    done = in_process(tmp_path, "matrix", "--config", "cfg.yaml")
    assert done.returncode == 2
    # the thresholds on evals whose section failed are not blamed for it
    assert done.stderr.splitlines() == [
        "error: cfg.yaml: evals.gsm8k.num_fewshot: Input should be greater than or equal to 0 (got -1)",
        "error: cfg.yaml: evals.repetition.count: Input should be greater than or equal to 1 (got 0)",
        "error: cfg.yaml: timeouts.startup: Input should be greater than 0 (got -5)"]


@pytest.mark.smoke
def test_a_usage_error_reads_like_the_others(tmp_path: Path, evalkit_process: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """The CLI as a real process once in the default tier: its usage line names the program as
    the interpreter started it (`python -m evalkit.cli`), which only a process shows."""
    done = evalkit_process("matrix", "--model", "demo", "--limt", "3", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: No such option '--limt'. (Did you mean one of: '--junit', '--limit', '--quiet'?)",
        "Try 'python -m evalkit.cli matrix --help' for help."]
    unknown = in_process(tmp_path, "matrx")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: No such command 'matrx'.")


def test_existing_run_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text(GOOD)
    run = tmp_path / "results" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    done = in_process(tmp_path, "matrix", "--config", "cfg.yaml", "--run-id", "r1")
    assert done.returncode == 2 and "run folder exists already (use --resume r1)" in done.stderr
    assert (run / "run.json").read_text() == "{}"


def test_resume_refuses_a_changed_config(tmp_path: Path, engine_processes: None) -> None:
    """End to end: the first run starts its cell's engine (a real simulator process)."""
    (tmp_path / "cfg.yaml").write_text(GOOD.replace("count: 64", "count: 2"))
    first = in_process(tmp_path, "matrix", "--config", "cfg.yaml", "--run-id", "r", "--limit", "5", "--only", "parallel=tp8,graph=full", "--quiet")
    assert first.returncode == 0, first.stderr
    (tmp_path / "cfg.yaml").write_text(GOOD.replace("count: 64", "count: 3"))
    done = in_process(tmp_path, "matrix", "--resume", "r")
    assert done.returncode == 2 and "changed since run r started" in done.stderr
