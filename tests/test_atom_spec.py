"""Speculative decoding on ATOM: its acceptance is read from ATOM's own log, per eval, and judged.

ATOM serves no /metrics at the refs evalkit tests; its scheduler logs `[MTP Stats Interval]` and
cumulative `[MTP Stats         ]` lines every 1000 verify steps (atom/model_engine/scheduler.py
`SpecStats._log` at ccc861dc5 and HEAD ffdf3bb5), one scheduler per attention-DP rank. The lines
below are ATOM's f-string, filled in. The simulator logs them the same way (sim/mtp.py), and
configs/demo-spec.yaml runs a matrix where the buggy cell's acceptance falls with its accuracy.
The simulator's log lines and the matrices (whose cells are simulator processes) are e2e.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.evals.base import EvalResult
from evalkit.evals.engine_figures import EngineFigures
from evalkit.profiles import get_profile
from evalkit.profiles.atom import read_mtp_log
from evalkit.render import render
from evalkit.run.engine_report import EngineScrapes
from tests.conftest import CONFIGS
from tests.helpers.cli import evalkit_cli
from tests.helpers.sim import SimServer

DIST = "{0: '10.00%', 1: '20.00%', 2: '30.00%', 3: '40.00%'}"


def _line(label: str, accepted: int, drafts: int) -> str:
    return (f"[atom 10:00:00] [MTP Stats {label}] Average toks/fwd: 3.00, Accepted/Total Draft tokens: "
            f"{accepted}/{drafts}, Acceptance rate: {accepted / drafts:.2%}, Accepted tokens distribution: {DIST}")


def test_a_window_s_counts_are_its_interval_lines_summed_over_every_scheduler() -> None:
    """Two DP ranks log unlabelled, interleaved lines; the interval lines of a window add up to the
    differences of each rank's cumulative counts around it, and a window without a line has none."""
    rank_a = [_line("Interval", 2000, 3000), _line("        ", 2000, 3000)]
    rank_b = [_line("Interval", 1500, 3000), _line("        ", 1500, 3000)]
    later_a = [_line("Interval", 2100, 3000), _line("        ", 4100, 6000)]
    window = "\n".join(["[atom 10:00:00] Engine Core: ready", *rank_a, *rank_b, *later_a])
    counts = read_mtp_log(window)
    assert counts is not None
    assert (counts.draft_tokens, counts.accepted_tokens, counts.drafts, counts.lines) == (9000, 5600, 3000, 3)
    assert read_mtp_log("[atom 10:00:00] Engine Core: ready\n") is None


def _settled(server: SimServer) -> str:
    """The server's log once no line has come for 0.3 s (lines are read from its pipe by a thread)."""
    seen = None
    while seen != server.log:
        seen = server.log
        time.sleep(0.3)
    return seen


def test_the_simulator_logs_atom_s_lines_and_the_buggy_cell_accepts_nothing(sim_process: Callable[..., SimServer]) -> None:
    """One scheduler (TP): its interval lines sum to its last cumulative line, the acceptance is
    what the cell was given; the buggy cell (DP attention + PIECEWISE, fix off) accepts no draft."""
    healthy = ("--method", "mtp", "--num-speculative-tokens", "3", "--sim-spec-acceptance", "0.7", "-tp", "8")
    buggy = (*healthy, "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off")
    rates = []
    for args in (healthy, buggy):
        server = sim_process("--sim-dialect", "atom", *args)
        with server.client() as client:
            for i in range(12):
                client.post("/v1/completions", json={"prompt": f"Write a long essay about river {i}.",
                                                     "max_tokens": 1024, "temperature": 0}).raise_for_status()
            log = _settled(server)
        counts = read_mtp_log(log)
        assert counts is not None and counts.draft_tokens == 3 * counts.drafts == 3000 * counts.lines
        rates.append(counts.accepted_tokens / counts.draft_tokens)
        if args is healthy:
            last = [line for line in log.splitlines() if "[MTP Stats         ]" in line][-1]
            found = re.search(r"Accepted/Total Draft tokens: (\d+)/(\d+)", last)
            assert found is not None
            assert (int(found.group(1)), int(found.group(2))) == (counts.accepted_tokens, counts.draft_tokens)
    assert 0.65 < rates[0] < 0.75 and rates[1] == 0.0


@pytest.fixture(scope="module")
def spec_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """configs/demo-spec.yaml's DP8 cells, fix on and off (~30 s): one run for the tests below, each
    of which asks for `engine_processes` itself (module scope cannot), which makes it e2e."""
    tmp = tmp_path_factory.mktemp("spec")
    done = evalkit_cli("matrix", "--config", str(CONFIGS / "demo-spec.yaml"), "--run-id", "spec", "--json", "--quiet",
                       "--lock-file", str(tmp / "lock"), "--only", "parallel=dp8", cwd=tmp)
    assert done.returncode == 1, done.stderr[-3000:]
    return {"summary": json.loads(done.stdout), "run": tmp / "results" / "spec"}


