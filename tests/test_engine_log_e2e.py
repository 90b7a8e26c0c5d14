"""What the engine's log proves, through real simulator processes: each cell records the graph mode
and layout its engine says it ran (from ATOM's own lines, which the simulator prints), a cell whose
engine ran another mode than asked is flagged in every report format and the live progress, and
the config's log assertions pass or fail the cell before its evals run.

One run (module scope) of seven cells serves every test; each asks for `engine_processes` (the
`e2e` tier).
"""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from evalkit import MatrixRequest, run_matrix
from evalkit.render import render

FIX = r"PIECEWISE: forced aiter ca_comm \(\w+\) to unreg copy-in capture path for cudagraph-safe DP collectives\."
CONFIG = f"""
model: sim/logs
engine:
  profile: sim
  settings: {{tensor_parallel: 8, dp_attention: true}}
  log: [{{must_appear: 'Engine kwargs: \\{{'}}]
axes:
  graph:
    full: {{settings: {{graph_mode: FULL}}}}
    piecewise: {{settings: {{graph_mode: PIECEWISE}}}}
    eager: {{settings: {{graph_mode: eager}}}}
    # asked PIECEWISE, but the engine runs FULL (like an engine that downgrades)
    downgraded: {{settings: {{graph_mode: PIECEWISE}}, args: ["--sim-ran-mode", "FULL"]}}
  fix:
    fixon: {{args: ["--sim-fix", "on"], log: [{{must_appear: '{FIX}', when: {{graph: piecewise}}}}]}}
    fixoff: {{args: ["--sim-fix", "off"], log: [{{must_not_appear: 'forced aiter ca_comm', when: {{graph: piecewise}}}}]}}
    # named "off" but the tree has the fix: its line breaks the must-not-appear
    claimsoff: {{args: ["--sim-fix", "on"], log: [{{must_not_appear: 'forced aiter ca_comm', when: {{graph: piecewise}}}}]}}
    # named "on" but the fix is not in: no line for the must-appear
    claimson: {{args: ["--sim-fix", "off"], log: [{{must_appear: '{FIX}', when: {{graph: piecewise}}}}]}}
evals:
  gsm8k: {{num_fewshot: 0}}
  repetition: {{enabled: false}}
timeouts: {{startup: 60, stop_grace: 5}}
"""
ONLY = ("fix=fixon", "graph=piecewise")

pytestmark = pytest.mark.usefixtures("engine_processes")


class Recorder:
    def __init__(self) -> None:
        self.updates: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    def update(self, cell_id: str, state: str, detail: str = "") -> None:
        with self._lock:
            self.updates.append((cell_id, state, detail))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Recorder]:
    tmp = tmp_path_factory.mktemp("enginelog")
    config = tmp / "logs.yaml"
    config.write_text(CONFIG)
    progress = Recorder()
    outcome = run_matrix(MatrixRequest(config_path=config, only=ONLY, limit=2, results_dir=tmp / "results",
                                       cache_dir=tmp / "cache", lock=False, history=False, run_id="logs"), progress)
    return outcome.summary.dump(), outcome.run_path, progress  # summary.json as the tests read it


def cells(run: tuple[dict[str, Any], Path, Recorder]) -> dict[str, dict[str, Any]]:
    return {c["id"]: json.loads((run[1] / c["id"] / "cell.json").read_text()) for c in run[0]["cells"]}


