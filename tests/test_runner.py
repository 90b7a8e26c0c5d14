"""The run's parts as specifications, on real simulated engines.

One cell's lifecycle (run/cell.py): the record it returns and writes when the cell is ok, when its
engine fails, when an eval fails, when evalkit itself fails, when the run stops it or its budget
runs out. The executor protocol (run/executor.py): what an executor refuses is bad input before
the run folder exists; the local executor runs cells in plan order and skips those past the run's
budget. The evals here are one toy eval registered by this module, so no lm-eval is needed.
A test that starts engines asks for `engine_processes` (the `e2e` tier); the executors refused
before anything starts stay in the default tier.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from evalkit import MatrixRequest, run_matrix
from evalkit.config import load_config
from evalkit.config.cells import expand
from evalkit.errors import ConfigError, EvalError
from evalkit.evals import registry
from evalkit.evals.base import Comparison, Eval, EvalContext, EvalResult, EvalSettings, MetricDisplay, MetricSpec
from evalkit.evals.cancel import Stop
from evalkit.run.cell import CellControl, CellJob, run_cell
from evalkit.run.local import RUN_BUDGET_USED, LocalExecutor
from evalkit.run.options import RunOptions
from evalkit.store import RunStore, read_json
from evalkit.store.records import SCHEMA_VERSION, CellRecord
from tests.slurm.conftest import demo_config


class ProbeSettings(EvalSettings):
    fail: Literal["none", "eval", "bug"] = "none"


class Probe(Eval):
    """One completion from the server; fails on purpose when its settings say so."""

    name = "probe"
    settings_model = ProbeSettings
    default_enabled = False
    metrics = (MetricSpec("probe.n", Comparison.CONTINUOUS, MetricDisplay("probe answers")),)

    def run(self, ctx: EvalContext, settings: ProbeSettings) -> EvalResult:
        answer = httpx.post(f"{ctx.server.base_url}/v1/completions", timeout=30, json={
            "model": ctx.server.served_name, "prompt": "Say hi.", "max_tokens": 8, "temperature": 0})
        answer.raise_for_status()
        if settings.fail == "eval":
            raise EvalError("probe: the answer cannot be scored")
        if settings.fail == "bug":
            raise RuntimeError("probe: a bug")
        return EvalResult({"n": 1}, [{"id": "p-0", "text": answer.json()["choices"][0]["text"]}])

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return {"probe.n": raw["n"]}


def config_text(a: str = "[--sim-seed, '1']", fail: str = "none", timeouts: str = "{startup: 30, stop_grace: 2}") -> str:
    return f"""
model: sim/runner
served_name: runner
engine: {{profile: sim, args: [--sim-startup-seconds, '0.1']}}
axes:
  case:
    a: {{args: {a}}}
    b: {{args: [--sim-seed, '2']}}
    c: {{args: [--sim-seed, '3']}}
evals:
  gsm8k: {{enabled: false}}
  repetition: {{enabled: false}}
  probe: {{fail: {fail}}}
