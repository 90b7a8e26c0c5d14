"""The simulator's OpenAI-compatible HTTP surface: its app in this process (Starlette's TestClient),
and a real process where the test is about the connection (a client that disconnects mid-stream)."""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.helpers.sim import SimServer, gsm8k_test, sim_client, sse_events

QUESTION = gsm8k_test()[0]["question"]
GSM8K_PROMPT = f"Question: {QUESTION}\nAnswer:"
LONG_PROMPT = "Write a long story about a lighthouse keeper and the ships she guided."


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    # The buggy cell, so that long prompts can collapse; every endpoint behaves the same in any cell.
    args = ("-tp", "8", "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off")
    with sim_client(*args) as http:
        yield http


def complete(client: httpx.Client, path: str = "/v1/completions", **body: Any) -> dict[str, Any]:
    response = client.post(path, json={"model": "sim-model", "temperature": 0, **body})
    assert response.status_code == 200, response.text
    parsed: dict[str, Any] = response.json()
    return parsed


def stream(client: httpx.Client, path: str = "/v1/completions", **body: Any) -> list[Any]:
    payload = {"model": "sim-model", "temperature": 0, "stream": True, **body}
    with client.stream("POST", path, json=payload) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(response))
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_completion_shape_and_gsm8k_answer_with_stop(client: httpx.Client) -> None:
    body = complete(client, prompt=GSM8K_PROMPT, max_tokens=256, stop=["Question:", "</s>"])
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["model"] == "sim-model" and isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["logprobs"] is None
    assert choice["finish_reason"] == "stop"
    assert choice["text"].startswith(" ") and choice["text"].rstrip().endswith("#### 18")
    assert "<<" not in choice["text"]
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_without_stop_a_base_model_continues_with_the_next_question(client: httpx.Client) -> None:
    (choice,) = complete(client, prompt=GSM8K_PROMPT, max_tokens=256)["choices"]
    assert "#### 18\n\nQuestion: " in choice["text"]
    assert choice["finish_reason"] == "stop"
    cut = complete(client, prompt=GSM8K_PROMPT, max_tokens=256, stop="####")["choices"][0]
    assert "####" not in cut["text"] and cut["finish_reason"] == "stop"


