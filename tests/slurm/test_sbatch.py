"""What a cell's Slurm job is: its sbatch argv, its script, and how Slurm's answers are read.

No Slurm needed: these run in the default suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evalkit.config import load_config
from evalkit.config.cells import Cell, expand
from evalkit.run.slurm_commands import cell_command, job_script, parse_sacct, parse_scontrol, parse_squeue, sbatch_argv
from evalkit.store import RunStore
from tests.slurm.conftest import demo_config

SCONTROL_LINE = (  # `scontrol show job -o 2` from Slurm 22.05 (scripts/slurm-local.sh), shortened
    "JobId=2 JobName=probe-a UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 "
    "Account=(null) QOS=(null) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) Requeue=0 Restarts=0 "
    "ExitCode=143:0 RunTime=00:01:13 TimeLimit=00:01:00 StartTime=2026-12-03T12:16:48 AllocNode:Sid=localhost:24136 "
    "NodeList=vm BatchHost=vm CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 "
    "Comment=two words Command=/tmp/probe/j.sh StdOut=/tmp/probe/a-2.out Power="
)


def cell(config_path: Path, cell_id: str) -> Cell:
    return next(c for c in expand(load_config(config_path)) if c.id == cell_id)


def test_sbatch_asks_for_the_cells_devices_as_gpus_and_the_configs_placement(tmp_path: Path) -> None:
    path = demo_config(tmp_path, gpus="true", partition="gpu", account="ml", qos="high", constraint="mi300",
                       mem="64G", cpus_per_task="16", time_limit='"02:00:00"', extra_args='["--exclusive"]')
    script = tmp_path / "run" / "tp8-full-fixon" / "slurm-job.sh"
    argv = sbatch_argv(load_config(path), cell(path, "tp8-full-fixon"), "run", script.parent, script)
    assert argv[:2] == ["sbatch", "--parsable"]
    assert argv[-2:] == ["--exclusive", str(script)]  # extra options last, so they can override
    assert {"--job-name=evalkit-run-tp8-full-fixon", f"--output={script.parent.resolve()}/slurm-%j.out",
            "--gpus=8", "--nodes=1", "--partition=gpu", "--account=ml", "--qos=high", "--constraint=mi300",
            "--mem=64G", "--cpus-per-task=16", "--time=02:00:00", "--no-requeue", "--export=ALL"} <= set(argv)


def test_sbatch_asks_for_no_gpus_when_the_cluster_has_none(tmp_path: Path) -> None:
    path = demo_config(tmp_path)  # slurm.gpus: false
    argv = sbatch_argv(load_config(path), cell(path, "dp8-full-fixon"), "run", tmp_path, tmp_path / "s.sh")
    assert not [a for a in argv if a.startswith("--gpus")]
    assert not [a for a in argv if a.startswith(("--partition", "--account", "--qos", "--mem"))]  # unset: Slurm's


def test_a_percent_in_the_results_path_is_not_a_slurm_filename_pattern(tmp_path: Path) -> None:
    path = demo_config(tmp_path)
    cell_dir = tmp_path / "100%" / "c"
    argv = sbatch_argv(load_config(path), cell(path, "dp8-full-fixon"), "run", cell_dir, cell_dir / "s.sh")
    assert f"--output={tmp_path}/100%%/c/slurm-%j.out" in argv


def test_the_job_runs_evalkit_cell_with_this_interpreter_and_absolute_paths(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    argv = cell_command(RunStore(Path("results"), "r1"), "dp8-full-fixon", Path(".cache"))
    assert argv == [sys.executable, "-m", "evalkit.cli", "cell", "--run", "r1", "--cell", "dp8-full-fixon",
                    "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / ".cache")]


def test_the_job_script_execs_its_argv_word_for_word(tmp_path: Path) -> None:
    tricky = ["a b", "it's", "$HOME", "`id`", "x;rm -rf /", "*", "", "new\nline"]
    script = tmp_path / "job.sh"
    script.write_text(job_script([sys.executable, "-c", "import sys; print(repr(sys.argv[1:]))", *tricky]))
    out = subprocess.run(["/bin/sh", str(script)], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == repr(tricky)
    assert script.read_text().startswith("#!/bin/sh\n")


def test_scontrol_fields_keep_values_with_equals_signs_and_spaces() -> None:
    fields = parse_scontrol(SCONTROL_LINE)
    assert fields["JobState"] == "TIMEOUT" and fields["Reason"] == "TimeLimit" and fields["ExitCode"] == "143:0"
    assert fields["TRES"] == "cpu=1,node=1,billing=1"
    assert fields["AllocNode:Sid"] == "localhost:24136" and fields["CPUs/Task"] == "1"
    assert fields["Comment"] == "two words" and fields["Power"] == ""


def test_squeue_lines_become_states_by_job_id() -> None:
    found = parse_squeue("41|RUNNING|vm|None|evalkit-r-a\n42|PENDING||Resources|evalkit-r-b|x\n")
    assert found["41"].state == "RUNNING" and found["41"].node == "vm"
    assert found["42"].reason == "Resources" and found["42"].name == "evalkit-r-b|x"


def test_sacct_rows_are_read_by_their_header() -> None:
    rows = parse_sacct("JobID|State|ExitCode\n7|TIMEOUT|0:15\n7.batch|CANCELLED|0:15\n")
    assert rows == [{"JobID": "7", "State": "TIMEOUT", "ExitCode": "0:15"},
                    {"JobID": "7.batch", "State": "CANCELLED", "ExitCode": "0:15"}]


def test_a_cell_across_two_nodes_is_one_job_of_two_nodes_with_its_busiest_nodes_devices_on_each(tmp_path: Path) -> None:
    path = demo_config(tmp_path, gpus="true")
    text = path.read_text().replace("  profile: sim\n", "  profile: sim\n  topology: {pd: {nodes: 2, decode: {settings: {tensor_parallel: 4}}}}\n")
    path.write_text(text)
    config = load_config(path)
    argv = sbatch_argv(config, cell(path, "tp8-full-fixon"), "run", tmp_path, tmp_path / "s.sh")
    assert "--nodes=2" in argv
    assert "--gpus-per-node=8" in argv  # prefill TP 8 on node 0, decode TP 4 on node 1: each node gets the most
    assert not [a for a in argv if a.startswith("--gpus=")]
