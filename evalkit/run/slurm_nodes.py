"""A multi-node cell inside its Slurm allocation: which node each topology index is, the address
its parts bind, and `srun` to start each part there (engine/placement.py's Slurm placement).

The driver submits a cell whose topology spans N nodes as one `sbatch --nodes=N` job
(run/slurm_commands.py); its batch step, `evalkit cell`, runs on the allocation's first node and
starts every part itself, each as one job step pinned to one node:

    srun --nodes=1 --ntasks=1 --nodelist=NODE --overlap --job-name=PART -- ARGV...

- The allocation is read where it exists, inside the job: `scontrol show hostnames
  $SLURM_JOB_NODELIST` gives the nodes in Slurm's order (index 0 is the batch step's node, so
  the leader, rank 0 and the router, run beside evalkit), and each name is resolved to an address
  there, as `getent hosts` would (the login node may not resolve compute nodes at all).
- `--overlap`: the parts of one node share its CPUs (a router beside a worker) instead of the
  second step waiting for the first to end. `--nodes=1 --ntasks=1`: one process per part, never
  spread. The part's environment reaches it through srun's default `--export=ALL`.
- srun stays a child of evalkit for the part's whole life: its output is the part's log, its exit
  is the part's exit (`srun: error: node2: task 0: Exited with exit code 5` included); and when
  `evalkit cell` ends, Slurm ends the job and every step on every node with it, so nothing
  outlives the cell even if evalkit is killed hard.
- A part is stopped as any engine is, SIGTERM then a grace period, but the SIGTERM goes to its
  step through Slurm (`ask_step_to_stop`), never to its srun: srun turns a SIGTERM into a
  SIGKILL of its step ("srun: forcing job termination"), so the engine would get no shutdown.
  Only past the grace period is srun signalled, to force it.
"""

from __future__ import annotations

import functools
import socket
import subprocess
from collections.abc import Mapping, Sequence

from evalkit.engine.placement import Node, Placement, local_placement
from evalkit.errors import ConfigError, EngineError

SCONTROL_TIMEOUT_S = 30.0


def placement_for(nodes: int, host: str, env: Mapping[str, str]) -> Placement:
    """Where a cell whose topology spans `nodes` nodes runs its parts.

    One node, or outside a Slurm job: this machine (every part on `host`, the config's
    engine.host). Inside a Slurm job: one node of the allocation per index, through srun; an
    allocation with fewer nodes than the topology asks is bad input (the job was submitted by hand
    or with other resources).
    """
    if nodes <= 1 or not env.get("SLURM_JOB_ID"):
        return local_placement(host, nodes)
    names = allocation_hostnames(env)
    if len(names) < nodes:
        raise ConfigError(f"the cell's topology spans {nodes} nodes; Slurm job {env['SLURM_JOB_ID']} has "
                          f"{len(names)} ({', '.join(names)}): submit it with --nodes={nodes}")
    return Placement(tuple(Node(name, node_address(name)) for name in names[:nodes]), srun_argv, "slurm",
                     functools.partial(ask_step_to_stop, job_id=env["SLURM_JOB_ID"]))


def allocation_hostnames(env: Mapping[str, str]) -> list[str]:
    """The job's nodes in Slurm's order, from `scontrol show hostnames` of its node list."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise EngineError(f"Slurm job {env.get('SLURM_JOB_ID')} has no SLURM_JOB_NODELIST: not inside an allocation")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             check=False, stdin=subprocess.DEVNULL, timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineError(f"scontrol show hostnames {nodelist}: {e}") from e
    names = out.stdout.split()
    if out.returncode != 0 or not names:
        raise EngineError(f"scontrol show hostnames {nodelist}: {out.stderr.strip() or 'no nodes'}")
    return names


def node_address(name: str) -> str:
    """`name`'s IPv4 address as this node resolves it (`getent hosts NAME`: /etc/hosts, then DNS)."""
    try:
        return str(socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
    except (OSError, IndexError) as e:
        raise EngineError(f"node {name} of the allocation does not resolve here: {e}") from e


def srun_argv(part: str, node: Node, argv: Sequence[str]) -> list[str]:
    """The job step that runs one part on `node` (module docstring: why each flag)."""
    return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node.name}", "--overlap", f"--job-name={part}",
            "--", *argv]


def ask_step_to_stop(part: str, job_id: str) -> str:
    """SIGTERM to the task of job `job_id`'s step named `part` (srun's `--job-name`), through
    Slurm: `scancel --signal=TERM JOB.STEP` signals a step's tasks and ends nothing (scancel(1),
    slurm-client 22.05.8: "the signal is sent directly to the slurmd where the job is running").

    What it did, for the part's log. scancel's exit status does not tell whether the signal
    arrived: on slurm-local.sh's two nodes, the part on node2 got its SIGTERM and exited 0 within
    a second while scancel exited 225 ("Kill job error on job step id N: Invalid job id
    specified"); the grace period that follows (EngineProcess.stop) judges it. Raises EngineError
    where no step of that name is listed (srun has not registered it yet): SIGTERM then goes to srun.
    """
    try:
        listed = subprocess.run(["squeue", "--steps", f"--jobs={job_id}", "--noheader", "--format=%i %j"],
                                capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
                                timeout=SCONTROL_TIMEOUT_S)
        steps = [fields[0] for fields in map(str.split, listed.stdout.splitlines()) if fields[1:] == [part]]
        if not steps:
            raise EngineError(f"squeue lists no step named {part} in job {job_id}: {listed.stderr.strip() or 'none'}")
        sent = subprocess.run(["scancel", "--signal=TERM", *steps], capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL, timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineError(f"asking step {part} of job {job_id} to stop: {e}") from e
    said = sent.stderr.strip().splitlines()
    return f"scancel --signal=TERM {' '.join(steps)}" + (f" (exit {sent.returncode}: {said[-1]})" if sent.returncode else "")