def test_every_cell_records_the_mode_and_layout_its_engine_ran(run: tuple[dict[str, Any], Path, Recorder]) -> None:
    found = cells(run)
    assert sorted(found) == sorted(["full-fixon", "piecewise-fixon", "eager-fixon", "downgraded-fixon",
                                    "piecewise-fixoff", "piecewise-claimsoff", "piecewise-claimson"])
    modes = {cid: (c["ran_as"]["mode"], c["ran_as"]["agrees"]) for cid, c in found.items()}
    assert modes == {"full-fixon": ("FULL", True), "piecewise-fixon": ("PIECEWISE", True),
                     "eager-fixon": ("eager", True), "downgraded-fixon": ("FULL", False),
                     "piecewise-fixoff": ("PIECEWISE", True), "piecewise-claimsoff": ("PIECEWISE", True),
                     "piecewise-claimson": ("PIECEWISE", True)}
    layout = {"tensor_parallel": 8, "data_parallel": 1, "dp_attention": True, "dp_attention_ranks": 8}
    assert all(c["ran_as"]["layout"] == layout for c in found.values())
    assert found["eager-fixon"]["effective_mode"] == "eager"
    assert found["downgraded-fixon"]["ran_as"]["disagreements"] == ["graph mode FULL, asked PIECEWISE"]
    assert found["downgraded-fixon"]["ran_as"]["asked"] == {"graph_mode": "PIECEWISE", "tensor_parallel": 8,
                                                            "dp_attention": True}


def test_a_cell_that_ran_another_mode_is_flagged_everywhere(run: tuple[dict[str, Any], Path, Recorder]) -> None:
    summary, run_path, progress = run
    row = next(c for c in summary["cells"] if c["id"] == "downgraded-fixon")
    flagged = [c["id"] for c in summary["cells"] for f in c["flags"] if f["check"] == "ran_as"]
    assert flagged == ["downgraded-fixon"]
    (flag,) = [f for f in row["flags"] if f["check"] == "ran_as"]
    message = "downgraded-fixon: engine ran graph mode FULL, asked PIECEWISE (its own log)"
    assert (flag["action"], flag["message"]) == ("warn", message)
    assert ("downgraded-fixon", "warning", "engine ran graph mode FULL, asked PIECEWISE") in progress.updates
    out = io.StringIO()
    render(summary, "terminal", run_path, console=Console(file=out, width=250, color_system=None))
    for text in (out.getvalue(), render(summary, "markdown", run_path), render(summary, "html", run_path),
                 render(summary, "csv"), render(summary, "json")):
        assert text is not None and "engine ran graph mode FULL, asked PIECEWISE" in text


def test_log_assertions_hold_in_the_cells_that_ran_as_named(run: tuple[dict[str, Any], Path, Recorder]) -> None:
    found = cells(run)
    checks = {cid: [(k["origin"], k["must"], k["ok"]) for k in c["log_checks"]] for cid, c in found.items()}
    assert checks["full-fixon"] == [("engine", "appear", True)]  # the fix's assertion is for PIECEWISE cells only
    assert checks["piecewise-fixon"] == [("engine", "appear", True), ("fix=fixon", "appear", True)]
    assert checks["piecewise-fixoff"] == [("engine", "appear", True), ("fix=fixoff", "not appear", True)]
    assert "forced aiter ca_comm (get_dp_group)" in found["piecewise-fixon"]["log_checks"][1]["line"]
    for cid in ("full-fixon", "piecewise-fixon", "piecewise-fixoff"):
        assert found[cid]["status"] == "ok" and found[cid]["metrics"]["gsm8k"]


def test_a_broken_assertion_fails_the_cell_before_its_evals(run: tuple[dict[str, Any], Path, Recorder]) -> None:
    summary, run_path, _ = run
    found = cells(run)
    claimsoff, claimson = found["piecewise-claimsoff"], found["piecewise-claimson"]
    assert claimsoff["status"] == claimson["status"] == "error"
    assert claimsoff["error"]["type"] == "LogAssertionFailed"
    assert claimsoff["error"]["message"].startswith(
        "engine log: fix=claimsoff: must_not_appear 'forced aiter ca_comm' matches: [atom ")
    assert claimson["error"]["message"] == f"engine log: fix=claimson: no line matches must_appear '{FIX}'"
    assert claimsoff["metrics"] == claimson["metrics"] == {}  # no eval ran
    assert [k["ok"] for k in claimson["log_checks"]] == [True, False]
    assert summary["exit_code"] == 3
    markdown = render(summary, "markdown", run_path)
    assert markdown is not None and "1/2 held; broken: fix=claimson must appear" in markdown