def test_max_tokens_and_usage_count_simulator_tokens(client: httpx.Client) -> None:
    body = complete(client, prompt=GSM8K_PROMPT, max_tokens=5, logprobs=0)
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    assert len(choice["logprobs"]["tokens"]) == 5 == body["usage"]["completion_tokens"]
    assert "".join(choice["logprobs"]["tokens"]) == choice["text"]
    assert choice["logprobs"]["top_logprobs"] is None
    warm = complete(client, prompt="hi", max_tokens=1)
    assert warm["usage"] == {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    assert warm["choices"][0]["finish_reason"] == "length"
    empty = complete(client, prompt="hi", max_tokens=0)["choices"][0]
    assert empty["text"] == "" and empty["finish_reason"] == "length"


def test_long_prompts_end_with_eos_or_collapse_to_max_tokens(client: httpx.Client) -> None:
    reasons = []
    for index in range(12):
        body = complete(client, prompt=f"{LONG_PROMPT} Part {index}.", max_tokens=800)
        (choice,) = body["choices"]
        tokens = body["usage"]["completion_tokens"]
        if choice["finish_reason"] == "stop":
            assert 480 <= tokens < 800
        else:
            assert tokens == 800
        reasons.append(choice["finish_reason"])
    assert "stop" in reasons


def test_logprobs_with_token_ids_and_offsets(client: httpx.Client) -> None:
    body = complete(client, prompt=GSM8K_PROMPT, max_tokens=64, logprobs=1)
    with_ids = complete(client, prompt=GSM8K_PROMPT, max_tokens=64, logprobs=1, return_tokens_as_token_ids=True)
    text_lp = body["choices"][0]["logprobs"]
    ids_lp = with_ids["choices"][0]["logprobs"]
    assert ids_lp["tokens"] == [f"token_id:{zlib.crc32(t.encode()) % 2**17}" for t in text_lp["tokens"]]
    assert ids_lp["token_logprobs"] == text_lp["token_logprobs"]
    assert all(isinstance(v, float) and v <= 0 for v in text_lp["token_logprobs"])
    offsets = [0]
    for token in text_lp["tokens"][:-1]:
        offsets.append(offsets[-1] + len(token))
    assert text_lp["text_offset"] == offsets
    assert text_lp["top_logprobs"][0] == {text_lp["tokens"][0]: text_lp["token_logprobs"][0]}


def test_echo_with_logprobs_as_lm_eval_loglikelihood_asks(client: httpx.Client) -> None:
    body = complete(client, prompt="Question: 1+1?\nAnswer: 2", max_tokens=1, logprobs=1, echo=True)
    (choice,) = body["choices"]
    logprobs = choice["logprobs"]
    assert choice["text"].startswith("Question: 1+1?\nAnswer: 2")
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert len(logprobs["tokens"]) == body["usage"]["prompt_tokens"] + 1


def test_batch_prompts_give_one_indexed_choice_each(client: httpx.Client) -> None:
    prompts = [GSM8K_PROMPT, "hi", f"{LONG_PROMPT} Batch."]
    body = complete(client, prompt=prompts, max_tokens=600)
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    for prompt, choice in zip(prompts, body["choices"], strict=True):
        assert choice["text"] == complete(client, prompt=prompt, max_tokens=600)["choices"][0]["text"]
    assert body["usage"]["completion_tokens"] > 600


def streamed_text(chunks: list[Any], chat: bool) -> tuple[str, list[str], Any]:
    text, ids, finish = "", list[str](), None
    for chunk in chunks:
        for choice in chunk["choices"]:
            piece = choice["delta"].get("content", "") if chat else choice["text"]
            text += piece
            if choice["logprobs"]:
                entries = choice["logprobs"]["content"] if chat else choice["logprobs"]["tokens"]
                ids += [e["token"] for e in entries] if chat else entries
            finish = choice["finish_reason"] or finish
    return text, ids, finish


@pytest.mark.parametrize("prompt", [GSM8K_PROMPT, f"{LONG_PROMPT} Streamed."])
def test_streaming_equals_non_streaming_completions(client: httpx.Client, prompt: str) -> None:
    fields: dict[str, Any] = {"prompt": prompt, "max_tokens": 2000, "logprobs": 1, "return_tokens_as_token_ids": True}
    whole = complete(client, **fields)
    chunks = stream(client, **fields, stream_options={"include_usage": True})
    text, ids, finish = streamed_text(chunks, chat=False)
    (choice,) = whole["choices"]
    assert text == choice["text"] and ids == choice["logprobs"]["tokens"]
    assert finish == choice["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
    offsets = [o for c in chunks for ch in c["choices"] if ch["logprobs"] for o in ch["logprobs"]["text_offset"]]
    assert offsets == choice["logprobs"]["text_offset"]


def test_chat_completion_and_stream_agree(client: httpx.Client) -> None:
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": QUESTION}]
    whole = complete(client, "/v1/chat/completions", messages=messages, max_completion_tokens=512,
                     logprobs=True, top_logprobs=1)
    assert whole["object"] == "chat.completion" and whole["id"].startswith("chatcmpl-")
    (choice,) = whole["choices"]
    message = choice["message"]
    assert message["role"] == "assistant" and message["content"].endswith("#### 18")
    assert not message["content"].startswith(" ")
    entries = choice["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == message["content"]
    assert entries[0]["bytes"] is None and entries[0]["top_logprobs"][0]["token"] == entries[0]["token"]
    chunks = stream(client, "/v1/chat/completions", messages=messages, max_tokens=512, logprobs=True)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text, tokens, finish = streamed_text(chunks, chat=True)
    assert text == message["content"] and finish == "stop"
    assert tokens == [e["token"] for e in entries]


def test_chat_recognises_lm_eval_few_shot_turns(client: httpx.Client) -> None:
    messages = [{"role": "user", "content": "Q: What is 2+2?\nA:"}, {"role": "assistant", "content": "4"},
                {"role": "user", "content": f"Q: {QUESTION}\nA:"}]
    content = complete(client, "/v1/chat/completions", messages=messages, max_tokens=512)["choices"][0]
    assert content["message"]["content"].endswith("#### 18")
    parts = [{"role": "user", "content": [{"type": "text", "text": f"Solve this.\n{QUESTION}"}]}]
    content = complete(client, "/v1/chat/completions", messages=parts, max_tokens=512)["choices"][0]
    assert content["message"]["content"].endswith("#### 18")


def test_client_disconnect_stops_generation_server_side(sim_process: Callable[..., SimServer]) -> None:
    # A real connection: in this process the app runs a stream to its end before the client reads it.
    server = sim_process("--sim-tokens-per-second", "2000", "--sim-ttft-ms", "50")
    with server.client() as http:
        payload = {"prompt": LONG_PROMPT, "max_tokens": 4096, "stream": True}
        started = time.monotonic()
        with http.stream("POST", "/v1/completions", json=payload) as response:
            events = sse_events(response)
            first = json.loads(next(events))
            for _ in range(5):
                next(events)
        assert time.monotonic() - started >= 0.05  # time to first token
        assert first["choices"][0]["text"]
        time.sleep(0.3)
        stats = http.get("/sim/stats").json()
        time.sleep(0.3)
        assert http.get("/sim/stats").json() == stats  # nothing more is being produced
    assert stats["requests"] == 1 and stats["aborted_streams"] == 1
    assert 0 < stats["completion_tokens_generated"] < 1500


def test_paced_stream_takes_its_time_and_counts_every_token() -> None:
    with sim_client("--sim-tokens-per-second", "1000") as http:
        started = time.monotonic()
        chunks = stream(http, prompt="hi", max_tokens=300)
        elapsed = time.monotonic() - started
        produced = sum(len(c["choices"][0]["text"]) > 0 for c in chunks)
        stats = http.get("/sim/stats").json()
    tokens = stats["completion_tokens_generated"]
    assert 180 <= tokens <= 300 and produced >= tokens // 10
    assert elapsed >= tokens / 1000 * 0.9
    assert stats["aborted_streams"] == 0


def test_stream_interval_sets_tokens_per_event_as_real_engines_do() -> None:
    with sim_client("--sim-stream-interval", "1") as http:
        one = stream(http, prompt=LONG_PROMPT, max_tokens=200, logprobs=1, return_tokens_as_token_ids=True)
    with sim_client("--sim-stream-interval", "7") as http:
        seven = stream(http, prompt=LONG_PROMPT, max_tokens=200, logprobs=1, return_tokens_as_token_ids=True)
    per_event = [[len(c["choices"][0]["logprobs"]["tokens"]) for c in chunks if c["choices"][0]["logprobs"]]
                 for chunks in (one, seven)]
    assert set(per_event[0]) == {1} and set(per_event[1][:-1]) == {7} and per_event[1][-1] <= 7
    assert streamed_text(one, chat=False) == streamed_text(seven, chat=False)


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v1/completions", b"{not json", 400, "invalid JSON"),
        ("/v1/completions", b"[1, 2]", 400, "JSON object"),
        ("/v1/completions", b'{"max_tokens": 5}', 400, "'prompt'"),
        ("/v1/completions", b'{"prompt": [1, 2, 3]}', 400, "token-id prompts"),
        ("/v1/completions", b'{"prompt": "x", "n": 2}', 400, "n=1"),
        ("/v1/completions", b'{"prompt": "x", "max_tokens": -1}', 400, "max_tokens"),
        ("/v1/completions", b'{"prompt": "x", "stop": 5}', 400, "stop"),
        ("/v1/completions", b'{"prompt": "x", "temperature": "hot"}', 400, "temperature"),
        ("/v1/completions", b'{"prompt": "x", "logprobs": "yes"}', 400, "logprobs"),
        ("/v1/completions", b'{"prompt": "x", "model": "other"}', 404, "does not exist"),
        ("/v1/completions", b'{"prompt": "x", "max_tokens": 99999999}', 400, "maximum context length"),
        ("/v1/chat/completions", b'{"prompt": "x"}', 400, "'messages'"),
        ("/v1/chat/completions", b'{"messages": [{"content": "x"}]}', 400, "role"),
    ],
)
def test_bad_requests_get_openai_style_errors(
    client: httpx.Client, path: str, body: bytes, status: int, words: str
) -> None:
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == status
    error = response.json()["error"]
    assert words in error["message"] and error["code"] == status
    assert client.get("/health").status_code == 200


def test_greedy_and_sampled_requests_are_deterministic(client: httpx.Client) -> None:
    first = complete(client, prompt=f"{LONG_PROMPT} Again.", max_tokens=700, temperature=0.0)
    second = complete(client, prompt=f"{LONG_PROMPT} Again.", max_tokens=700, temperature=1.0, seed=5)
    assert first["choices"][0]["text"] == second["choices"][0]["text"]
