"""The public API, `evalkit.run_matrix(MatrixRequest(...))`, on the simulated engine with small runs:
what it writes and returns, an interrupted run and its resume, an external server, and bad input
refused before anything exists."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

import pytest
from junitparser import JUnitXml

import evalkit
from evalkit import MatrixOutcome, MatrixRequest, run_matrix
from evalkit.api.publish import notify
from evalkit.errors import EXIT_INTERRUPTED, ConfigError, LockHeld
from evalkit.render.github import workflow_commands
from evalkit.run.lock import DeviceLock
from evalkit.store import read_json
from tests.conftest import CONFIGS
from tests.helpers.sim import SimServer

TWO_CELLS = ("parallel=dp8,graph=piecewise",)
"""The demo's buggy cell and its fix-on twin."""


def demo(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "demo.yaml"
    path.write_text((CONFIGS / "demo.yaml").read_text().replace("count: 64", "count: 4") + extra)
    return path


def request(tmp_path: Path, **fields: object) -> MatrixRequest:
    base: dict[str, object] = {"only": TWO_CELLS, "limit": 20, "run_id": "r", "results_dir": tmp_path / "results",
                               "cache_dir": tmp_path / "cache", "lock_file": tmp_path / "devices.lock"}
    if "config_path" not in fields:
        base["config_path"] = demo(tmp_path)
    return MatrixRequest(**{**base, **fields})  # type: ignore[arg-type]


COMMAND = ("evalkit", "matrix", "--model", "demo", "--limit", "20")


@pytest.fixture(scope="module")  # starts engines: every test that reads it asks for `engine_processes`
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, MatrixOutcome]:
    """One small run, read by the tests below: asked, as a script in a GitHub Actions step would,
    for the JUnit file, the step summary and a notify hook (a shell writing its argument and
    EVALKIT_EXIT_CODE to hook.txt)."""
    tmp_path = tmp_path_factory.mktemp("api-run")
    hook = f"sh -c 'echo \"$0 $EVALKIT_EXIT_CODE\" > {tmp_path / 'hook.txt'}'"
    with DeviceLock(tmp_path / "devices.lock", "other-run"), pytest.MonkeyPatch.context() as env:  # the simulator needs no device lock
        env.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "step-summary.md"))
        outcome = run_matrix(request(tmp_path, command_line=COMMAND, junit=tmp_path / "ci" / "junit.xml", github=True,
                                     notify=hook))
    return tmp_path, outcome


@pytest.mark.smoke  # the default tier's one small matrix of the simulator: two cells, 20 questions
@pytest.mark.usefixtures("engine_processes")
def test_a_run_writes_its_folder_summary_table_and_history_and_returns_the_outcome(
        finished: tuple[Path, MatrixOutcome]) -> None:
    tmp_path, outcome = finished
    run = tmp_path / "results" / "r"
    assert isinstance(outcome, MatrixOutcome) and outcome.run_path == run and not outcome.interrupted
    assert outcome.summary.dump() == read_json(run / "summary.json")
    assert [(c.id, c.status) for c in outcome.summary.cells] == [("dp8-piecewise-fixon", "ok"),
                                                                 ("dp8-piecewise-fixoff", "ok")]
    assert outcome.exit_code == outcome.summary.exit_code in (0, 1)
    table = (run / "table.md").read_text()
    assert "dp8-piecewise-fixoff" in table and "evalkit matrix --model demo --limit 20" in table
    info = read_json(run / "run.json")
    assert (info["schema_version"], info["status"], info["command"], info["limit"]) == (1, "complete", list(COMMAND), 20)
    assert info["only"] == list(TWO_CELLS) and info["simulated"] is True
    with sqlite3.connect(tmp_path / "results" / "history.db") as db:  # the default history database
        assert db.execute("SELECT count(*) FROM cells WHERE run_id = 'r'").fetchone() == (2,)


class InterruptAt:
    """Progress that sends this process SIGINT (a Ctrl-C) when `cell` reaches `state`, once."""

    def __init__(self, cell: str, state: str) -> None:
        self.cell, self.state, self.sent = cell, state, False

    def update(self, cell_id: str, state: str, detail: str = "") -> None:
        if (cell_id, state) == (self.cell, self.state) and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.usefixtures("engine_processes")
def test_an_interrupted_run_keeps_its_finished_cells_still_reports_and_resume_completes_it(tmp_path: Path) -> None:
    outcome = run_matrix(request(tmp_path, history=False), InterruptAt("dp8-piecewise-fixoff", "starting"))
    run = tmp_path / "results" / "r"
    assert outcome.interrupted and outcome.exit_code == EXIT_INTERRUPTED == outcome.summary.exit_code
    assert outcome.summary.dump() == read_json(run / "summary.json") and (run / "table.md").is_file()
    assert [c.status for c in outcome.summary.cells] == ["ok", "not run"]
    assert read_json(run / "run.json")["status"] == "interrupted"

    resumed = run_matrix(MatrixRequest(resume="r", results_dir=tmp_path / "results", history=False,
                                       lock_file=tmp_path / "devices.lock"))
    assert resumed.run_path == run and not resumed.interrupted
    assert [c.status for c in resumed.summary.cells] == ["ok", "ok"]
    info = read_json(run / "run.json")
    assert info["status"] == "complete" and len(info["resumed_at"]) == 1 and info["limit"] == 20