timeouts: {timeouts}
"""


@pytest.fixture(scope="module", autouse=True)
def probe() -> Iterator[Probe]:
    ev = registry.register(Probe())
    yield ev
    registry.unregister(ev.name)


class Lines:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def update(self, cell_id: str, state: str, detail: str = "") -> None:
        self.seen.append((cell_id, state, detail))


def job(tmp_path: Path, text: str) -> CellJob:
    """Cell `a` of a new run of `text`."""
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    config = load_config(path)
    store = RunStore(tmp_path / "results", "r")
    store.create()
    return CellJob(config, expand(config)[0], store, Lines())


def stored(job: CellJob) -> dict[str, Any] | None:
    path = job.cell_dir / "cell.json"
    return read_json(path) if path.is_file() else None


# --- one cell's lifecycle ------------------------------------------------------------------------


@pytest.mark.usefixtures("engine_processes")
def test_an_ok_cell_records_its_launch_timings_and_metrics_and_writes_exactly_that(tmp_path: Path) -> None:
    cell = job(tmp_path, config_text())
    record = run_cell(cell, CellControl(Stop()))
    assert record.status == "ok" and record.error is None and record.traceback is None
    assert record.metrics == {"probe": {"n": 1}}
    assert record.launch and record.launch["argv"][1:3] == ["-m", "evalkit.sim"] and record.engine_pid
    assert list(record.timings) == ["engine_start_s", "engine_ready_s", "warmup_attempts", "probe_s", "engine_stop_s",
                                    "engine_wall_s", "total_s"]
    assert stored(cell) == record.dump() and record.dump()["schema_version"] == SCHEMA_VERSION
    assert "error" not in record.dump()
    assert (cell.cell_dir / "probe.samples.jsonl").is_file() and (cell.cell_dir / "engine.log").is_file()
    assert [s for _, s, _ in cell.progress.seen] == ["starting", "ready", "probe", "ok"]  # type: ignore[attr-defined]


@pytest.mark.usefixtures("engine_processes")
def test_an_engine_that_exits_is_the_cells_error_with_its_exit_code_and_log_tail(tmp_path: Path) -> None:
    cell = job(tmp_path, config_text(a="[--sim-fault, crash-startup]"))
    record = run_cell(cell, CellControl(Stop()))
    assert record.status == "error" and record.error is not None
    assert (record.error.type, record.error.exit_code) == ("EngineExited", 3)
    assert "exited with code 3" in record.error.message and "simulated start-up failure" in (record.error.log_tail or "")
    assert record.traceback is None and record.metrics == {} and record.launch
    assert stored(cell) == record.dump()


@pytest.mark.usefixtures("engine_processes")
def test_an_eval_that_fails_is_the_cells_error_with_the_live_engines_log_tail(tmp_path: Path) -> None:
    cell = job(tmp_path, config_text(fail="eval"))
    record = run_cell(cell, CellControl(Stop()))
    assert record.error is not None
    assert (record.status, record.error.type, record.error.message) == ("error", "EvalError",
                                                                        "probe: the answer cannot be scored")
    assert "SIMULATED ENGINE" in (record.error.log_tail or "") and record.traceback is None
    assert "engine_ready_s" in record.timings and "probe_s" not in record.timings
    assert stored(cell) == record.dump()


@pytest.mark.usefixtures("engine_processes")
def test_a_bug_in_evalkit_is_the_cells_internal_error_with_a_traceback(tmp_path: Path) -> None:
    cell = job(tmp_path, config_text(fail="bug"))
    record = run_cell(cell, CellControl(Stop()))
    assert record.error is not None and record.error.message == "internal error: RuntimeError: probe: a bug"
    assert record.traceback and "RuntimeError: probe: a bug" in record.traceback
    assert stored(cell) == record.dump()


@pytest.mark.usefixtures("engine_processes")
def test_a_cell_the_run_stops_is_interrupted_and_writes_nothing(tmp_path: Path) -> None:
    cell = job(tmp_path, config_text(a="[--sim-startup-seconds, '30']"))
    control = CellControl(Stop())
    threading.Timer(1.0, lambda: (control.stop.set(), control.engine and control.engine.stop())).start()
    record = run_cell(cell, control)
    assert record.status == "interrupted"
    assert stored(cell) is None  # --resume runs it again


@pytest.mark.usefixtures("engine_processes")
def test_a_cell_over_its_budget_is_stopped_and_says_so(tmp_path: Path) -> None:
    cell = job(tmp_path, config_text(a="[--sim-startup-seconds, '30']"))
    record = run_cell(cell, CellControl(Stop(), budget_s=1.0))
    assert record.status == "error" and record.error is not None
    assert record.error.message.startswith("over the cell budget of 1 s (stopped): ")
    assert 1.0 <= (record.timings["total_s"] or 0) < 10


# --- executors -----------------------------------------------------------------------------------


def fake_sbatch(tmp_path: Path) -> Path:
    """A `sbatch` that answers --version and refuses every job, as Slurm does a wrong partition."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "sbatch"
    script.write_text('#!/bin/sh\ncase "$1" in\n  --version) echo "slurm-wlm 22.05.8";;\n'
                      '  --test-only) echo "sbatch: error: invalid partition specified: nosuch" >&2; exit 1;;\n'
                      '  *) echo "sbatch: submitted although the preflight refused" >&2; exit 1;;\nesac\n')
    script.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("slurm", ["sbatch missing", "sbatch refusing"])
def test_a_slurm_executor_that_cannot_run_the_jobs_is_bad_input_and_leaves_no_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: str,
) -> None:
    config = demo_config(tmp_path, partition='"nosuch"')
    if slurm == "sbatch missing":
        (tmp_path / "empty").mkdir()
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        expected = "executor slurm: sbatch does not run here"
    else:
        monkeypatch.setenv("PATH", f"{fake_sbatch(tmp_path)}{os.pathsep}{os.environ['PATH']}")
        expected = (r"cell tp8-full-fixon: Slurm refuses the job \(sbatch: error: invalid partition specified: "
                    r"nosuch\); nothing was submitted")
    with pytest.raises(ConfigError, match=expected):
        run_matrix(MatrixRequest(config_path=config, results_dir=tmp_path / "results", run_id="r", limit=5))
    assert not (tmp_path / "results").exists()


def local(tmp_path: Path, text: str) -> tuple[LocalExecutor, Lines]:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    config = load_config(path)
    store = RunStore(tmp_path / "results", "r")
    store.create()
    lines = Lines()
    options = RunOptions(results_dir=store.results_dir, cache_dir=tmp_path / "cache", run_id="r", limit=5)
    return LocalExecutor(config, store, options, lines, sources={}), lines


@pytest.mark.usefixtures("engine_processes")
def test_the_local_executor_runs_cells_in_plan_order_and_hands_each_finished_record_on(tmp_path: Path) -> None:
    executor, lines = local(tmp_path, config_text())
    a, b, c = expand(executor.config)
    done: list[dict[str, Any]] = []
    executor.preflight([c, a, b])
    executor.run([c, a, b], done.append)
    assert [cell for cell, state, _ in lines.seen if state == "starting"] == ["c", "a", "b"]
    assert [(r["id"], r["status"]) for r in done] == [("c", "ok"), ("a", "ok"), ("b", "ok")]
    assert done == [executor.store.read_cell(r["id"]) for r in done]


@pytest.mark.usefixtures("engine_processes")
def test_cells_that_would_start_after_the_run_budget_are_skipped(tmp_path: Path) -> None:
    text = config_text(a="[--sim-startup-seconds, '30']", timeouts="{startup: 60, stop_grace: 2, run: 1.5}")
    executor, _ = local(tmp_path, text)
    a, b, _ = expand(executor.config)
    done: list[dict[str, Any]] = []
    executor.run([a, b], done.append)
    first, second = executor.store.read_cell("a"), executor.store.read_cell("b")
    assert first and first["status"] == "error" and "over the cell budget of 1.4" in first["error"]["message"]
    assert second == CellRecord.model_validate(second).dump() and second["status"] == "skipped"  # type: ignore[arg-type]
    assert second["error"] == {"message": RUN_BUDGET_USED}  # type: ignore[index]
    assert [r["id"] for r in done] == ["a"]  # a skipped cell is not a finished one
