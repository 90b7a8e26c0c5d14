"""Helpers for the Slurm executor tests: the demo config as a Slurm run, evalkit as a process, squeue.

The tests marked `slurm` need a real Slurm: `bash scripts/slurm-local.sh start` runs one on this
machine, and its slurm.conf is found at $EVALKIT_SLURM_DIR (default /tmp/evalkit-slurm) unless
SLURM_CONF is set. Without a cluster they skip, unless EVALKIT_SLURM_REQUIRED=1 (CI) makes that
a failure.

The two-node tests (`two_nodes`) need `bash scripts/slurm-local.sh start --nodes 2`: nodes node1
and node2, each its own network, hostname and PID namespace; what is left on a node is every
process in its PID namespace but its init and slurmd (`processes_on`; by hand: `slurm-local.sh ps NODE`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, demo_without_consistency

SUBSET = ("--only", "graph=full", "--only", "parallel=dp8,graph=piecewise", "--limit", "30")
"""Six demo cells: the baseline, the buggy cell (dp8-piecewise-fixoff) and its twin, 30 questions."""
EXTRA_THRESHOLD = "  - {metric: repetition.collapse_rate, max: 0.1}\n"
"""Breaks on the buggy cell (1 of 4 prompts collapse), so both executors must agree on a flag."""


def demo_config(tmp_path: Path, *, sim_args: tuple[str, ...] = (), **slurm: str) -> Path:
    """configs/demo.yaml (without the consistency eval) as a Slurm run: 4 repetition prompts, no GPUs, 1 CPU per job, 1 s polls.

    `slurm` overrides executor.slurm settings, each value written as YAML (`time_limit='"1"'`).
    """
    text = demo_without_consistency()  # two executors' runs must agree exactly
    text = _replace_once(text, "    count: 64\n", "    count: 4\n")
    text = _replace_once(text, "thresholds:\n", "thresholds:\n" + EXTRA_THRESHOLD)
    if sim_args:
        text = _replace_once(text, '"--sim-seed", "0"]', '"--sim-seed", "0", ' + ", ".join(f'"{a}"' for a in sim_args) + "]")
    settings = {"gpus": "false", "cpus_per_task": "1", "poll_s": "1", "time_limit": '"10"', **slurm}
    body = ", ".join(f"{key}: {value}" for key, value in settings.items())
    path = tmp_path / "demo-slurm.yaml"
    path.write_text(text + f"executor:\n  kind: slurm\n  slurm: {{{body}}}\n", encoding="utf-8")
    return path


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"configs/demo.yaml changed: {old!r} is not there exactly once"
    return text.replace(old, new)


def evalkit(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *args], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


class Driver:
    """`evalkit matrix` running in the background, its progress lines collected as they come.

    Its standard output is read as it comes too: `--json` prints the whole summary there, over
    a pipe's 64 KiB when every cell finished, and a pipe nobody reads would block the driver on
    its last write (a test would then see a driver that never exits).
    """

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "evalkit.cli", *args], cwd=ROOT, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self.stdout_parts: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._drain, daemon=True).start()
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        self.stdout_parts.extend(iter(self.process.stdout.read, ""))

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_line(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        exited_at: float | None = None
        with self._changed:
            while True:
                for line in self.lines:
                    if match := regex.search(line):
                        return match
                now = time.monotonic()
                if exited_at is None and self.process.poll() is not None:
                    exited_at = now
                if now > deadline or exited_at is not None and now - exited_at > 1:  # 1 s to drain
                    raise AssertionError(f"no progress line matching {pattern!r}:\n" + "\n".join(self.lines))
                self._changed.wait(0.2)

    def wait(self, timeout: float = 120) -> int:
        code = self.process.wait(timeout)
        time.sleep(0.1)  # the drain thread's last lines
        return code

    @property
    def log(self) -> str:
        with self._changed:
            return "\n".join(self.lines)


def squeue_names(prefix: str) -> list[str]:
    """Names of the jobs squeue still lists (pending, running, completing) that start with `prefix`."""
    out = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, check=True, timeout=30)
    return [name for name in out.stdout.split() if name.startswith(prefix)]


def _cluster_answers() -> str | None:
    """Why no cluster is usable, or None when sinfo answers."""
    if shutil.which("sbatch") is None:
        return "no sbatch on PATH"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], check=False, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo does not answer"
    return None if out.returncode == 0 and out.stdout.strip() else f"sinfo: {out.stderr.strip() or 'no nodes'}"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[None]:
    """A Slurm that answers; SLURM_CONF points at scripts/slurm-local.sh's cluster unless already set."""
    local_conf = Path(os.environ.get("EVALKIT_SLURM_DIR", "/tmp/evalkit-slurm")) / "slurm.conf"
    if "SLURM_CONF" not in os.environ and local_conf.is_file():
        os.environ["SLURM_CONF"] = str(local_conf)
    why = _cluster_answers()
    if why is not None:
        message = f"no Slurm cluster ({why}); start one with: bash scripts/slurm-local.sh start"
        if os.environ.get("EVALKIT_SLURM_REQUIRED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    yield


NODES = ("node1", "node2")


@pytest.fixture(scope="session")
def two_nodes(slurm_cluster: None) -> Iterator[None]:
    """scripts/slurm-local.sh's two-node cluster: node1 and node2 answer sinfo, and their processes can be read."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=False, timeout=30)
    if sorted(set(out.stdout.split())) != list(NODES) or any(processes_on(node) is None for node in NODES):
        message = f"not slurm-local.sh's two-node cluster (nodes: {out.stdout.split()}); start it with: " \
                  "bash scripts/slurm-local.sh start --nodes 2"
        if os.environ.get("EVALKIT_SLURM_REQUIRED") == "1" and os.environ.get("EVALKIT_SLURM_NODES") != "1":
            pytest.fail(message)  # CI started two nodes (EVALKIT_SLURM_NODES=2): not finding them fails
        pytest.skip(message)
    yield


def processes_on(node: str) -> dict[int, str] | None:
    """What runs on `node` besides its init and slurmd: {pid as this machine numbers it: command
    line}; None when `node` is not one of slurm-local.sh's (its init's pid file, its PID namespace)."""
    try:
        init = int((Path(os.environ.get("EVALKIT_SLURM_DIR", "/tmp/evalkit-slurm")) / "run" / f"{node}.pid").read_text())
        namespace = os.stat(f"/proc/{init}/ns/pid").st_ino
    except (OSError, ValueError):
        return None
    found: dict[int, str] = {}
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or int(proc.name) == init or os.stat(proc / "ns" / "pid").st_ino != namespace:
                continue
            argv = (proc / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:  # it ended while we looked
            continue
        if argv != [b""] and argv[0] != b"/usr/sbin/slurmd":
            found[int(proc.name)] = " ".join(a.decode(errors="replace") for a in argv)
    return found


def wait_nothing_left(timeout: float = 30) -> dict[str, list[str]]:
    """Wait until neither node runs anything; what each still runs when the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        left = {node: sorted((processes_on(node) or {}).values()) for node in NODES}
        if not any(left.values()) or time.monotonic() > deadline:
            return {node: procs for node, procs in left.items() if procs}
        time.sleep(0.5)
