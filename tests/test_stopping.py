"""A cell's long generations stopped once their verdict is decided (run/stopping.py), in this process.

The generations are submitted in a seeded order and judged in that order, whatever order they
finish in; a healthy cell is never stopped (seeded simulations of many cells); a broken one stops
early and FAILs the same collapse checks as when it runs in full, each cell on a simulator a
thread of this process serves (tests/helpers/served.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from evalkit.config import load_config
from evalkit.config.cells import expand
from evalkit.evals import evalset
from evalkit.evals.cancel import Stop
from evalkit.evals.http_client import Bounded
from evalkit.evals.prompts import load_prompt_set
from evalkit.evals.repetition import submission_order
from evalkit.run.cell import CellControl, CellJob, run_cell
from evalkit.run.options import Silent
from evalkit.run.stopping import CountStop, Limit, Rise
from evalkit.store import RunStore, read_json, read_jsonl
from evalkit.verdict.deltas import summarize
from tests.helpers.served import served_sim
from tests.helpers.sim import FIX_AB

LAYOUT = ("--enable-dp-attention", "-tp", "8", "--cudagraph-mode", "PIECEWISE", "--sim-seed", "0")
GENERATIONS = 20
CONFIG = f"""
model: sim/stopping
served_name: sim-model
engine: {{profile: sim}}
{FIX_AB}
evals:
  gsm8k: {{enabled: false}}
  repetition: {{count: {GENERATIONS}, max_tokens: 768, concurrency: 4}}
thresholds:
  - {{metric: repetition.collapse_rate, max_rise_ab: 0.05, alpha: 0.01, detects: 0.2}}
  - {{metric: repetition.collapse_rate, max: 0.15}}
"""
COLLAPSE_RULES = ("repetition.collapse_rate max_rise_ab 0.05 alpha 0.01 detects 0.2", "repetition.collapse_rate max 0.15")


def test_the_prompts_go_out_in_a_seeded_order_the_same_every_time() -> None:
    prompts = load_prompt_set("long_generation_v1").prompts[:64]
    first, again, other = (submission_order(prompts, seed) for seed in (0, 0, 1))
    assert [p.id for p in first] == [p.id for p in again] != [p.id for p in other]
    assert sorted(p.id for p in first) == sorted(p.id for p in prompts) and first != list(prompts)


def test_samples_are_judged_in_submission_order_never_in_completion_order() -> None:
    """The later an item is submitted the sooner it finishes (as a healthy generation ends
    before a collapsed one runs to its limit): every look sees a prefix of the submission order,
    and the stop comes at the first prefix that decides."""
    seen: list[list[int]] = []

    async def work(item: int) -> int:
        await asyncio.sleep(0.002 * (20 - item))
        return item

    def stop_when(prefix: list[int]) -> str | None:
        seen.append(list(prefix))
        return "decided" if len(prefix) >= 12 else None

    done, why = asyncio.run(Bounded(work, 20, 20, None).judged(list(range(20)), stop_when))
    assert why == "decided" and done == list(range(len(done))) and len(done) >= 12
    assert all(look == list(range(len(look))) for look in seen)
    whole, none = asyncio.run(Bounded(work, 4, 20, None).judged(list(range(20)), lambda prefix: None))
    assert whole == list(range(20)) and none is None


def _demo_rule(reference: dict[str, bool]) -> CountStop:
    """The demo's two collapse checks on a fix-off cell of 12, as the rule builds them."""
    return CountStop("collapsed", (Rise(0.05, 0.01, reference), Limit(0.15, 0.05)), cells=12, stop_alpha=0.001)


@pytest.mark.parametrize("rate", [0.0, 0.01, 0.05, 0.15])
def test_a_healthy_cell_is_never_stopped(rate: float) -> None:
    """150 seeded cells of 64 generations each collapsing at `rate` (0.15: the highest the
    demo's `max` passes), their twin healthy (1 in 64), judged after every generation: none is
    stopped (the anytime-valid bound allows 0.1%)."""
    rng = np.random.default_rng(int(rate * 1000))
    ids = [f"p{i}" for i in range(64)]
    stopped = 0
    for _ in range(150):
        twin = dict(zip(ids, rng.random(64) < 1 / 64))
        rule = _demo_rule(twin)
        rows = [{"id": i, "collapsed": bool(c)} for i, c in zip(ids, rng.random(64) < rate)]
        stopped += any(rule(rows[:n]) for n in range(1, 65))
    assert stopped == 0


