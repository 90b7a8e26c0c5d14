"""The HTTP evals' one retry policy (`with_retries`): which failures are asked again, how often,
and what the error says when they are not. The evals' own tests run it against the simulator
(test_divergence: a 503 retried, a 400 refused; test_stream_errors: a stream's error event);
here each rule on its own, with the failures httpx raises, and no sleeping between tries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import httpx
import pytest

from evalkit.errors import EvalError, StreamBroken
from evalkit.evals import http_client
from evalkit.evals.http_client import MAX_ATTEMPTS, Tries, with_retries

REQUEST = httpx.Request("POST", "http://127.0.0.1:1/v1/completions")


def status(code: int) -> httpx.HTTPStatusError:
    return httpx.HTTPStatusError(f"HTTP {code}", request=REQUEST, response=httpx.Response(code, request=REQUEST))


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The tries after which `with_retries` backed off (instead of sleeping)."""
    seen: list[int] = []

    async def back_off(attempt: int) -> None:
        seen.append(attempt)

    monkeypatch.setattr(http_client, "back_off", back_off)
    return seen


def failing(*failures: Exception) -> tuple[list[Tries], Callable[[Tries], Awaitable[str]]]:
    """A request that raises `failures` in turn, then answers "ok"; and the tries it was given."""
    given: list[Tries] = []

    async def request(tries: Tries) -> str:
        given.append(Tries(list(tries.failed)))
        if len(given) <= len(failures):
            raise failures[len(given) - 1]
        return "ok"

    return given, request


def test_transient_failures_are_asked_again_and_each_try_sees_the_earlier_ones(waits: list[int]) -> None:
    cut, busy = StreamBroken("stream ended without [DONE]"), status(503)
    given, request = failing(httpx.ConnectError("refused"), cut, busy)
    assert asyncio.run(with_retries(request, "x: item 1")) == "ok"
    assert [t.attempt for t in given] == [1, 2, 3, 4] and given[3].failed[1:] == [cut, busy]
    assert waits == [1, 2, 3]


def test_a_transient_failure_still_there_at_the_last_try_names_the_item_and_the_tries(waits: list[int]) -> None:
    given, request = failing(*[status(500)] * MAX_ATTEMPTS)
    with pytest.raises(EvalError, match=rf"^x: item 1: HTTPStatusError: HTTP 500 \(attempt {MAX_ATTEMPTS} of "
                                        rf"{MAX_ATTEMPTS}\)$"):
        asyncio.run(with_retries(request, "x: item 1"))
    assert len(given) == MAX_ATTEMPTS and waits == list(range(1, MAX_ATTEMPTS))


def test_a_refused_request_fails_at_once_with_the_server_s_message(waits: list[int]) -> None:
    given, request = failing(status(400))
    with pytest.raises(EvalError, match=r"^x: item 1: HTTPStatusError: HTTP 400$"):
        asyncio.run(with_retries(request, "x: item 1"))
    assert len(given) == 1 and waits == []


def test_a_body_that_is_not_json_is_transient_but_evalkit_s_own_errors_are_not_retried(waits: list[int]) -> None:
    try:
        json.loads(b"<html>")
    except json.JSONDecodeError as e:
        not_json = e
    given, request = failing(not_json, ValueError("a bug in evalkit"))
    with pytest.raises(ValueError, match="^a bug in evalkit$"):
        asyncio.run(with_retries(request, "x: item 1"))
    assert len(given) == 2 and waits == [1]