def test_a_running_server_is_one_external_cell_and_nothing_is_started(
        tmp_path: Path, sim_process: Callable[..., SimServer]) -> None:
    config = tmp_path / "ext.yaml"
    config.write_text("model: sim-model\nengine: {profile: sim}\nevals:\n  gsm8k: {num_fewshot: 1}\n"
                      "  repetition: {count: 2, max_tokens: 256}\n")
    url = sim_process().url
    outcome = run_matrix(MatrixRequest(config_path=config, base_url=url, limit=5, run_id="ext",
                                       results_dir=tmp_path / "results", history=False))
    assert [(c.id, c.status) for c in outcome.summary.cells] == [("external", "ok")]
    record = read_json(outcome.run_path / "external" / "cell.json")
    assert record["launch"] == {"base_url": url, "note": "external server: not started by evalkit"}
    assert "engine_pid" not in record and read_json(outcome.run_path / "run.json")["base_url"] == url


@pytest.mark.parametrize(("fields", "error", "words"), [
    ({"base_url": "http://127.0.0.1:9/v1"}, ConfigError, "no answer from http://127.0.0.1:9/v1/models"),
    ({"base_url": "http://127.0.0.1:8000", "executor": "slurm"}, ConfigError, "use --executor local"),
    ({"only": ("graph=nosuch",)}, ConfigError, "nosuch is not a value of graph"),
    ({"run_id": "../evil"}, ConfigError, "run id '../evil'"),
    ({"limit": 0}, ConfigError, "limit 0: give 1 or more"),
    ({"executor": "cloud"}, ConfigError, "executor 'cloud': use local or slurm"),
    ({"resume": "never-ran"}, ConfigError, "never-ran: no such run"),
])
def test_bad_input_is_raised_before_anything_is_created(tmp_path: Path, fields: dict, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        run_matrix(request(tmp_path, **fields))
    assert not (tmp_path / "results").exists()


@pytest.mark.usefixtures("engine_processes")
def test_a_run_asked_for_junit_github_and_notify_delivers_each_and_returns_what_to_print(
        finished: tuple[Path, MatrixOutcome]) -> None:
    tmp_path, outcome = finished
    table = outcome.run_path / "table.md"
    suite = next(iter(JUnitXml.fromfile(str(tmp_path / "ci" / "junit.xml"))))
    assert {p.name: p.value for p in suite.properties()}["run_id"] == "r"
    assert [c.classname for c in suite if c.name == "runs"] == [f"evalkit.r.{cell.id}" for cell in outcome.summary.cells]
    system_out = ElementTree.parse(tmp_path / "ci" / "junit.xml").getroot().find("testsuite/system-out")
    assert system_out is not None and system_out.text == table.read_text(encoding="utf-8")
    assert (tmp_path / "step-summary.md").read_text(encoding="utf-8") == table.read_text(encoding="utf-8")
    assert list(outcome.annotations) == workflow_commands(outcome.summary)
    assert (tmp_path / "hook.txt").read_text().split() == [str(table), str(outcome.summary.exit_code)]
    assert outcome.warnings == ()


def test_a_notify_hook_that_fails_or_cannot_start_is_a_warning(tmp_path: Path) -> None:
    assert notify("false", tmp_path / "table.md", 1) == ["warning: --notify false exited with 1"]
    (warning,) = notify(str(tmp_path / "no-such-hook"), tmp_path / "table.md", 0)
    assert warning.startswith(f"warning: --notify {tmp_path / 'no-such-hook'}: ") and "No such file" in warning


def test_the_device_lock_held_by_another_run_is_raised_before_anything_is_created(tmp_path: Path) -> None:
    req = request(tmp_path, config_path=demo(tmp_path, extra="devices: {count: 8}\n"))
    with DeviceLock(req.lock_file, "other-run"), pytest.raises(LockHeld, match="run other-run"):
        run_matrix(req)
    assert not (tmp_path / "results").exists()


@pytest.mark.smoke  # a fresh interpreter (0.5 s): what `import evalkit` loads, which this process cannot show
def test_the_api_names_are_pinned_and_importing_evalkit_stays_cheap() -> None:
    assert sorted(evalkit.__all__) == ["MatrixOutcome", "MatrixRequest", "__version__", "run_matrix", "run_one_cell"]
    assert evalkit.run_matrix is run_matrix and callable(evalkit.run_one_cell)
    heavy = ("lm_eval", "scipy", "pandas", "pydantic")
    probe = f"import sys, evalkit; print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", "import json; " + probe], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []
    with pytest.raises(AttributeError):
        evalkit.no_such_name  # noqa: B018