def test_a_plainly_broken_cell_is_stopped_after_a_few() -> None:
    ids = [f"p{i}" for i in range(64)]
    rule = _demo_rule(dict.fromkeys(ids, False))
    rows = [{"id": i, "collapsed": n % 10 != 0} for n, i in enumerate(ids)]  # 90% collapse
    first = next(n for n in range(1, 65) if rule(rows[:n]))
    assert first <= 16
    assert rule(rows[:first]).startswith(f"{sum(r['collapsed'] for r in rows[:first])} of {first} judged collapsed")


def _matrix(root: Path, name: str, stop_early: bool, collapse_rate: str) -> dict:
    (root / f"{name}.yaml").write_text(CONFIG + f"run: {{stop_early: {str(stop_early).lower()}}}\n")
    config = load_config(root / f"{name}.yaml")
    store = RunStore(root / "results", name)
    store.create()
    evalset.prepare(config.evals.enabled(), store.path)
    with served_sim(*LAYOUT, "--sim-fix", "on") as fixed, \
            served_sim(*LAYOUT, "--sim-fix", "off", "--sim-collapse-rate", collapse_rate) as buggy:
        for cell in expand(config):  # the twin first, as the demo's plan runs it
            url = fixed if cell.id == "fixon" else buggy
            assert run_cell(CellJob(config, cell, store, Silent(), base_url=url), CellControl(Stop())).status == "ok"
    store.write_run({"run_id": name, "status": "complete", "model": config.model, "engine": "sim", "simulated": True,
                     "config_path": str(root / f"{name}.yaml"), "config": config.model_dump(mode="json"),
                     "cells": [cell.id for cell in expand(config)], "limit": None})
    return summarize(store.path, config) | {"path": store.path}


def test_a_broken_cell_stops_early_and_fails_the_same_checks(tmp_path: Path) -> None:
    stopped, full = (_matrix(tmp_path, name, early, "0.9") for name, early in (("early", True), ("full", False)))
    outcomes = [{(c["id"], k["rule"]): k["outcome"] for c in run["cells"] for k in c["checks"]} for run in (stopped, full)]
    assert outcomes[0] == outcomes[1]
    assert {outcomes[0][("fixoff", rule)] for rule in COLLAPSE_RULES} == {"FAIL"}
    record = read_json(stopped["path"] / "fixoff" / "cell.json")["metrics"]["repetition"]
    assert record["stopped"]["of"] == GENERATIONS and record["n"] == record["stopped"]["at"] < GENERATIONS
    assert len(list(read_jsonl(stopped["path"] / "fixoff" / "repetition.samples.jsonl"))) == record["n"]
    healthy = read_json(stopped["path"] / "fixon" / "cell.json")["metrics"]["repetition"]
    assert "stopped" not in healthy and healthy["n"] == GENERATIONS
    flag = next(f for c in stopped["cells"] if c["id"] == "fixoff" for f in c["flags"] if f["check"] == "stopped")
    assert flag["message"].startswith(f"fixoff: long generations stopped at {record['n']} of {GENERATIONS}: ")
    assert "stopped" not in read_json(full["path"] / "fixoff" / "cell.json")["metrics"]["repetition"]


def test_a_cell_whose_checks_cannot_all_be_certified_runs_in_full(tmp_path: Path) -> None:
    """A `min` on the collapse rate (a floor no prefix can show FAILing early) leaves even a
    plainly broken cell to run every generation."""
    global CONFIG
    kept = CONFIG
    CONFIG = kept + "  - {metric: repetition.collapse_rate, min: 0.0}\n"
    try:
        run = _matrix(tmp_path, "floor", True, "0.9")
    finally:
        CONFIG = kept
    record = read_json(run["path"] / "fixoff" / "cell.json")["metrics"]["repetition"]
    assert "stopped" not in record and record["n"] == GENERATIONS


def test_a_rule_is_data_not_a_process() -> None:
    rule = _demo_rule({})
    assert dataclasses.replace(rule, stop_alpha=0.01).healthy == 1.0  # no reference rows: nothing to rule out
