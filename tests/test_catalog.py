"""A config takes its launch from the engine's CI catalog in each cell's tree, at that cell's ref.

The engine repository here is a real git repo with ATOM's catalog file at two commits whose
entries differ (a flag added, an environment variable and a gate changed), as ATOM's did between
the fix's refs and its HEAD. The engine is the simulator speaking ATOM's dialect; the catalog's
env sets the simulator's fix (EVALKIT_SIM_FIX), so which entry a cell read decides what it measures.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from evalkit.config import parse_config
from evalkit.render import render
from evalkit.store.records import CellRecord
from evalkit.verdict.deltas import catalog_gate_flags
from tests.helpers.cli import Ran, evalkit_cli

ENTRY = "Sim-V4 DSpark"
BASE = {"model_name": ENTRY, "model_path": "sim/deepseek-v4", "runner": "linux-atom-do-mi350x-8",
        "extraArgs": "--kv_cache_dtype fp8 -tp 8 --cudagraph-mode PIECEWISE --enable-dp-attention "
                     "--method mtp --num-speculative-tokens 3",
        "env_vars": "EVALKIT_SIM_FIX=off\nEVALKIT_CATALOG_NOTE=1", "accuracy_threshold": 0.93}
FIXED = {**BASE, "extraArgs": BASE["extraArgs"] + " --max-model-len 32768",
         "env_vars": "EVALKIT_SIM_FIX=on\nEVALKIT_CATALOG_NOTE=1", "accuracy_threshold": 0.94}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, entry: dict[str, Any]) -> str:
    catalog = repo / ".github" / "benchmark" / "models_accuracy.json"
    catalog.parent.mkdir(parents=True, exist_ok=True)
    catalog.write_text(json.dumps([{"model_name": "Other", "extraArgs": "-tp 2"}, entry], indent=2), encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "catalog")
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def engine_repo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("catalog")
    repo = root / "engine"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    parent = _commit(repo, BASE)
    fix = _commit(repo, FIXED)
    return {"root": root, "repo": repo, "parent": parent, "fix": fix}


def _config(engine_repo: dict[str, Any], entry: str = ENTRY) -> Path:
    repo, parent, fix = engine_repo["repo"], engine_repo["parent"], engine_repo["fix"]
    path = engine_repo["root"] / f"catalog-{len(entry)}.yaml"
    path.write_text(f"""
model: sim/deepseek-v4
engine:
  profile: sim-atom
  args: ["--sim-startup-seconds", "0", "--sim-natural-loop-rate", "0"]
  catalog: {{entry: "{entry}"}}
axes:
  graph:
    piecewise: {{settings: {{graph_mode: PIECEWISE}}}}
    full: {{settings: {{graph_mode: FULL}}}}
  fix:
    fixon: {{source: {{repo: "{repo}", ref: "{fix}"}}}}
    fixoff: {{source: {{repo: "{repo}", ref: "{parent}"}}}}
baseline: {{graph: full, fix: fixon}}
ab: {{axis: fix, on: fixon, off: fixoff}}
evals:
  gsm8k: {{num_fewshot: 1}}
  repetition: {{count: 2, max_tokens: 256, early_abort: false}}
thresholds:
  - {{metric: gsm8k.flexible, min: 0.5}}
