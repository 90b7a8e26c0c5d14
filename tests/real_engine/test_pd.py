"""A real prefill/decode pair on vLLM's CPU build (docs/engines.md, "Disaggregated prefill/decode on
vLLM's CPU build"): configs/vllm-answers-pd.yaml runs the trained answers Llama as one engine and as
a 1P1D pair joined by vLLM's ExampleConnector (a shared folder), behind evalkit's router in its
`--shared-storage` mode. What must hold:

- the matrix exits 0 and both cells PASS;
- the pair's GSM8K-format responses equal the single instance's, question by question, text for
  text;
- the decode worker really loaded KV from the folder (`Inject KV cache of N tokens` in its log,
  vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py:171-174 in the 0.32.0 wheel),
  for at least half of the questions: otherwise the equality would say nothing about the handoff.

Needs the vLLM venv and the answers model linked in .evalkit-cache/real-engine/ (`scripts/real-engine.sh
--answers OUTDIR` links both); skips without the model. Three engine starts, two of them at once:
373 s on a 2-core box (2026-12-07: 100 of 100 responses equal, 98 prompts and 17,152 tokens handed over).
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

from tests.conftest import CONFIGS, ROOT
from tests.real_engine.helpers import REAL, REPORT, VENV_PYTHON, engine_processes, read_cells, read_jsonl

pytestmark = pytest.mark.real_engine
CONFIG = CONFIGS / "vllm-answers-pd.yaml"
ANSWERS_MODEL = REAL / "answers-model"
LIMIT = 100
INJECT = re.compile(r"Inject KV cache of (\d+) tokens to the paged memory")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not VENV_PYTHON.exists() or not (ANSWERS_MODEL / "config.json").exists():
        pytest.skip("needs the vLLM venv and the answers model: scripts/real-engine.sh --answers OUTDIR links them")
    out = tmp_path_factory.mktemp("pd")
    # The router is `python -m evalkit.sim.router` from its own working directory: this checkout first
    # on its path, whichever evalkit is installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "evalkit.cli", "matrix", "--config", str(CONFIG), "--limit", str(LIMIT),
                           "--results-dir", str(out), "--run-id", "pd", "--lock-file", str(out / "lock"), "--json",
                           "--no-history"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, f"matrix exit {done.returncode}\n{done.stderr[-4000:]}"
    json.loads(done.stdout)  # --json: the run's summary, whole
    REPORT["pd_matrix"] = {"wall_s": round(time.monotonic() - t0, 1)}
    return out / "pd"


@pytest.mark.timeout(3600)
def test_the_pair_answers_as_one_instance_with_the_kv_handed_over(run_dir: Path) -> None:
    cells = read_cells(run_dir)
    assert set(cells) == {"off", "1p1d"} and all(c["status"] == "ok" for c in cells.values())
    single, pair = ({s["doc_id"]: s["response"] for s in read_jsonl(run_dir / cid / "gsm8k.samples.jsonl")}
                    for cid in ("off", "1p1d"))
    assert len(single) == LIMIT and single.keys() == pair.keys()
    unequal = [i for i in single if single[i] != pair[i]]
    assert not unequal, [(i, single[i], pair[i]) for i in unequal[:5]]
    injected = [int(n) for n in INJECT.findall((run_dir / "1p1d" / "decode0.log").read_text(errors="replace"))]
    assert len(injected) >= LIMIT // 2 and min(injected) >= 16, injected
    assert not engine_processes()
    REPORT["pd_matrix"] |= {"questions": LIMIT, "equal": LIMIT - len(unequal), "inject_lines": len(injected),
                            "injected_tokens": sum(injected),
                            "flexible": {cid: c["metrics"]["gsm8k"]["flexible"] for cid, c in cells.items()}}
