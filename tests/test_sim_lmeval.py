"""lm-eval, unmodified, scoring GSM8K against the simulator (offline, with the shipped data)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lm_eval
import pytest
from lm_eval.tasks import TaskManager

from tests.helpers.sim import SimServer

DATA = Path(__file__).resolve().parent.parent / "evalkit" / "data" / "gsm8k"
GSM8K_YAML = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"


def task_dir(tmp_path: Path) -> Path:
    (tmp_path / "gsm8k_sim.yaml").write_text(
        f"include: {GSM8K_YAML}\n"
        "task: gsm8k_sim\n"
        "tag: []\n"
        "dataset_path: json\n"
        "dataset_name: null\n"
        "dataset_kwargs:\n"
        "  data_files:\n"
        f"    train: {DATA / 'train.jsonl'}\n"
        f"    test: {DATA / 'test.jsonl'}\n",
        encoding="utf-8",
    )
    return tmp_path


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def evaluate(tmp_path: Path, backend: str, url: str, limit: int, **kwargs: Any) -> dict[str, Any]:
    model_args = (f"base_url={url},model=sim-model,tokenized_requests=False,"
                  "tokenizer_backend=None,num_concurrent=8,max_retries=1")
    out: dict[str, Any] = lm_eval.simple_evaluate(
        model=backend, model_args=model_args, tasks=["gsm8k_sim"],
        task_manager=TaskManager(include_path=str(task_dir(tmp_path)), include_defaults=False), limit=limit,
        log_samples=True, **kwargs,
    )
    return out


def test_local_completions_scores_the_simulator(tmp_path: Path, sim_process: Callable[..., SimServer]) -> None:
    server = sim_process()  # its own: the test counts the requests it served
    out = evaluate(tmp_path, "local-completions", f"{server.url}/v1/completions", limit=20)
    with server.client() as client:
        assert client.get("/sim/stats").json()["requests"] == 20
    scores = out["results"]["gsm8k_sim"]
    assert scores["exact_match,strict-match"] >= 0.8
    assert scores["exact_match,flexible-extract"] == scores["exact_match,strict-match"]
    sample = out["samples"]["gsm8k_sim"][0]
    assert sample["resps"][0][0].rstrip().splitlines()[-1].startswith("####")
    assert "Question:" not in sample["resps"][0][0]  # lm-eval's stop string was honoured


def test_local_chat_completions_with_multiturn_few_shot(tmp_path: Path, shared_sim: SimServer) -> None:
    out = evaluate(tmp_path, "local-chat-completions", f"{shared_sim.url}/v1/chat/completions", limit=10,
                   apply_chat_template=True, fewshot_as_multiturn=True)
    assert out["results"]["gsm8k_sim"]["exact_match,strict-match"] >= 0.8