""", encoding="utf-8")
    return path


def _cli(*args: str, cwd: Path) -> Ran:
    """`evalkit ARGS` from `cwd`, in this process (the sim-atom profile is evalkit's own)."""
    return evalkit_cli(*args, cwd=cwd)


def test_plan_shows_each_side_s_entry_and_what_differs(engine_repo: dict[str, Any]) -> None:
    done = _cli("plan", "--config", str(_config(engine_repo)), cwd=engine_repo["root"])
    assert done.returncode == 0, done.stderr
    out = done.stdout
    parent, fix = engine_repo["parent"], engine_repo["fix"]
    assert f"catalog: {ENTRY!r} in .github/benchmark/models_accuracy.json at {parent} ({parent[:12]})" in out
    assert "gates accuracy_threshold 0.94" in out and "gates accuracy_threshold 0.93" in out
    blocks = {block.split("]")[0]: block.split("\n\n")[0] for block in out.split("\n[")[1:]}
    full = blocks["full-fixon"]
    # the axis' FULL overrides the catalog's PIECEWISE; the catalog's other flags and env follow
    assert "--cudagraph-mode FULL" in full and "PIECEWISE" not in full.split("argv:")[1].split("\n")[0]
    assert "--enable-dp-attention" in full and "--max-model-len 32768" in full and "EVALKIT_SIM_FIX=on" in full
    assert "--max-model-len" not in blocks["full-fixoff"] and "EVALKIT_SIM_FIX=off" in blocks["full-fixoff"]
    said = out.split("# catalog: the sides read different entries")[1]
    assert (f"piecewise-fixoff (at {parent}) vs piecewise-fixon (at {fix}): extraArgs: - --max-model-len 32768; "
            "env_vars: - EVALKIT_SIM_FIX=on; + EVALKIT_SIM_FIX=off; accuracy_threshold 0.94 -> 0.93") in said


def test_an_entry_the_catalog_lacks_is_bad_input_in_one_line(engine_repo: dict[str, Any]) -> None:
    done = _cli("plan", "--config", str(_config(engine_repo, entry="No-Such-Model")), cwd=engine_repo["root"])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(
        f"has no entry 'No-Such-Model' (entries: Other, {ENTRY})")


def test_a_run_launches_each_cell_from_its_own_ref_s_entry_and_every_report_says_they_differ(
        engine_repo: dict[str, Any], engine_processes: None) -> None:
    """The two PIECEWISE cells (~20 s): the catalog's DP attention and fix env drive the simulator,
    the log reader agrees with what the entry asked, and the reports flag the differing entries.
    End to end: each cell starts a real simulator process."""
    root = engine_repo["root"]
    done = _cli("matrix", "--config", str(_config(engine_repo)), "--run-id", "cat", "--json", "--quiet", "--limit", "30",
                "--only", "graph=piecewise", "--lock-file", str(root / "lock"), "--no-history", cwd=root)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    summary = json.loads(done.stdout)
    cells = {c["id"]: c for c in summary["cells"]}
    record = json.loads((root / "results" / "cat" / "piecewise-fixoff" / "cell.json").read_text())
    assert record["catalog"]["entry"] == ENTRY and record["catalog"]["sha"] == engine_repo["parent"]
    assert record["launch"]["env"]["EVALKIT_SIM_FIX"] == "off" and "--enable-dp-attention" in record["launch"]["argv"]
    assert record["ran_as"]["agrees"] is True and record["ran_as"]["asked"]["dp_attention"] is True
    [flag] = [f for f in cells["piecewise-fixoff"]["flags"] if f["metric"] == "engine.catalog"]
    assert flag["action"] == "warn" and "differs from piecewise-fixon's" in flag["message"]
    assert "extraArgs: - --max-model-len 32768" in flag["message"]
    assert not [f for f in cells["piecewise-fixon"]["flags"] if f["metric"] == "engine.catalog"]
    for fmt in ("markdown", "html"):
        assert "differs from piecewise-fixon" in (render(summary, fmt, root / "results" / "cat") or "")
    for cid, limit in (("piecewise-fixon", 0.94), ("piecewise-fixoff", 0.93)):  # each by its own ref's gate
        gated = [f for f in cells[cid]["flags"] if f["check"] == "catalog_gate"]
        below = cells[cid]["metrics"]["gsm8k.flexible"] < limit
        assert [(f["metric"], f["action"], f["limit"]) for f in gated] == ([("gsm8k.flexible", "warn", limit)] if below else [])


def test_each_cell_is_judged_by_its_own_entry_s_gates_and_an_unmeasured_one_is_said() -> None:
    """ATOM's CI fails flexible-extract below accuracy_threshold and an acceptance below
    mtp_accept_threshold, or none reported; `gates` says what a broken one is here."""
    entry = {"entry": "V4 MTP", "ref": "abc", "fields": {"accuracy_threshold": 0.94, "mtp_accept_threshold": 0.622}}
    cell = CellRecord(id="c", axes={}, status="ok", catalog=entry)
    config = load_config_text(gates="fail")
    flags = catalog_gate_flags(config, cell, {"gsm8k.flexible": 0.95})
    assert [(f.metric, f.action, f.message) for f in flags] == [
        ("engine.spec_acceptance_rate", "fail",
         "c: engine.spec_acceptance_rate not measured, the mtp_accept_threshold of catalog entry 'V4 MTP' at abc")]
    assert catalog_gate_flags(config, cell, {"gsm8k.flexible": 0.93, "engine.spec_acceptance_rate": 0.7})[0].message \
        == "c: gsm8k.flexible 0.930 < 0.94, the accuracy_threshold of catalog entry 'V4 MTP' at abc"
    assert catalog_gate_flags(config, cell.model_copy(update={"status": "error"}), {}) == []
    assert catalog_gate_flags(load_config_text(gates="off"), cell, {}) == []


def load_config_text(gates: str) -> Any:
    return parse_config({"model": "m", "engine": {"profile": "sim-atom", "catalog": {"entry": "V4 MTP", "gates": gates}}},
                        "inline.yaml")
