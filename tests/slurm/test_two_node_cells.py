"""Cells that span two nodes, on a real two-node Slurm (scripts/slurm-local.sh start --nodes 2).

The PD demo (configs/demo-pd.yaml) with each PD pair split over node1 and node2, and one engine's
two ranks across them, driven through `evalkit matrix` as a user would: each cell one job of two
nodes, each part an srun step on its node (run/slurm_nodes.py). Then a part killed on node2
mid-eval: its cell is an error naming it, the others go on, nothing is left on either node.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.config.loader import _UniqueKeyLoader
from tests.conftest import ROOT
from tests.slurm.conftest import Driver, evalkit, processes_on, squeue_names, wait_nothing_left

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("two_nodes")]

LIMIT = ("--limit", "30")
SPLIT = {"nodes": 2}
"""A PD pair over both nodes: prefill (and the router) on node 0, decode on node 1 (the default)."""
PACED = ["--sim-tokens-per-second", "2000"]
"""Every worker streams at a pace (asyncio sleeps between events) instead of as fast as it can,
which on a loaded 2-core box kept a decode worker's event loop from answering the router's 2 s
health checks: the router then answered 503 mid-eval."""
SLOW_DECODE = ["--sim-long-tokens-per-second", "100"]
"""Keeps a cell's long generations running for tens of seconds: long enough to kill a part mid-eval."""


def two_node_config(tmp_path: Path, disagg: dict[str, Any]) -> Path:
    """configs/demo-pd.yaml with `disagg` as its axis, small evals (8 GSM8K questions in flight: see
    PACED), paced workers, run as Slurm jobs
    (no GPUs, 1 CPU a node, 1 s polls). Judged on the collapse rate alone: the TP-mismatched
    handoff collapses 3 of its 4 long generations (a FAIL of `max 0.1` at n 4), where 30 GSM8K
    questions cannot tell its ~10-point drop from its twin's."""
    raw = yaml.load((ROOT / "configs" / "demo-pd.yaml").read_text(), Loader=_UniqueKeyLoader)
    raw["axes"] = {"disagg": disagg}
    raw["engine"]["args"] += PACED
    raw["evals"] = {"gsm8k": {**raw["evals"]["gsm8k"], "num_concurrent": 8},
                    "repetition": {"count": 4, "max_tokens": 1024, "concurrency": 4}}
    raw["thresholds"] = [{"metric": "repetition.collapse_rate", "max": 0.1}]
    raw["executor"] = {"kind": "slurm", "slurm": {"gpus": False, "cpus_per_task": 1, "poll_s": 1, "time_limit": "10"}}
    path = tmp_path / "two-nodes.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def matrix(config: Path, results: Path, run_id: str) -> list[str]:
    return ["matrix", "--config", str(config), "--results-dir", str(results), "--run-id", run_id, "--json", *LIMIT]


def cell_json(run: Path, cell_id: str) -> dict[str, Any]:
    return json.loads((run / cell_id / "cell.json").read_text())


def placed(run: Path, cell_id: str) -> dict[str, str]:
    """{part: the node it ran on} from cell.json."""
    return {p["part"]: p["node_name"] for p in cell_json(run, cell_id)["parts"]}


