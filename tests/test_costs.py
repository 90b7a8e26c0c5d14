"""What a cell cost (store/costs.py, run/costs.py): device-seconds, the devices it held x its wall
time, split into start-up, each eval and teardown, summing to the whole; the eval it waited on last."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evalkit.config import EngineSettings, load_config
from evalkit.config.cells import Cell, expand
from evalkit.history import History
from evalkit.render.costs import cost_line
from evalkit.run.costs import devices_held
from evalkit.run.parts import Begun, Ended, EvalRun, Phase, assemble
from evalkit.store import read_json
from evalkit.store.costs import BETWEEN, OTHER, Span, cell_cost
from evalkit.store.records import CellRecord
from evalkit.verdict.summary import RunSummary
from tests.conftest import CONFIGS
from tests.helpers.cli import evalkit_cli


def span(name: str, kind: str, start: float, end: float) -> Span:
    return Span(name=name, kind=kind, start_s=start, end_s=end)  # type: ignore[arg-type]


def test_evals_one_after_another_cost_their_own_spans_and_the_last_is_the_one_waited_on() -> None:
    cost = cell_cost(8, "tp 8", 100.0, [
        span("startup", "startup", 0, 40), span("evals", "evals", 40, 90),
        span("gsm8k", "eval", 40, 55), span("repetition", "eval", 55, 89), span("teardown", "teardown", 90, 98)])
    assert cost.phases == {"startup": 320.0, "gsm8k": 120.0, "repetition": 272.0, BETWEEN: 8.0,
                           "teardown": 64.0, OTHER: 16.0}
    assert cost.device_s == 800.0 == sum(cost.phases.values())
    assert cost.waited_on == "repetition" and math.isclose(cost.gpu_hours, 800 / 3600)


def test_evals_in_one_wave_share_each_moment_so_the_parts_still_sum_to_devices_x_wall() -> None:
    # gsm8k and consistency end while repetition runs on: the cell waited on repetition
    cost = cell_cost(2, "tp 2", 60.0, [
        span("startup", "startup", 0, 10), span("evals", "evals", 10, 50), span("repetition", "eval", 10, 50),
        span("gsm8k", "eval", 10, 30), span("consistency", "eval", 10, 20), span("teardown", "teardown", 50, 60)])
    # 10-20: three evals share 2 devices; 20-30: two; 30-50: repetition alone
    assert cost.phases["consistency"] == pytest.approx(2 * 10 / 3, abs=1e-3)
    assert cost.phases["gsm8k"] == pytest.approx(2 * (10 / 3 + 10 / 2), abs=1e-3)
    assert cost.phases["repetition"] == pytest.approx(2 * (10 / 3 + 10 / 2 + 20), abs=1e-3)
    assert sum(cost.phases.values()) == pytest.approx(cost.device_s, abs=1e-2) and cost.device_s == 120.0
    assert cost.waited_on == "repetition" and BETWEEN not in cost.phases


def test_a_cell_whose_engine_never_served_costs_its_start_up_and_teardown_and_waited_on_no_eval() -> None:
    cost = cell_cost(8, "tp 8", 30.0, [span("startup", "startup", 0.5, 25), span("teardown", "teardown", 25, 29)])
    assert cost.phases == {"startup": 196.0, "teardown": 32.0, OTHER: 12.0} and cost.waited_on is None


def test_the_devices_held_are_those_given_else_what_the_cell_declares() -> None:
    def cell(**settings: object) -> Cell:
        return Cell("c", {}, EngineSettings(**settings), (), {}, None)  # type: ignore[arg-type]

    assert devices_held(cell(tensor_parallel=8, dp_attention=True), None) == (8, "tensor_parallel 8 x data_parallel 1")
    assert devices_held(cell(tensor_parallel=2, data_parallel=2), None)[0] == 4
    assert devices_held(cell(tensor_parallel=8, devices=4), None) == (4, "its settings' devices")
    assert devices_held(cell(tensor_parallel=8), (0, 1)) == (2, "the devices the executor gave it")
    assert devices_held(cell(), None)[0] == 1
    pd = {c.id: c for c in expand(load_config(CONFIGS / "demo-pd.yaml"))}  # prefill TP8 + decode TP4 + a router
    assert devices_held(pd["1p1d_tp8tp4"], None) == (12, "its 3 parts' devices")


def test_assemble_measures_the_phases_from_the_cells_own_clock() -> None:
    begun = Begun(started_at="t0", source=None, devices=None, clock=1000.0, held=(8, "tp 8"))
    parts = [Phase("startup", "startup", 1000.5, 1010.0), Phase("evals", "evals", 1010.0, 1020.0),
             Phase("gsm8k", "eval", 1010.0, 1019.0), EvalRun("gsm8k", {"n": 5}, 9.0),
             Phase("teardown", "teardown", 1020.0, 1021.0)]
    record = assemble(Cell("c", {}, EngineSettings(), (), {}, None), begun, parts, Ended("ok", 22.0, "t1"))
    assert record.cost is not None and record.cost.devices == 8 and record.cost.wall_s == 22.0
    assert [s.name for s in record.cost.spans] == ["startup", "evals", "gsm8k", "teardown"]
    assert record.cost.spans[0].start_s == 0.5 and record.cost.phases["gsm8k"] == 72.0
    assert record.dump()["cost"]["device_s"] == 176.0
    assert "cost" not in assemble(Cell("c", {}, EngineSettings(), (), {}, None), Begun("t0", None, None), parts,
                                  Ended("ok", 22.0, "t1")).dump()  # no clock: nothing measured


def test_the_simulator_paces_long_generations_at_their_own_speed_else_at_every_requests() -> None:
    """What benchmarks/nightly_cost.py paces a night with: short answers at one decode speed, long
    generations (max_tokens >= 512, a context that slows each step) at another."""
    from evalkit.sim.__main__ import configure

    paced, _, _ = configure(["--model", "m", "--sim-tokens-per-second", "1000", "--sim-long-tokens-per-second", "50"])
    assert (paced.timing.rate(long=False), paced.timing.rate(long=True)) == (1000, 50)
    one, _, _ = configure(["--model", "m", "--sim-tokens-per-second", "1000"])
    assert one.timing.rate(long=True) == 1000 and configure(["--model", "m"])[0].timing.rate(long=True) == 0


def test_a_real_demo_run_records_each_cells_cost_summed_right_and_every_report_shows_it(
        demo_runs: dict[str, Path]) -> None:
    """The session's demo run (its cells' engines real processes, --limit 40, its evals in one
    wave): each cell's device-seconds are its 8 devices (TP8) x its wall, split into start-up,
    each eval and teardown, adding up; each eval's span is its time, the evals' share of the
    devices is the evals' span; the eval waited on last is the last to end; the history keeps
    them; the report says the verdict's cost in a line and each cell's in a column."""
    run = demo_runs["a"]
    enabled = {ev.name for ev, _ in load_config(CONFIGS / "demo.yaml").evals.enabled()}
    waited = []
    for cell_id in read_json(run / "run.json")["cells"]:
        record = CellRecord.load(run / cell_id / "cell.json")
        cost = record.cost
        assert cost is not None and cost.devices == 8 and cost.wall_s == record.timings["total_s"]
        assert cost.device_s == pytest.approx(8 * cost.wall_s, abs=0.01)
        assert sum(cost.phases.values()) == pytest.approx(cost.device_s, abs=0.05)
        evals = {s.name: s for s in cost.spans if s.kind == "eval"}
        assert set(evals) == enabled and cost.waited_on == max(evals.values(), key=lambda s: s.end_s).name
        for name, span in evals.items():
            assert span.wall_s == pytest.approx(record.timings[f"{name}_s"], abs=0.01)
        (body,) = [s for s in cost.spans if s.kind == "evals"]
        shared = sum(cost.phases.get(name, 0.0) for name in [*evals, BETWEEN])
        assert shared == pytest.approx(8 * body.wall_s, abs=0.05)
        assert cost.phases["startup"] >= 8 * record.timings["engine_ready_s"] > 0 and cost.phases["teardown"] > 0
        waited.append(cost.waited_on)
    with History(demo_runs["results"] / "history.db") as history:
        kept = dict(history.db.execute("SELECT cell_id, cost FROM cells WHERE run_id = 'run-a'").fetchall())
    assert json.loads(kept["tp8-full-fixon"]) == read_json(run / "tp8-full-fixon" / "cell.json")["cost"]
    summary = RunSummary.load(run / "summary.json")
    line = cost_line(summary)
    hours = sum(c.cost.device_s for c in summary.cells if c.cost) / 3600
    assert line is not None and line.startswith(f"cost: {hours:.1f} GPU-hours for this verdict (4 cells x 8 devices): ")
    said = line.split("; waited on ")[1]  # the eval most cells waited on last, and how many when not all
    name = said.split(" in ")[0]
    assert waited.count(name) == max(map(waited.count, waited))
    assert said == name if waited.count(name) == 4 else said == f"{name} in {waited.count(name)} of 4 cells"
    terminal = evalkit_cli("report", "run-a", "--results-dir", str(demo_runs["results"]), env={"COLUMNS": "80"}).stdout
    assert line.split(":")[0] + ":" in terminal and "GPU-hours for this verdict" in terminal
    markdown = evalkit_cli("report", "run-a", "--format", "markdown", "--results-dir", str(demo_runs["results"])).stdout
    assert f"\n{line}\n" in markdown and "| GPU-h |" in markdown


def test_a_body_that_timed_no_eval_of_its_own_is_one_evals_phase() -> None:
    """A bisect step runs its batches through the cell's lifecycle without an eval's span."""
    cost = cell_cost(8, "tp 8", 20.0, [span("startup", "startup", 0, 5), span("evals", "evals", 5, 18),
                                       span("teardown", "teardown", 18, 19)])
    assert cost.phases == {"startup": 40.0, "evals": 104.0, "teardown": 8.0, OTHER: 8.0} and cost.waited_on is None
