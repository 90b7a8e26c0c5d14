"""`evalkit matrix --bisect-on-regression`: a nightly that names the commit which broke a cell.

End to end (marker slow): a throwaway engine repo (tests/helpers/git.py) whose `main` moves
between two nightlies; the second nightly breaks a gate the first passed, and the run's report
names the first bad commit, bisected between the two runs' SHAs with the first run as the good
end. The cases where nothing can be bisected are specified on stored run folders, without engines.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from evalkit.bisect.on_regression import findings, previous_run
from evalkit.store import write_json
from evalkit.verdict.summary import RunSummary
from tests.helpers.cli import evalkit_process
from tests.helpers.git import DEFAULT_EVALS, DEFAULT_THRESHOLDS, add_branch, config_text, git, make_repo
from tests.helpers.runs import hand_made

GATES = DEFAULT_THRESHOLDS + "\n  - {metric: repetition.collapse_rate, max: 0.1, gate: point}"
"""The bisect's own tests (against the good end) and a gate a one-cell nightly can break by itself:
an engine CI's point-estimate gate (`gate: point`), as a nightly mirroring it would hold; 16
generations are too few for the noise-aware rule to show 4 or 5 collapses beyond 0.1."""


def nightly(root: Path, config: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return evalkit_process("matrix", "--config", str(config), "--run-id", run_id, "--results-dir", str(root / "results"),
                           "--cache-dir", str(root / "cache"), "--limit", "60", "--no-lock", "-q",
                           "--bisect-on-regression", *extra, cwd=root, timeout=600)


@pytest.mark.slow
def test_a_nightly_that_breaks_a_gate_names_the_first_bad_commit(tmp_path: Path) -> None:
    repo, root_sha = make_repo(tmp_path)
    config = tmp_path / "nightly.yaml"
    config.write_text(config_text(repo, "main", name="nightly", evals=DEFAULT_EVALS, thresholds=GATES))
    first = nightly(tmp_path, config, "night-1")
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads((tmp_path / "results" / "night-1" / "regressions.json").read_text()) == []

    shas = add_branch(repo, "work", 6, first_bad=3)
    git(repo, "merge", "-q", "--ff-only", "work")  # main moves on: what the next nightly runs
    second = nightly(tmp_path, config, "night-2")
    assert second.returncode == 1, second.stderr[-2000:]  # the gate broke: the bisect never changes the code
    summary = json.loads((tmp_path / "results" / "night-2" / "summary.json").read_text())
    [found] = summary["regressions"]
    assert found["cell"] == "head" and found["previous_run"] == "night-1"
    assert (found["good"], found["bad"]) == (root_sha, shas[-1])
    assert found["first_bad"] == shas[3] and found["status"] == "found"
    assert found["subject"] == "change 3: drop the ca_comm copy-in"
    table = (tmp_path / "results" / "night-2" / "table.md").read_text()
    assert f"first bad commit {shas[3][:12]} \"change 3: drop the ca\\_comm copy-in\"" in table  # markdown-escaped
    good_end = tmp_path / "results" / "bisect-night-2-head"
    assert not list(good_end.glob("good-*/engine.log"))  # the first nightly's cell was the good end

    third = nightly(tmp_path, config, "night-3")
    assert third.returncode == 1
    [again] = json.loads((tmp_path / "results" / "night-3" / "summary.json").read_text())["regressions"]
    assert again["message"] == "the cell already failed in night-2: not a new regression"
    assert not (tmp_path / "results" / "bisect-night-3-head").exists()


def stored_run(results: Path, run_id: str, started: str, cells: dict[str, dict[str, Any]],
               config_path: str = "nightly.yaml") -> Path:
    """A finished run folder as far as `findings` reads it: run.json and summary.json."""
    folder = results / run_id
    folder.mkdir(parents=True)
    write_json(folder / "run.json", {"run_id": run_id, "status": "complete", "config_path": config_path,
                                     "started_at": started})
    rows = [{"id": cell, "status": spec.get("status", "ok"),
             "source": {"repo": "engine", "ref": "main", "sha": spec["sha"]} if spec.get("sha") else None,
             "flags": [{"metric": "m", "check": "min", "action": "fail", "message": "broke"}] if spec.get("fails") else []}
            for cell, spec in cells.items()]
    write_json(folder / "summary.json", hand_made({"run_id": run_id, "cells": rows}).dump())
    return folder


def test_what_cannot_be_bisected_says_why(tmp_path: Path) -> None:
    results = tmp_path / "results"
    stored_run(results, "old", "2026-12-01T02:00:00+00:00",
               {"same": {"sha": "a" * 40}, "installed": {}, "failed-before": {"sha": "a" * 40, "fails": True},
                "moved": {"sha": "a" * 40}, "errored": {"status": "error"}})
    stored_run(results, "other-config", "2026-12-02T01:00:00+00:00", {"same": {"sha": "c" * 40}}, config_path="x.yaml")
    new = stored_run(results, "new", "2026-12-02T02:00:00+00:00",
                     {"same": {"sha": "a" * 40, "fails": True}, "installed": {"fails": True},
                      "failed-before": {"sha": "b" * 40, "fails": True}, "moved": {"sha": "b" * 40, "fails": True},
                      "errored": {"sha": "b" * 40, "fails": True}, "healthy": {"sha": "b" * 40}})
    assert previous_run(results, new) == results / "old"
    said = {f["cell"]: f for f in findings(new, RunSummary.load(new / "summary.json"), results)}
    assert set(said) == {"same", "installed", "failed-before", "moved", "errored"}  # only cells failing now
    assert said["same"]["message"].startswith(f"both runs ran engine commit {'a' * 12}: the change is not in the engine")
    assert said["installed"]["message"].startswith("the engine source SHA is not recorded in both runs")
    assert said["failed-before"]["message"] == "the cell already failed in old: not a new regression"
    assert said["errored"]["message"] == "the cell did not run in old"
    assert said["moved"] == {"cell": "moved", "previous_run": "old", "good": "a" * 40, "bad": "b" * 40, "bisect": True}


def test_a_first_nightly_has_nothing_to_compare_with(tmp_path: Path) -> None:
    results = tmp_path / "results"
    only = stored_run(results, "first", "2026-12-01T02:00:00+00:00", {"c": {"sha": "a" * 40, "fails": True}})
    [said] = findings(only, RunSummary.load(only / "summary.json"), results)
    assert said["message"] == "no earlier finished run of this config to compare with"
