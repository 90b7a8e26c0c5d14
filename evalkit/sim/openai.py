"""The OpenAI wire format as the simulator speaks it: request parsing and response bodies.

Parsing turns a JSON body into a small frozen request value or raises ``BadRequest`` with
an OpenAI-style message (a bad request is a 400, never a crash). The builders produce the
shapes lm-eval's ``local-completions`` / ``local-chat-completions`` and evalkit's streaming
client read: ``choices[i].text`` / ``message.content`` / ``delta``, ``index``,
``finish_reason``, ``logprobs``, ``usage``.

Logprob values are a stable function of the token (not a probability model); tokens can be
returned as ``token_id:N`` (``return_tokens_as_token_ids``, as in vLLM) so a client gets
exact ids. ``text_offset`` counts characters from the start of the returned text (with
``echo``, from the start of the prompt) and keeps counting across streamed chunks. With
``logprobs`` >= 1, ``top_logprobs`` lists the chosen token itself for each position (the
greedy choice; lm-eval's loglikelihood path reads it), with ``logprobs: 0`` it is null.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalkit.sim.model import FinishReason, Generation, Prompt
from evalkit.sim.tokens import count_tokens, token_id, tokenize

DEFAULT_MAX_TOKENS = 8192
"""ATOM's default when a request gives no max_tokens (capped by the context left)."""

Json = dict[str, Any]


class BadRequest(Exception):
    """A request the server rejects with an OpenAI-style error body."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status


def error_body(message: str, kind: str, status: int, param: str | None = None) -> Json:
    """OpenAI's error envelope."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


@dataclass(frozen=True)
class Options:
    """Decoding and output options shared by both endpoints."""

    max_tokens: int
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    logprobs: int | None
    """None: no logprobs; N >= 0: the chosen token's logprob, plus itself as top-N when N > 0."""
    token_ids: bool
    echo: bool


@dataclass(frozen=True)
class CompletionRequest:
    """A parsed ``/v1/completions`` or ``/v1/chat/completions`` request."""

    chat: bool
    prompts: tuple[Prompt, ...]
    """One per choice: a completions prompt list is a batch."""
    prompt_tokens: tuple[int, ...]
    options: Options


def parse(body: Any, *, chat: bool, model_names: tuple[str, ...], max_model_len: int) -> CompletionRequest:
    """Validate a request body; raise ``BadRequest`` for anything a real server would refuse."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in model_names:
        raise BadRequest(f"The model `{model}` does not exist.", param="model", status=404)
    if body.get("n") not in (None, 1):
        raise BadRequest("the simulator supports only n=1", param="n")
    prompts = _chat_prompt(body) if chat else _completion_prompts(body)
    texts = tuple(p.context for p in prompts)
    prompt_tokens = tuple(count_tokens(t) for t in texts)
    longest = max(prompt_tokens)
    if longest >= max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt has {longest} tokens.",
            param="prompt",
        )
    max_tokens = _max_tokens(body, chat, default=min(DEFAULT_MAX_TOKENS, max_model_len - longest))
    if longest + max_tokens > max_model_len:
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {longest + max_tokens} tokens ({longest} in the prompt, {max_tokens} "
            "in the completion). Please reduce the length of the prompt or completion.",
            param="max_tokens",
        )
    return CompletionRequest(chat, prompts, prompt_tokens, _options(body, chat, max_tokens))


def _completion_prompts(body: Json) -> tuple[Prompt, ...]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        items = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        items = prompt
    elif isinstance(prompt, list) and prompt and all(isinstance(p, (int, list)) for p in prompt):
        raise BadRequest(
            "token-id prompts are not supported by the simulator: send text "
            "(lm-eval: tokenized_requests=False)",
            param="prompt",
        )
    else:
        raise BadRequest("'prompt' must be a string or a non-empty list of strings", param="prompt")
    return tuple(Prompt(text=p, context=p, chat=False) for p in items)


def _chat_prompt(body: Json) -> tuple[Prompt, ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list", param="messages")
    turns: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadRequest("each message needs a 'role' and 'content'", param="messages")
        turns.append((message["role"], _content_text(message.get("content"))))
    users = [content for role, content in turns if role == "user"]
    transcript = "\n".join(f"{role}: {content}" for role, content in turns)
    return (Prompt(text=users[-1] if users else transcript, context=transcript, chat=True),)


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        texts = [p for p in parts if isinstance(p, str)]
        if len(texts) == len(parts):
            return "\n".join(texts)
    raise BadRequest("message 'content' must be a string or a list of text parts", param="messages")


def _max_tokens(body: Json, chat: bool, default: int) -> int:
    names = ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",)
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadRequest(f"'{name}' must be a non-negative integer", param=name)
        return value
    return default


def _options(body: Json, chat: bool, max_tokens: int) -> Options:
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(stop)
    else:
        raise BadRequest("'stop' must be a string or a list of strings", param="stop")
    temperature = body.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise BadRequest("'temperature' must be a non-negative number", param="temperature")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise BadRequest("'stream_options' must be an object", param="stream_options")
    echo = bool(body.get("echo", False)) and not chat
    stream = bool(body.get("stream", False))
    if echo and stream:
        raise BadRequest("the simulator does not support 'echo' with 'stream'", param="echo")
    return Options(
        max_tokens=max_tokens,
        stop=stops,
        stream=stream,
        include_usage=bool(stream_options.get("include_usage", False)),
        logprobs=_logprobs(body, chat),
        token_ids=bool(body.get("return_tokens_as_token_ids", False)),
        echo=echo,
    )


def _logprobs(body: Json, chat: bool) -> int | None:
    value = body.get("logprobs")
    if chat:
        if not value:
            return None
        top = body.get("top_logprobs") or 0
        if isinstance(top, bool) or not isinstance(top, int) or top < 0:
            raise BadRequest("'top_logprobs' must be a non-negative integer", param="top_logprobs")
        return top
    if value is None or value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest("'logprobs' must be a non-negative integer", param="logprobs")
    return value


def logprob(token: str) -> float:
    """A stable stand-in for the chosen token's log-probability, in (-2.5, 0]."""
    return -(token_id(token) % 1000) / 400


