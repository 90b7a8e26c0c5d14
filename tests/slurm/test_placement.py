"""Where a multi-node cell's parts run: this machine outside Slurm, one srun step per part inside an
allocation (engine/placement.py, run/slurm_nodes.py). No Slurm needed: these run in the default
suite; the placement inside a real two-node allocation is tests/slurm/test_two_nodes.py's.
"""

from __future__ import annotations

import socket
import sys

import pytest

from evalkit.engine.placement import local_placement
from evalkit.errors import EngineError
from evalkit.run.slurm_nodes import placement_for, srun_argv

ARGV = [sys.executable, "-m", "evalkit.sim", "--host", "a b", "--kv-transfer-config", '{"kv_role": "kv_consumer"}']


def test_outside_a_slurm_job_every_node_is_this_machine_on_the_configs_host() -> None:
    placement = placement_for(2, "127.0.0.1", {})
    assert placement.kind == "local"
    assert [placement.host(i) for i in (0, 1)] == ["127.0.0.1", "127.0.0.1"]
    assert placement.node(1).name == socket.gethostname()
    assert placement.argv("decode0", 1, ARGV) == ARGV  # started as it is, a child of evalkit


def test_a_one_node_cell_inside_a_slurm_job_starts_as_it_always_did() -> None:
    placement = placement_for(1, "127.0.0.1", {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]"})
    assert placement.kind == "local" and placement.argv("engine", 0, ARGV) == ARGV


def test_a_part_on_a_slurm_node_is_one_task_pinned_to_that_node_its_argv_word_for_word() -> None:
    placement = local_placement("10.0.0.5", 2)
    argv = srun_argv("decode0", placement.node(1), ARGV)
    head, tail = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    assert head[0] == "srun"
    assert {"--nodes=1", "--ntasks=1", f"--nodelist={socket.gethostname()}", "--overlap", "--job-name=decode0"} == set(head[1:])
    assert tail == ARGV


def test_a_node_the_placement_does_not_have_is_named() -> None:
    with pytest.raises(ValueError, match=r"^node 2 is not one of the 2 node\(s\) of this placement$"):
        local_placement("127.0.0.1", 2).host(2)


def test_a_slurm_job_whose_node_list_cannot_be_read_is_the_cells_engine_error() -> None:
    with pytest.raises(EngineError, match=r"^Slurm job 7 has no SLURM_JOB_NODELIST: not inside an allocation$"):
        placement_for(2, "127.0.0.1", {"SLURM_JOB_ID": "7"})