def test_each_cell_gets_its_acceptance_from_its_own_eval_windows(spec_run: dict[str, Any], engine_processes: None) -> None:
    cells = {c["id"]: c for c in spec_run["summary"]["cells"]}
    assert 0.6 < cells["dp8-fixon"]["metrics"]["engine.spec_acceptance_rate"] < 0.75
    assert cells["dp8-fixon"]["metrics"]["engine.spec_accepted_len"] > 2.5
    assert cells["dp8-fixoff"]["metrics"]["engine.spec_acceptance_rate"] == 0.0
    record = json.loads((spec_run["run"] / "dp8-fixon" / "cell.json").read_text())
    for figures in record["engine_metrics"].values():  # each eval's own window, read from the log
        assert figures["spec_from"] == "log" and figures["spec_log_lines"] >= 1
        assert figures["spec_draft_tokens"] == 3 * figures["spec_drafts"]
    log = (spec_run["run"] / "dp8-fixon" / "engine.log").read_text()
    total = read_mtp_log(log)
    assert total is not None
    assert sum(f["spec_log_lines"] for f in record["engine_metrics"].values()) <= total.lines
    assert "engine.tpot_s" not in cells["dp8-fixon"]["metrics"]


def test_the_acceptance_gate_fails_the_buggy_cell_and_the_reports_say_it_fell_with_accuracy(
        spec_run: dict[str, Any], engine_processes: None) -> None:
    cells = {c["id"]: c for c in spec_run["summary"]["cells"]}
    gate = [f for f in cells["dp8-fixoff"]["flags"] if f["metric"] == "engine.spec_acceptance_rate"]
    assert {(f["check"], f["action"]) for f in gate} == {("min", "fail"), ("accuracy_with_acceptance", "warn")}
    said = next(f["message"] for f in gate if f["check"] == "accuracy_with_acceptance")
    assert "against its fix-on twin" in said and "GSM8K flexible -" in said and "-> 0.000" in said
    assert not [f for f in cells["dp8-fixon"]["flags"] if f["metric"] == "engine.spec_acceptance_rate"]
    for fmt in ("markdown", "html"):
        shown = render(spec_run["summary"], fmt, spec_run["run"]) or ""
        assert "spec accept" in shown and "accuracy fell with speculative acceptance" in shown


def test_the_acceptance_column_shows_only_where_a_cell_has_it() -> None:
    """The table's `spec accept` column is for runs with speculative decoding; the engine eval
    keeps its metric registered either way (a threshold on it is validated like any other)."""
    spec = next(s for s in EngineFigures.metrics if s.name == "engine.spec_acceptance_rate")
    assert spec.display.column == "spec accept" and spec.display.column_when_measured


@pytest.mark.parametrize("external", [False, True])
def test_an_eval_counts_only_the_lines_logged_while_it_ran(tmp_path: Path, external: bool) -> None:
    """The window opens when the evals start: warm-up lines before it do not count, and an eval
    without a line has no figures, with the reason. A server evalkit did not start (`--base-url`)
    has no log here: nothing is read."""
    log = tmp_path / "engine.log"
    log.write_text(_line("Interval", 3000, 3000) + "\n")  # the warm-up's
    with EngineScrapes("http://127.0.0.1:9", get_profile("atom"), external=external, log_path=log) as scrapes:
        with log.open("a") as f:
            f.write(_line("Interval", 1500, 3000) + "\n" + _line("        ", 4500, 6000) + "\n")
        scraped = [scrapes.after(name, EvalResult(metrics={}, samples=[]), 1.0) for name in ("gsm8k", "repetition")]
    assert [s.name for s in scraped] == ["gsm8k", "repetition"]
    gsm8k, repetition = scraped[0].figures, scraped[1].figures
    if external:
        assert gsm8k == repetition == {"missing": "profile atom names no metrics endpoint"}
        return
    assert (gsm8k["spec_draft_tokens"], gsm8k["spec_accepted_tokens"], gsm8k["spec_acceptance_rate"]) == (3000, 1500, 0.5)
    assert gsm8k["metrics_missing"] == "profile atom names no metrics endpoint"
    assert repetition["missing"].endswith("its log counted no speculative decoding in this eval's window")
    assert EngineFigures().flat({"engine_metrics": {"gsm8k": gsm8k}})["engine.spec_acceptance_rate"] == 0.5


@pytest.mark.slow
def test_the_whole_spec_demo_flags_only_the_buggy_cell(tmp_path: Path, engine_processes: None) -> None:
    """configs/demo-spec.yaml's four cells (~1 min): one scheduler (TP8) and eight (DP8 attention)
    alike give the acceptance the simulator was given; only the buggy cell breaks a threshold."""
    done = evalkit_cli("matrix", "--config", str(CONFIGS / "demo-spec.yaml"), "--run-id", "all", "--json", "--quiet",
                       "--lock-file", str(tmp_path / "lock"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    cells = {c["id"]: c for c in json.loads(done.stdout)["cells"]}
    for cid in ("tp8-fixon", "tp8-fixoff", "dp8-fixon"):
        assert 0.65 < cells[cid]["metrics"]["engine.spec_acceptance_rate"] < 0.75
    assert cells["dp8-fixoff"]["metrics"]["engine.spec_acceptance_rate"] == 0.0
    assert {cid for cid, c in cells.items() if any(f["action"] == "fail" for f in c["flags"])} == {"dp8-fixoff"}
