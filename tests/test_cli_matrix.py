"""`evalkit matrix` as a thin command: options become a MatrixRequest, the outcome is printed and is the exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.api import matrix as api
from evalkit.api.matrix import MatrixOutcome, MatrixRequest
from evalkit.cli import main
from tests.helpers.runs import hand_made

SUMMARY = hand_made({"exit_code": 130, "status": "interrupted"})
"""An interrupted run with no cell finished."""


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[MatrixRequest]:
    """run_matrix replaced by one that records its request and reports an interrupted run."""
    seen: list[MatrixRequest] = []

    def fake(request: MatrixRequest, progress: Any = None) -> MatrixOutcome:
        seen.append(request)
        return MatrixOutcome(tmp_path / "r7", SUMMARY, interrupted=True)

    monkeypatch.setattr(api, "run_matrix", fake)
    return seen


def test_options_become_the_request(requests: list[MatrixRequest], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    CliRunner().invoke(main, ["matrix", "-m", "demo", "--only", "graph=full", "--limit", "5", "--no-lock",
                              "--no-history", "--executor", "slurm", "--max-parallel", "2", "--json",
                              "--junit", "ci/junit.xml", "--notify", "post --channel ci", "--bisect-on-regression"])
    (request,) = requests
    assert (request.model, request.only, request.limit, request.executor, request.max_parallel) == (
        "demo", ("graph=full",), 5, "slurm", 2)
    assert not request.lock and not request.history and request.resume is None
    assert request.results_dir == Path("results") and request.command_line[0] == "evalkit"
    # what the run delivers is the library's work too: the command only asks for it
    assert (request.junit, request.notify, request.bisect_on_regression, request.github) == (
        Path("ci/junit.xml"), "post --channel ci", True, True)


def test_what_the_library_hands_back_is_printed_annotations_where_the_runner_reads_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    outcome = MatrixOutcome(tmp_path / "r7", SUMMARY, interrupted=True, annotations=("::error title=evalkit::broke",),
                            warnings=("warning: --notify post exited with 1",))
    monkeypatch.setattr(api, "run_matrix", lambda request, progress=None: outcome)
    plain = CliRunner().invoke(main, ["matrix", "--resume", "r7", "--junit", "j.xml"])
    assert plain.stdout.splitlines()[-1] == "::error title=evalkit::broke"
    assert plain.stderr.splitlines()[-2:] == ["junit: j.xml", "warning: --notify post exited with 1"]
    as_json = CliRunner().invoke(main, ["matrix", "--resume", "r7", "--json"])
    assert json.loads(as_json.stdout) == SUMMARY.dump()  # stdout is the document: the annotation goes to stderr
    assert as_json.stderr.splitlines()[-2:] == ["::error title=evalkit::broke", "warning: --notify post exited with 1"]


def test_an_interrupted_run_says_how_to_resume_and_exits_130(requests: list[MatrixRequest]) -> None:
    result = CliRunner().invoke(main, ["matrix", "--resume", "r7", "--json"])
    assert result.exit_code == 130 and requests[0].resume == "r7"
    # under --json, stdout is the data: what to do next, where the results are and the headline go to stderr
    resume, where, headline = result.stderr.splitlines()
    assert resume == "interrupted: finished cells kept; continue with: evalkit matrix --resume r7"
    assert where.startswith("results: ") and where.endswith("r7") and headline.endswith("run interrupted: no cell finished")
    assert json.loads(result.stdout) == SUMMARY.dump()


def test_dry_run_prints_the_plan_and_runs_nothing(requests: list[MatrixRequest]) -> None:
    result = CliRunner().invoke(main, ["matrix", "-m", "demo", "--dry-run"])
    assert result.exit_code == 0 and result.output.startswith("# ") and "argv:" in result.output
    assert requests == []