def responses(run: Path, cell_id: str) -> list[str]:
    lines = (run / cell_id / "gsm8k.samples.jsonl").read_text().splitlines()
    return [json.loads(line)["response"] for line in lines]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The PD demo's cells with each pair split over the two nodes, and an engine's two ranks."""
    tmp = tmp_path_factory.mktemp("two-nodes")
    raw = yaml.load((ROOT / "configs" / "demo-pd.yaml").read_text(), Loader=_UniqueKeyLoader)
    disagg = raw["axes"]["disagg"]
    for value in disagg.values():
        if isinstance(value["topology"], dict):
            value["topology"]["pd"] |= SPLIT
        elif value["topology"] != "off":
            value["topology"] = {"pd": SPLIT}  # a shorthand (1p1d): one prefill and one decode worker
    disagg["ranks2"] = {"topology": {"ranks": 2}}
    done = evalkit(*matrix(two_node_config(tmp, disagg), tmp / "results", "demo"), timeout=900)
    assert done.returncode == 1, done.stderr  # the TP-mismatched pair breaks the collapse threshold
    return json.loads(done.stdout), tmp / "results" / "demo"


def test_the_pd_demo_over_two_nodes_flags_exactly_the_pair_whose_prefill_tp_differs(demo_run: Any) -> None:
    summary, run = demo_run
    assert {c["id"]: c["status"] for c in summary["cells"]} == {
        "off": "ok", "1p1d": "ok", "1p1d_tp8tp4": "ok", "ranks2": "ok"}
    assert [c["id"] for c in summary["cells"] if c["flags"]] == ["1p1d_tp8tp4"]
    assert responses(run, "1p1d") == responses(run, "off")  # equal TPs: the split pair answers as one engine


def test_each_part_runs_on_its_node_and_cell_json_says_which(demo_run: Any) -> None:
    _, run = demo_run
    for cell_id in ("1p1d", "1p1d_tp8tp4"):
        assert placed(run, cell_id) == {"prefill0": "node1", "decode0": "node2", "router": "node1"}
        assert cell_json(run, cell_id)["slurm"]["node"] == "node[1-2]"  # one job, both nodes
    assert placed(run, "ranks2") == {"rank0": "node1", "rank1": "node2"}
    rank1 = next(p for p in cell_json(run, "ranks2")["parts"] if p["part"] == "rank1")
    assert rank1["start"][:5] == ["srun", "--nodes=1", "--ntasks=1", "--nodelist=node2", "--overlap"]
    assert "--master-addr 10.77.0.11 " in " ".join(rank1["argv"])  # the leader's address, resolved in the job


def test_every_part_is_asked_to_stop_through_slurm_and_ends_by_its_own_shutdown(demo_run: Any) -> None:
    """SIGTERM to a part's srun would SIGKILL its step ("srun: forcing job termination"): evalkit
    asks the step itself (`scancel --signal=TERM`), and each part, on either node, exits by itself."""
    _, run = demo_run
    for cell_id in ("1p1d", "1p1d_tp8tp4", "ranks2"):
        for part in cell_json(run, cell_id)["parts"]:
            log = (run / cell_id / f"{part['part']}.log").read_text()
            ending = log[log.rfind("\n[evalkit] engine pid "):]  # its last launch, once started
            assert "\n[evalkit] stopping: asked: scancel --signal=TERM " in ending, ending
            assert "forcing job termination" not in ending and "Killed" not in ending, ending
            if part["part"] in ("prefill0", "decode0", "rank0"):  # the simulator's server logs its shutdown
                assert "sim: SIGTERM: shutting down" in ending, ending


def test_nothing_is_left_on_either_node_after_the_run(demo_run: Any) -> None:
    assert not squeue_names("evalkit-demo-")
    assert wait_nothing_left() == {}


def test_a_part_killed_on_node2_mid_eval_is_its_cells_error_the_others_finish_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    driver = _split_mid_eval(tmp_path, results, "kill")
    decode = _wait_for(lambda: next((pid for pid, argv in (processes_on("node2") or {}).items()
                                     if "kv_consumer" in argv and "srun" not in argv), None),
                       "no decode worker on node2", driver)
    os.kill(decode, signal.SIGKILL)
    assert driver.wait(timeout=300) == 3, driver.log  # a cell failed to run
    run = results / "kill"
    error = cell_json(run, "split")["error"]
    assert error["message"].startswith("decode0: "), error
    assert "kv_consumer" in error["log_tail"]  # decode0's own log: its launch line, then how it ended
    assert cell_json(run, "off")["status"] == "ok"
    assert not squeue_names("evalkit-kill-")
    assert wait_nothing_left() == {}


def test_ctrl_c_mid_eval_of_a_two_node_cell_leaves_nothing_on_either_node(tmp_path: Path) -> None:
    results = tmp_path / "results"
    driver = _split_mid_eval(tmp_path, results, "stop")
    driver.process.send_signal(signal.SIGINT)
    assert driver.wait(timeout=120) == 130, driver.log
    assert json.loads((results / "stop" / "run.json").read_text())["status"] == "interrupted"
    assert json.loads((results / "stop" / "split" / "slurm.json").read_text())["cancelled"]
    assert not squeue_names("evalkit-stop-")
    assert wait_nothing_left() == {}


def _split_mid_eval(tmp_path: Path, results: Path, run_id: str) -> Driver:
    """`evalkit matrix` of an ordinary cell and a PD pair split over both nodes (its decode slow),
    once the pair's evals run."""
    config = two_node_config(tmp_path, {
        "off": {"topology": "off"},
        "split": {"topology": {"pd": {**SPLIT, "decode": {"args": SLOW_DECODE}}}},
    })
    driver = Driver(*matrix(config, results, run_id))
    out = _job_output(results / run_id / "split")
    _wait_for(lambda: re.search(r"\ssplit\s+(gsm8k|repetition)", out().read_text()) if out() else None,
              "the split cell's evals never started", driver)
    return driver


def _job_output(cell_dir: Path) -> Any:
    """A function giving the cell's slurm-<jobid>.out once it exists."""
    return lambda: next(iter(sorted(cell_dir.glob("slurm-*.out"))), None)


def _wait_for(found: Any, what: str, driver: Driver, timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline and driver.process.poll() is None, f"{what}:\n{driver.log}"
        time.sleep(0.3)
    return value
