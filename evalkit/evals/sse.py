"""A streamed completion's server-sent events, as the long-generation eval reads them: each event's
``data`` field, an engine's error event, the token ids a chunk carries. Split from repetition.py,
which streams with them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from evalkit.errors import StreamBroken


def token_ids(pieces: list[str]) -> list[int] | None:
    """`token_id:N` strings -> ints; None if the server did not send ids."""
    if not pieces or not pieces[0].startswith("token_id:"):
        return None
    try:
        return [int(piece[9:]) for piece in pieces]
    except ValueError:
        return None


async def sse_data(response: httpx.Response) -> AsyncIterator[bytes]:
    """The ``data:`` field of each server-sent event, as bytes.

    Lines are split here rather than by httpx's ``aiter_lines``, which decodes every chunk to
    text first: on a fast server that was a fifth of the client's time per event. Line ends
    are CR, LF or CRLF, as the SSE format allows.
    """
    pending = b""
    async for chunk in response.aiter_bytes():
        lines = (pending + chunk).splitlines(keepends=True)
        pending = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip()
    if pending.startswith(b"data:"):
        yield pending[5:].strip()


class StreamErrorEvent(StreamBroken):
    """The engine ended a 200 stream with an error event instead of the generation.

    vLLM 0.34.0 and SGLang 0.5.23 both answer a failure after the stream started with
    `data: {"error": {"message": ..., "code": N}}` and then `data: [DONE]`: vLLM on an `error`
    finish (entrypoints/openai/completion/serving.py:620-626, code 500, or 503 for a retryable
    request error, serve/exception_handling/error_response.py:60-67), SGLang on an abort with a
    status (serving_completions.py:356-371: 503 "Retracted under decode memory pressure ...
    Retry later." from managers/schedule_batch.py:3496-3500, 500 on OOM) or any exception after
    the first chunk (serving_completions.py:498-504, with its default code 400). The request was
    accepted, so whatever the code says the failure is the engine's, and it is transient like a
    5xx answer: the prompt is generated again."""

    def __init__(self, message: str, code: object) -> None:
        super().__init__(f"the engine ended the stream with an error (code {code}): {message}")


def error_event(chunk: Mapping[str, Any]) -> StreamErrorEvent | None:
    """The stream's error event, if this chunk is one."""
    error = chunk.get("error")
    if error is None:
        return None
    if isinstance(error, Mapping):
        return StreamErrorEvent(str(error.get("message") or "no message"), error.get("code"))
    return StreamErrorEvent(str(error), None)
