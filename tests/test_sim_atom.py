"""The simulator's ATOM dialect is ATOM's wire, and evalkit reads it right.

What ATOM sends was read from ROCm/ATOM at 0e9804c21 (the same at the fix, ccc861dc5):
atom/entrypoints/openai/protocol.py (what a request may hold), api_server.py (`validate_model`),
serving_completion.py (`stream_completion_response`: the real last chunk, an empty "stop" chunk,
a usage-only chunk, [DONE]), atom/model_engine/scheduler.py (`max_tokens`, `eos`,
`stop_sequence`, `stop_<id>`, `aborted`). These tests hold the simulator to it, then run evalkit's
own clients against it: a loop cut by max_tokens must stay a cut although ATOM's last word is
"stop", and GSM8K answers cut by max_gen_toks must be counted although ATOM says `max_tokens`.
The wire and evalkit's own client against the simulator's app in this process; lm-eval's client,
the simulator's flag check and the matrix against processes (e2e).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from evalkit.evals import gsm8k, repetition
from evalkit.evals.base import EvalContext, Server
from evalkit.evals.detector import is_collapsed, split_text
from evalkit.evals.lm_eval_adapter import TASK_DIR
from evalkit.evals.repetition import RepetitionSettings
from evalkit.profiles import get_profile
from tests.conftest import CONFIGS
from tests.helpers.cli import evalkit_cli
from tests.helpers.sim import SimServer, asgi_served, gsm8k_test, run_sim, simulator

LONG = "Write a long essay about the history of rivers."
QUESTION = f"Question: {gsm8k_test()[0]['question']}\nAnswer:"
"""A GSM8K question: the simulated model answers it at length, so a small max_tokens cuts it."""
BUGGY = ("--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off", "--sim-collapse-rate", "0.6")


@pytest.fixture(scope="module")
def atom_app() -> Any:
    """The buggy cell in ATOM's dialect, in this process, shared by the module's tests as one server was."""
    return simulator("--sim-dialect", "atom", *BUGGY).app


@pytest.fixture
def atom(atom_app: Any) -> Iterator[TestClient]:
    with TestClient(atom_app, base_url="http://simulator.test") as client:
        yield client


def _events(response: httpx.Response) -> list[Any]:
    datas = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return [data if data == "[DONE]" else json.loads(data) for data in datas]


def test_a_completions_stream_ends_as_atom_s_does(atom: TestClient) -> None:
    response = atom.post("/v1/completions", json={"model": "sim-model", "prompt": QUESTION, "max_tokens": 20,
                                                "stream": True, "logprobs": 1, "stream_options": {}})
    events = _events(response)
    *content, closing, usage, done = events
    reasons = [e["choices"][0]["finish_reason"] for e in content]
    assert reasons[:-1] == [None] * (len(reasons) - 1) and reasons[-1] == "max_tokens" and content[-1]["choices"][0]["text"]
    assert closing["choices"] == [{"index": 0, "text": "", "finish_reason": "stop", "logprobs": None}]
    assert "choices" not in usage and usage["usage"]["completion_tokens"] == 20 and done == "[DONE]"
    assert all(e["choices"][0]["logprobs"] is None for e in content)  # logprobs are dropped unread


def test_a_chat_stream_says_only_stop(atom: TestClient) -> None:
    """ATOM's chat stream has no real reason at all (serving_chat.py, `stream_chat_response`)."""
    response = atom.post("/v1/chat/completions", json={"model": "sim-model", "max_tokens": 16, "stream": True,
                                                       "messages": [{"role": "user", "content": LONG}]})
    *content, closing, usage, done = _events(response)
    assert content[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert {e["choices"][0]["finish_reason"] for e in content} == {None}
    assert closing["choices"][0]["finish_reason"] == "stop" and "usage" in usage and done == "[DONE]"


@pytest.mark.parametrize(("body", "status", "detail"), [
    ({"prompt": ["one", "two"]}, 422, {"type": "string_type", "loc": ["body", "prompt"]}),
    ({"prompt": "x", "stop": "\n\n"}, 422, {"type": "list_type", "loc": ["body", "stop"]}),
    ({"prompt": "x", "model": "deepseek"}, 400, "Requested model 'deepseek' does not match server model 'sim-model'"),
])
def test_what_atom_refuses(atom: TestClient, body: dict[str, Any], status: int, detail: Any) -> None:
    response = atom.post("/v1/completions", json={"model": "sim-model", "max_tokens": 4, **body})
    assert response.status_code == status
    found = response.json()["detail"]
    assert found == detail if isinstance(detail, str) else detail.items() <= found[0].items()


def test_what_atom_ignores_or_lacks(atom: TestClient) -> None:
    answer = atom.post("/v1/completions", json={"model": "sim-model/", "prompt": QUESTION, "max_tokens": 8,
                                                "echo": True, "logprobs": 3, "seed": 7,
                                                "return_tokens_as_token_ids": True, "stop": ["zzz"]}).json()
    assert atom.get("/version").status_code == 404 and atom.get("/metrics").status_code == 404
    assert atom.get("/v1/models").json()["data"][0]["id"] == "sim-model"
    [choice] = answer["choices"]
    assert choice.keys() == {"index", "text", "finish_reason"} and not choice["text"].startswith("Question")
    assert choice["finish_reason"] == "max_tokens"


@pytest.fixture
def sim_cli(sim_process: Callable[..., SimServer]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`python -m evalkit.sim ARGS` run to its end (tests/helpers/sim.py, `run_sim`): a process,
    so the test is e2e (through `sim_process`)."""
    return run_sim


def test_atom_at_the_fix_has_no_served_model_name(sim_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    done = sim_cli("--model", "m", "--served-model-name", "n", "--sim-dialect", "atom", timeout=60)
    assert done.returncode == 2 and "--served-model-name" in done.stderr


def test_a_loop_cut_by_max_tokens_stays_a_cut_through_atom_s_closing_stop(atom_app: Any) -> None:
    """The real last chunk says `max_tokens`, the one after it "stop": the first reason counts."""
    settings = RepetitionSettings(count=16, max_tokens=512, concurrency=8, early_abort=False)
    result = repetition.run_repetition(settings, asgi_served(atom_app, wire=get_profile("sim-atom").wire()))
    cut = [s for s in result.samples if s["engine_finish_reason"] == "max_tokens"]
    assert cut and all(s["finish_reason"] == "length" for s in cut)
    assert result.metrics["hit_max_tokens"] == len(cut)
    assert {s["finish_reason"] for s in result.samples} <= {"length", "stop"}
    collapsed = [s for s in cut if s["collapsed"]]
    assert collapsed and result.metrics["collapsed"] == len(collapsed)
    # The cut rules decided it: judged as a natural end, as ATOM's closing "stop" would have had
    # it, at least one of these loops is not collapsed (the natural-end rules ask for more).
    assert any(not is_collapsed(split_text(s["text"]), finish_reason="stop", settings=settings.detector)
               for s in collapsed)


def test_gsm8k_counts_atom_s_max_tokens_as_cut(sim_process: Callable[..., SimServer], tmp_path: Path) -> None:
    """Non-streamed GSM8K answers from ATOM say `max_tokens` (or `stop_sequence` at lm-eval's stop).
    lm-eval's own client needs a real port, and this cell is not the default simulator: a process."""
    atom = sim_process("--sim-dialect", "atom", *BUGGY)
    settings = gsm8k.GSM8KSettings(num_fewshot=0, max_gen_toks=8, num_concurrent=4)
    gsm8k.write_task_yaml(tmp_path / TASK_DIR, settings)
    server = Server(atom.url, "sim-model", get_profile("sim-atom").wire())
    result = gsm8k.run_gsm8k(settings, EvalContext(server, tmp_path, tmp_path, limit=6))
    assert {row["engine_finish_reason"] for row in result.samples} == {"max_tokens"}
    assert {row["finish_reason"] for row in result.samples} == {"length"}
    assert result.metrics["cut_by_max_gen_toks"] == 6


@pytest.mark.parametrize("only", [
    pytest.param(("--only", "parallel=dp8,graph=piecewise", "--only", "parallel=tp8,graph=full,fix=fixon"),
                 id="buggy-twin-baseline"),
    pytest.param((), id="all-12-cells", marks=pytest.mark.slow),
])
def test_the_atom_demo_catches_the_buggy_cell(tmp_path: Path, only: tuple[str, ...], engine_processes: None) -> None:
    """configs/demo-atom.yaml end to end: the buggy cell broken, reasons canonical, cuts counted.
    The default run takes the buggy cell, its fix-on twin and the baseline, the cells its A/B and
    baseline verdicts compare (~15 s); the slow suite takes all 12 (~50 s)."""
    done = evalkit_cli("matrix", "--config", str(CONFIGS / "demo-atom.yaml"), "--run-id", "atom", "--json", "--quiet",
                       "--lock-file", str(tmp_path / "lock"), *only, cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    cells = {c["id"]: c for c in summary["cells"]}
    assert len(cells) == (3 if only else 12) and all(c["status"] == "ok" for c in cells.values())
    flagged = {cid for cid, c in cells.items() if any(f["action"] == "fail" for f in c["flags"])}
    assert flagged == {"dp8-piecewise-fixoff"}
    run = tmp_path / "results" / "atom"
    buggy = json.loads((run / "dp8-piecewise-fixoff" / "cell.json").read_text())["metrics"]["repetition"]
    assert buggy["hit_max_tokens"] == buggy["collapsed"] > 0
    for cell in cells:
        for name in ("repetition", "gsm8k"):
            rows = [json.loads(line) for line in (run / cell / f"{name}.samples.jsonl").read_text().splitlines()]
            assert {(r["finish_reason"], r["engine_finish_reason"]) for r in rows} <= {
                ("stop", "eos"), ("stop", "stop_sequence"), ("length", "max_tokens")}
