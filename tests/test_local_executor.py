"""Ctrl-C during a local run (run/local.py, evals/cancel.py), in this process: the cell evaluates a
simulator a thread of this process serves (`--base-url`, tests/helpers/served.py), and a progress
hook sends this process SIGINT while its GSM8K eval runs, as a terminal's Ctrl-C would.

The run says at once what it stops, cancels the running eval, keeps no record of the cell it cut
(so `--resume` runs it again), still writes its verdict and ends `interrupted`; the resume then
completes it. Signals to evalkit as a process, and engines stopped on them, are the `e2e` tier's
(tests/test_interrupts.py, tests/test_faults.py).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from evalkit.api.matrix import MatrixRequest, run_matrix
from evalkit.errors import EXIT_INTERRUPTED
from evalkit.run.local import RUN_ROW
from evalkit.store import read_json
from tests.helpers.served import served_sim

CONFIG = """\
model: sim/interrupt
served_name: sim-model
engine: {profile: sim}
evals:
  gsm8k: {num_fewshot: 1, num_concurrent: 4}
  repetition: {enabled: false}
"""


class CtrlCDuring:
    """Progress that sends this process SIGINT once, when `cell` reports `state`; it keeps every
    update it hears."""

    def __init__(self, cell: str, state: str) -> None:
        self.cell, self.state, self.sent = cell, state, False
        self.heard: list[tuple[str, str, str]] = []

    def update(self, cell_id: str, state: str, detail: str = "") -> None:
        self.heard.append((cell_id, state, detail))
        if (cell_id, state) == (self.cell, self.state) and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_mid_eval_stops_the_run_keeps_no_cut_cell_and_resume_completes_it(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    results = tmp_path / "results"
    with served_sim("--sim-seed", "0") as url:
        progress = CtrlCDuring("external", "gsm8k")
        outcome = run_matrix(MatrixRequest(config_path=config, base_url=url, limit=40, run_id="r", results_dir=results,
                                           history=False), progress)
        run = results / "r"
        assert outcome.interrupted and outcome.exit_code == EXIT_INTERRUPTED == outcome.summary.exit_code
        assert [(c.id, c.status) for c in outcome.summary.cells] == [("external", "not run")]
        assert not (run / "external" / "cell.json").exists()  # cut, so never recorded: --resume runs it again
        assert read_json(run / "run.json")["status"] == "interrupted" and (run / "table.md").is_file()
        [said] = [detail for cell_id, state, detail in progress.heard if (cell_id, state) == (RUN_ROW, "interrupted")]
        assert said == ("SIGINT: stopping the run (no engine is running); "
                        "a second Ctrl-C or SIGTERM stops at once")

        # --base-url given again: a resume does not yet take it from run.json (it would start the
        # config's own engine instead; reported, evalkit/api/matrix.py `_resolve`)
        resumed = run_matrix(MatrixRequest(resume="r", base_url=url, results_dir=results, history=False))
    assert resumed.run_path == run and not resumed.interrupted
    assert [(c.id, c.status) for c in resumed.summary.cells] == [("external", "ok")]
    info = read_json(run / "run.json")
    assert info["status"] == "complete" and len(info["resumed_at"]) == 1 and info["base_url"] == url
    assert read_json(run / "external" / "cell.json")["metrics"]["gsm8k"]["n"] == 40
