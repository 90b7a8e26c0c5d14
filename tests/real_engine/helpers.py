"""Shared by the real-engine tests: run evalkit's CLI and the venv tool, read a run folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from tests.conftest import ROOT

REAL = ROOT / ".evalkit-cache" / "real-engine"
VENV_PYTHON = REAL / "vllm-venv" / "bin" / "python"
TINY_MODEL = REAL / "tiny-model"
SGLANG_PARSER = REAL / "sglang-parser"
RUNS = REAL / "runs"
TOOL = Path(__file__).with_name("venv_tool.py")
REPORT: dict[str, Any] = {}
"""Filled by the tests; conftest writes it out (report.json, report.md) when the session ends."""


def venv_tool(command: list[str], data: Any, sglang: bool = False, timeout: float = 300) -> Any:
    """Run venv_tool.py under the vLLM venv's python; return its JSON answer."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if sglang:
        env["PYTHONPATH"] = str(SGLANG_PARSER)
    out = subprocess.run([str(VENV_PYTHON), str(TOOL), *command], input=json.dumps(data), capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=timeout)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("EVALKIT_RESULT "):
            return json.loads(line.removeprefix("EVALKIT_RESULT "))
    raise AssertionError(f"venv tool {command[0]} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")


def evalkit_cli(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """The real `evalkit` command line, from the repository root (the configs' paths are relative)."""
    return subprocess.run([sys.executable, "-m", "evalkit.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def read_cells(run_dir: Path) -> dict[str, dict[str, Any]]:
    info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    return {cid: json.loads((run_dir / cid / "cell.json").read_text(encoding="utf-8")) for cid in info["cells"]
            if (run_dir / cid / "cell.json").is_file()}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


PID_IN_LOG = re.compile(r"\bpid=(\d+)\)")


def pids_in_log(log: Path) -> set[int]:
    """vLLM prefixes its lines with `(APIServer pid=N)`, `(EngineCore pid=N)`, `(Worker pid=N)`."""
    return {int(p) for p in PID_IN_LOG.findall(log.read_text("utf-8", "replace"))}


def alive(pids: set[int]) -> set[int]:
    found = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.add(pid)
        except psutil.Error:
            continue
    return found


VENV_MARKER = "real-engine/vllm-venv/"
"""Every engine process runs the venv's python (API server, EngineCore and Worker are spawned
multiprocessing children of the same interpreter), so its command line names the venv link."""


def engine_processes() -> list[str]:
    """Live processes running the vLLM venv's python: after a run, leftovers."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if VENV_MARKER in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.info['pid']}: {cmd[:160]}")
        except psutil.Error:
            continue
    return found
