"""ATOM's wire dialect (``--sim-dialect atom``), as read from ROCm/ATOM at 0e9804c21 (the same at
ccc861dc5): what its OpenAI server accepts, refuses and answers, so evalkit is tested against it.

Requests (atom/entrypoints/openai/protocol.py, ``CompletionRequest`` / ``ChatCompletionRequest``,
pydantic with ``extra="ignore"``; FastAPI answers a validation failure with 422):

- ``prompt: str``: a list (a batch, token ids) is a 422; ``stop: Optional[List[str]]``: a bare
  string is a 422; ``max_tokens`` (``max_completion_tokens`` first) an integer.
- ``model`` must equal ``--model`` up to trailing slashes, else 400 with ``detail`` "Requested
  model '...' does not match server model '...'" (api_server.py, ``validate_model``).
- Everything else is dropped unread: ``logprobs``, ``echo``, ``seed``, ``stream_options``, vLLM's
  token-id extensions. No logprobs, no ids.

Answers (api_server.py, serving_completion.py, serving_chat.py):

- finish reasons are the scheduler's (atom/model_engine/scheduler.py): ``max_tokens``, ``eos``,
  ``stop_sequence`` (a stop string), ``stop_<token id>``, ``aborted``;
- a completions stream: content chunks with a null reason, the last one carrying the real
  reason, then an extra empty chunk saying ``"stop"``, a usage-only chunk (no ``choices``) and
  ``data: [DONE]``, whatever ``stream_options`` says (``stream_completion_response``);
- a chat stream: a role chunk, content chunks, a final empty chunk saying ``"stop"`` whatever
  ended the text, the usage chunk, ``[DONE]`` (``stream_chat_response``);
- a non-streamed choice is ``{"index", "text", "finish_reason"}`` (``build_completion_response``)
  or ``{"index", "message", "finish_reason"}``, with the raw reason;
- no ``/metrics`` and no ``/version`` (404; ATOM's HEAD adds ``/metrics`` and ``/server_info``).
"""

from __future__ import annotations

from typing import Any

from evalkit.sim import openai
from evalkit.sim.model import Generation
from evalkit.sim.openai import BadRequest, CompletionRequest, Json

COMPLETION_FIELDS = frozenset({"prompt", "temperature", "top_k", "top_p", "max_tokens", "max_completion_tokens",
                               "stop", "ignore_eos", "stream", "n"})
"""What ATOM's CompletionRequest reads; the simulator passes these on and drops the rest."""
CHAT_FIELDS = frozenset({"messages", "temperature", "top_k", "top_p", "max_tokens", "max_completion_tokens",
                         "stop", "ignore_eos", "stream", "n"})


def _unprocessable(field: str, kind: str, message: str, value: Any) -> BadRequest:
    """FastAPI's 422 for a body field pydantic refused."""
    detail = [{"type": kind, "loc": ["body", field], "msg": message, "input": value}]
    return BadRequest(message, param=field, status=422, body={"detail": detail})


def parse(body: Any, *, chat: bool, model: str, max_model_len: int) -> CompletionRequest:
    """A request as ATOM's server validates it (module docstring); raise ``BadRequest`` with
    ATOM's status and body for what it refuses."""
    if not isinstance(body, dict):
        raise _unprocessable("body", "model_attributes_type", "Input should be a valid dictionary", body)
    if chat:
        if not isinstance(body.get("messages"), list):
            raise _unprocessable("messages", "list_type", "Input should be a valid list", body.get("messages"))
    elif "prompt" not in body:
        raise _unprocessable("prompt", "missing", "Field required", None)
    elif not isinstance(body["prompt"], str):
        raise _unprocessable("prompt", "string_type", "Input should be a valid string", body["prompt"])
    stop = body.get("stop")
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise _unprocessable("stop", "list_type", "Input should be a valid list", stop)
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _unprocessable(name, "int_type", "Input should be a valid integer", value)
    requested = body.get("model")
    if requested is not None and str(requested).rstrip("/") != model.rstrip("/"):
        message = f"Requested model '{requested}' does not match server model '{model}'"
        raise BadRequest(message, status=400, body={"detail": message})
    kept = {key: value for key, value in body.items() if key in (CHAT_FIELDS if chat else COMPLETION_FIELDS)}
    if not chat and kept.get("max_completion_tokens") is not None:  # ATOM's get_max_tokens() reads it first
        kept["max_tokens"] = kept.pop("max_completion_tokens")
    return openai.parse(kept, chat=chat, model_names=(model,), max_model_len=max_model_len)


def finish_reason(generation: Generation) -> str:
    """ATOM's raw reason for a finished generation (scheduler.py:1476-1499): the simulated model's
    natural end is an EOS token, a stop string is ``stop_sequence``, a cut is ``max_tokens``."""
    if generation.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if generation.stop_string else "eos"


def choice(request: CompletionRequest, index: int, generation: Generation) -> Json:
    """One non-streamed choice as ATOM builds it (no logprobs field)."""
    text = "".join(generation.tokens)
    if request.chat:
        return {"index": index, "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason(generation)}
    return {"index": index, "text": text, "finish_reason": finish_reason(generation)}


def chunk(request: CompletionRequest, index: int, tokens: list[str], reason: str | None, *, first: bool = False) -> Json:
    """One streamed choice as ATOM's ``create_completion_chunk`` / ``create_chat_chunk`` build it."""
    if request.chat:
        delta: Json = {"role": "assistant"} if first else ({"content": "".join(tokens)} if tokens else {})
        return {"index": index, "delta": delta, "finish_reason": reason, "logprobs": None}
    return {"index": index, "text": "".join(tokens), "finish_reason": reason, "logprobs": None}


def last_reason(request: CompletionRequest, generation: Generation) -> str | None:
    """The reason on a choice's last content chunk: the engine's real one on completions; none on
    chat, whose stream says only its closing "stop"."""
    return None if request.chat else finish_reason(generation)