def _shown(token: str, token_ids: bool) -> str:
    return f"token_id:{token_id(token)}" if token_ids else token


def completion_logprobs(tokens: list[str], options: Options, offset: int, first_is_prompt: bool = False) -> Json:
    """Legacy completions ``logprobs`` for ``tokens``, whose text starts at ``offset``.

    ``first_is_prompt``: the first token opens an echoed prompt and, having no context, has
    no logprob (None), as in OpenAI's API.
    """
    shown = [_shown(t, options.token_ids) for t in tokens]
    values: list[float | None] = [logprob(t) for t in tokens]
    if first_is_prompt and values:
        values[0] = None
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token)
    top = (
        [None if v is None else {s: v} for s, v in zip(shown, values, strict=True)]
        if options.logprobs
        else None
    )
    return {"tokens": shown, "token_logprobs": values, "top_logprobs": top, "text_offset": offsets}


def chat_logprobs(tokens: list[str], options: Options) -> Json:
    """Chat ``logprobs``: one entry per token, with itself as the only top alternative."""
    content = []
    for token in tokens:
        shown, value = _shown(token, options.token_ids), logprob(token)
        top = [{"token": shown, "logprob": value, "bytes": None}] if options.logprobs else []
        content.append({"token": shown, "logprob": value, "bytes": None, "top_logprobs": top})
    return {"content": content}


def usage(prompt_tokens: int, completion_tokens: int) -> Json:
    """OpenAI ``usage`` counted in simulator tokens."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def choice(request: CompletionRequest, index: int, generation: Generation) -> Json:
    """One non-streamed choice."""
    options, tokens = request.options, generation.tokens
    text = "".join(tokens)
    if request.chat:
        return {
            "index": index,
            "message": {"role": "assistant", "content": text},
            "logprobs": None if options.logprobs is None else chat_logprobs(tokens, options),
            "finish_reason": generation.finish_reason,
        }
    logprobs = None
    if options.echo:
        prompt = request.prompts[index].text
        prompt_tokens = tokenize(prompt)
        text = prompt + text
        if options.logprobs is not None:
            logprobs = completion_logprobs(prompt_tokens + tokens, options, 0, first_is_prompt=True)
    elif options.logprobs is not None:
        logprobs = completion_logprobs(tokens, options, 0)
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": generation.finish_reason}


def chunk_choice(
    request: CompletionRequest,
    index: int,
    tokens: list[str],
    offset: int,
    finish_reason: FinishReason | None,
    *,
    first: bool = False,
) -> Json:
    """One streamed choice carrying ``tokens`` (none, to close a choice).

    ``first`` opens a chat choice with the assistant role, as OpenAI's first delta does.
    """
    options = request.options
    text = "".join(tokens)
    with_logprobs = options.logprobs is not None and bool(tokens)
    if request.chat:
        delta: Json = {}
        if first:
            delta["role"] = "assistant"
        if tokens or first:
            delta["content"] = text
        return {
            "index": index,
            "delta": delta,
            "logprobs": chat_logprobs(tokens, options) if with_logprobs else None,
            "finish_reason": finish_reason,
        }
    return {
        "index": index,
        "text": text,
        "logprobs": completion_logprobs(tokens, options, offset) if with_logprobs else None,
        "finish_reason": finish_reason,
    }
