"""A stream that fails after its 200: retried, counted, and never judged as a sample.

vLLM 0.34.0 and SGLang 0.5.23 end such a stream with `data: {"error": {"message", ..., "code"}}`
and `data: [DONE]` (vllm/entrypoints/openai/completion/serving.py:620-626;
sglang/srt/entrypoints/openai/serving_completions.py:356-371, :498-504). The simulator's
`--sim-fault stream-error` does the same half-way through a stream; the long-generation check
runs against it for real, in this process (its HTTP client reaches the simulator's app over ASGI;
retries back off by evalkit/waits.py, which the tests scale to 0).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from evalkit.errors import EvalError
from evalkit.evals import repetition
from evalkit.evals.base import Server
from evalkit.evals.http_client import MAX_ATTEMPTS
from evalkit.evals.repetition import RepetitionSettings
from evalkit.sim.hashing import unit
from evalkit.wire import Wire
from tests.helpers.sim import asgi_served, simulator

SETTINGS = RepetitionSettings(count=1, max_tokens=600, concurrency=1)
IDS = Wire(token_ids="return_tokens_as_token_ids")


def served(*flags: str) -> tuple[Server, TestClient]:
    """A simulator with `flags` in this process: what the eval is given, and a client of the same
    app for its /sim/stats."""
    app = simulator(*flags).app
    return asgi_served(app, wire=IDS), TestClient(app)


def stats(client: TestClient) -> dict[str, Any]:
    answer: dict[str, Any] = client.get("/sim/stats").json()
    return answer


def _first_request_only() -> tuple[str, str]:
    """A seed and a share under which the fault hits request 1 and spares request 2 (the retry):
    which requests a share hits is the hash evalkit/sim/faults.py documents."""
    for seed in range(100):
        first, second = unit(seed, "stream-error", 1), unit(seed, "stream-error", 2)
        if first < second:
            return str(seed), str((first + second) / 2)
    raise AssertionError("no seed found")


def test_the_fault_is_an_error_event_then_done_inside_a_200() -> None:
    with TestClient(simulator("--sim-fault", "stream-error").app) as client:
        response = client.post("/v1/completions", json={"prompt": "Write a long story.", "max_tokens": 600,
                                                        "stream": True})
        stats = client.get("/sim/stats").json()
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    assert response.status_code == 200 and data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["code"] == 500 and "stream-error" in error["message"]
    assert json.loads(data[0])["choices"][0]["text"]  # it failed after the stream had started
    assert stats["stream_errors"] == 1


def test_a_transient_stream_error_is_retried_and_the_sample_is_whole() -> None:
    seed, rate = _first_request_only()
    clean, _ = served("--sim-seed", seed)
    expected = repetition.run_repetition(SETTINGS, clean).samples[0]
    server, client = served("--sim-seed", seed, "--sim-fault", "stream-error", "--sim-fault-rate", rate)
    result = repetition.run_repetition(SETTINGS, server)
    assert stats(client)["stream_errors"] == 1
    [sample] = result.samples
    assert sample["attempts"] == 2 and sample["stream_errors"] == 1 and result.metrics["stream_errors"] == 1
    assert sample["text"] == expected["text"] and sample["finish_reason"] == expected["finish_reason"]
    assert sample["metrics"] == expected["metrics"]


def test_a_persistent_stream_error_fails_the_eval_with_the_engine_s_message() -> None:
    server, client = served("--sim-fault", "stream-error")
    with pytest.raises(EvalError) as failed:
        repetition.run_repetition(SETTINGS, server)
    assert stats(client)["stream_errors"] == MAX_ATTEMPTS
    message = str(failed.value)
    assert "simulated generation error (--sim-fault stream-error)" in message and "code 500" in message
    assert f"attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}" in message
