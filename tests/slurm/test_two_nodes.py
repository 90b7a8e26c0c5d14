"""A real two-node Slurm on this machine (scripts/slurm-local.sh start --nodes 2): each node is its
own host to a job, and the Slurm placement (run/slurm_nodes.py) starts a part on the node it names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.slurm.conftest import processes_on, wait_nothing_left

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("two_nodes")]

PLACE_PARTS = """
import json, os, subprocess, sys
from evalkit.run.slurm_nodes import placement_for
placement = placement_for(2, "127.0.0.1", os.environ)
probe = [sys.executable, "-c", "import os, socket; print(socket.gethostname(), os.popen('hostname -I').read().split()[0])"]
seen = [subprocess.run(placement.argv(f"part{i}", i, probe), capture_output=True, text=True, check=True).stdout.split()
        for i in (0, 1)]
print(json.dumps({"nodes": [[n.name, n.address] for n in placement.nodes], "kind": placement.kind, "seen": seen,
                  "batch_host": os.uname().nodename}))
"""


def sbatch(*args: str) -> str:
    """Submit a job that imports this checkout's evalkit (PYTHONPATH: a script outside it runs)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    out = subprocess.run(["sbatch", "--parsable", f"--chdir={ROOT}", *args], capture_output=True, text=True,
                         check=True, timeout=60, env=env)
    return out.stdout.strip().split(";")[0]


def wait_state(job_id: str, wanted: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"], capture_output=True,
                             text=True, check=False, timeout=30)
        state = out.stdout.strip()
        if state in wanted:
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {state or 'unknown'} after {timeout} s, not {sorted(wanted)}")


def test_each_part_runs_on_the_node_its_index_names_and_sees_that_nodes_own_host_and_address(tmp_path: Path) -> None:
    script = tmp_path / "place.py"
    script.write_text(PLACE_PARTS)
    out = tmp_path / "job.out"
    job_id = sbatch("--nodes=2", f"--output={out}", "--wrap", f"{sys.executable} {script}")
    wait_state(job_id, {"COMPLETED", "FAILED"})
    found = json.loads(out.read_text().splitlines()[-1])
    assert found["kind"] == "slurm" and found["batch_host"] == "node1"
    assert found["nodes"] == [["node1", "10.77.0.11"], ["node2", "10.77.0.12"]]  # resolved inside the job
    assert found["seen"] == found["nodes"]  # the part on node 1 ran on node2, with node2's own address


def test_scancel_ends_the_parts_on_both_nodes(tmp_path: Path) -> None:
    script = tmp_path / "parts.sh"  # a part per node, each leaving a child behind it
    script.write_text("#!/bin/sh\n"
                      "srun --nodes=1 --ntasks=1 --nodelist=node1 --overlap sh -c 'sleep 300 & sleep 301' &\n"
                      "srun --nodes=1 --ntasks=1 --nodelist=node2 --overlap sh -c 'sleep 302 & sleep 303' &\n"
                      "wait\n")
    job_id = sbatch("--nodes=2", f"--output={tmp_path / 'job.out'}", str(script))
    wait_state(job_id, {"RUNNING"})
    deadline = time.monotonic() + 30
    while not all(any("sleep 30" in p for p in (processes_on(node) or {}).values()) for node in ("node1", "node2")):
        assert time.monotonic() < deadline, "the parts never started on both nodes"
        time.sleep(0.3)
    subprocess.run(["scancel", job_id], check=True, timeout=30)
    assert wait_nothing_left() == {}



def test_an_allocation_with_fewer_nodes_than_the_topology_is_named_as_such(tmp_path: Path) -> None:
    script = tmp_path / "short.py"
    script.write_text("import os\nfrom evalkit.errors import ConfigError\nfrom evalkit.run.slurm_nodes import placement_for\n"
                      "try:\n    placement_for(2, '127.0.0.1', os.environ)\nexcept ConfigError as e:\n    print(e)\n")
    out = tmp_path / "job.out"
    job_id = sbatch("--nodes=1", f"--output={out}", "--wrap", f"{sys.executable} {script}")
    wait_state(job_id, {"COMPLETED", "FAILED"})
    assert re.fullmatch(rf"the cell's topology spans 2 nodes; Slurm job {job_id} has 1 \(node[12]\): "
                        r"submit it with --nodes=2", out.read_text().strip())
