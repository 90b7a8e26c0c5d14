"""The OpenAI wire format as the simulator speaks it: request parsing and response bodies.

Parsing turns a JSON body into a small frozen request value or raises ``BadRequest`` with
an OpenAI-style message (a bad request is a 400, never a crash). The builders produce the
shapes lm-eval's ``local-completions`` / ``local-chat-completions`` and evalkit's streaming
client read: ``choices[i].text`` / ``message.content`` / ``delta``, ``index``,
``finish_reason``, ``logprobs``, ``usage``.

Logprobs come from the simulated model's distributions (``evalkit.sim.logprobs``) and are
shaped as vLLM shapes them: ``top_logprobs`` holds, per position, the position's own token
first and then the ``logprobs`` most likely ones (so k or k + 1 entries; a generated token is
the argmax, so k), with ``logprobs: 0`` it is null (lm-eval's loglikelihood path reads
``token_logprobs`` and the max of ``top_logprobs``). ``logprobs`` above ``MAX_LOGPROBS`` (vLLM's
default ``--max-logprobs``) or -1 (the whole vocabulary) get vLLM's 400. ``echo`` with
``logprobs`` scores the prompt teacher-forced, its first token null, as vLLM does; vLLM's
``prompt_logprobs`` (implied by ``echo`` + ``logprobs``) adds the choice's
``prompt_logprobs``: per prompt token (the first null) a map from token id to ``{"logprob",
"rank", "decoded_token"}``, the prompt token first with its rank, then the top ones ranked 1,
2, .... ``echo`` with ``max_tokens: 0`` returns the prompt alone, as vLLM does: the engine
still generates one token, which ``usage`` counts. Tokens can be returned as ``token_id:N``
(``return_tokens_as_token_ids``) so a client gets exact ids. ``text_offset`` counts
characters from the start of the returned text (with ``echo``, from the start of the prompt)
and keeps counting across streamed chunks. ``return_token_ids`` adds the choice's ids, and each
streamed chunk's own ids (``token_ids``), as vLLM 0.34.0 and SGLang 0.5.23 stream them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalkit.sim.logprobs import Scored
from evalkit.sim.model import FinishReason, Generation, Prompt
from evalkit.sim.tokens import VOCAB_SIZE, count_tokens, token_id, tokenize

DEFAULT_MAX_TOKENS = 8192
"""ATOM's default when a request gives no max_tokens (capped by the context left)."""
MAX_LOGPROBS = 20
"""vLLM's default ``--max-logprobs``: the most top logprobs a request may ask for."""

Json = dict[str, Any]


class BadRequest(Exception):
    """A request the server rejects with an OpenAI-style error body."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400, body: Json | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.body = body
        """The whole error body where the dialect's differs from OpenAI's envelope (ATOM's FastAPI)."""


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
    """None: no logprobs; N >= 0: each token's logprob, plus its top-N when N > 0."""
    token_ids: bool
    echo: bool
    echo_only: bool
    """``echo`` with ``max_tokens: 0``: the prompt alone is returned (one token is generated)."""
    prompt_logprobs: int | None
    """vLLM's ``prompt_logprobs``: the top-N per prompt token in the choice, or None."""
    return_token_ids: bool = False
    """vLLM's ``return_token_ids``: the choice carries ``prompt_token_ids`` and ``token_ids``."""

    @property
    def scores_prompt(self) -> bool:
        """Whether a response needs the prompt's tokens scored."""
        return self.prompt_logprobs is not None or (self.echo and self.logprobs is not None)


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
    if max_tokens == 0 and _echo(body, chat):
        max_tokens = 1  # vLLM generates one token and returns the prompt alone
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
    echo = _echo(body, chat)
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
        echo_only=echo and body.get("max_tokens") == 0,
        prompt_logprobs=None if chat else _prompt_logprobs(body, stream),
        return_token_ids=bool(body.get("return_token_ids", False)) and not chat,
    )


def _echo(body: Json, chat: bool) -> bool:
    return bool(body.get("echo", False)) and not chat


def _vllm_error(message: str, param: str, value: object = None) -> BadRequest:
    """vLLM's ``VLLMValidationError`` as its 400 shows it: the message, then the parameter and value."""
    extras = f"parameter={param}" + ("" if value is None else f", value={value}")
    return BadRequest(f"{message} ({extras})", param=param)


def _capped(value: int, what: str, param: str) -> int:
    """``value`` top logprobs (-1: the whole vocabulary), refused above ``MAX_LOGPROBS`` as vLLM does."""
    wanted = VOCAB_SIZE if value == -1 else value
    if wanted > MAX_LOGPROBS:
        raise _vllm_error(
            f"Requested {what} logprobs of {wanted}, which is greater than max allowed: {MAX_LOGPROBS}",
            param,
            wanted,
        )
    return wanted


def _prompt_logprobs(body: Json, stream: bool) -> int | None:
    value = body.get("prompt_logprobs")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _vllm_error("`prompt_logprobs` must be an integer.", "prompt_logprobs", value)
    if stream and (value > 0 or value == -1):
        raise _vllm_error("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
    if value < -1:
        raise _vllm_error("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", value)
    return _capped(value, "prompt", "prompt_logprobs")


def _logprobs(body: Json, chat: bool) -> int | None:
    value = body.get("logprobs")
    if chat:
        if not value:
            return None
        top = body.get("top_logprobs") or 0
        if isinstance(top, bool) or not isinstance(top, int) or top < -1:
            raise BadRequest("'top_logprobs' must be a non-negative integer", param="top_logprobs")
        return _capped(top, "sample", "logprobs")
    if value is None or value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise BadRequest("'logprobs' must be a non-negative integer", param="logprobs")
    return _capped(value, "sample", "logprobs")


@dataclass(frozen=True)
class Scores:
    """One choice's scored tokens (``evalkit.sim.logprobs``), as far as the request needs them."""

    prompt: list[Scored]
    """The prompt's tokens after the first (which has no context), or none if not asked for."""
    generated: list[Scored]


def _shown(token: str, token_ids: bool) -> str:
    return f"token_id:{token_id(token)}" if token_ids else token


def _top(scored: Scored, count: int, token_ids: bool) -> dict[str, float]:
    """The token's own entry first, then the ``count`` most likely (vLLM's order; a duplicate
    keeps the first place)."""
    top = {_shown(scored.token, token_ids): scored.logprob}
    for token, value in scored.top[:count]:
        top[_shown(token, token_ids)] = value
    return top


def completion_logprobs(tokens: list[str], scored: list[Scored | None], options: Options, offset: int) -> Json:
    """Legacy completions ``logprobs`` for ``tokens``, whose text starts at ``offset``.

    A None in ``scored`` is an echoed prompt's first token: no context, so no logprob (null),
    as in OpenAI's API and vLLM.
    """
    shown = [_shown(t, options.token_ids) for t in tokens]
    values = [None if s is None else s.logprob for s in scored]
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token)
    count = options.logprobs
    top = [None if s is None else _top(s, count, options.token_ids) for s in scored] if count else None
    return {"tokens": shown, "token_logprobs": values, "top_logprobs": top, "text_offset": offsets}


def chat_logprobs(scored: list[Scored], options: Options) -> Json:
    """Chat ``logprobs``: one entry per token, with the ``top_logprobs`` first of its top."""
    content = []
    for position in scored:
        shown = _shown(position.token, options.token_ids)
        top = list(_top(position, options.logprobs or 0, options.token_ids).items())[: options.logprobs]
        content.append({
            "token": shown,
            "logprob": position.logprob,
            "bytes": None,
            "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in top],
        })
    return {"content": content}


def prompt_logprobs(scored: list[Scored], count: int) -> list[Json | None]:
    """vLLM's ``prompt_logprobs``: null for the first prompt token (no context), then per token
    its own entry and the ``count`` most likely, ranked 1, 2, ..., keyed by token id (vLLM's
    JSON keys)."""
    out: list[Json | None] = [None]
    for position in scored:
        entries = {str(token_id(position.token)): _entry(position.logprob, position.rank, position.token)}
        for rank, (token, value) in enumerate(position.top[:count], 1):
            entries[str(token_id(token))] = _entry(value, rank, token)
        out.append(entries)
    return out


def _entry(value: float, rank: int, token: str) -> Json:
    return {"logprob": value, "rank": rank, "decoded_token": token}


def usage(prompt_tokens: int, completion_tokens: int) -> Json:
    """OpenAI ``usage`` counted in simulator tokens."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def choice(request: CompletionRequest, index: int, generation: Generation, scores: Scores | None) -> Json:
    """One non-streamed choice; ``scores`` are there when the request asked for any logprobs."""
    options, tokens = request.options, generation.tokens
    text = "".join(tokens)
    if request.chat:
        return {
            "index": index,
            "message": {"role": "assistant", "content": text},
            "logprobs": None if scores is None else chat_logprobs(scores.generated, options),
            "finish_reason": generation.finish_reason,
        }
    if options.echo_only:
        tokens, text = [], ""
    body: Json = {"index": index, "text": text, "logprobs": None, "finish_reason": generation.finish_reason}
    scored: list[Scored | None] = [] if scores is None else list(scores.generated[: len(tokens)])
    if options.echo:
        prompt = request.prompts[index].text
        prompt_tokens = tokenize(prompt)
        body["text"] = prompt + text
        tokens = prompt_tokens + tokens
        if scores is not None and prompt_tokens:
            scored = [None, *scores.prompt, *scored]
    if options.logprobs is not None:
        body["logprobs"] = completion_logprobs(tokens, scored, options, 0)
    if scores is not None and options.scores_prompt:
        count = options.logprobs if options.prompt_logprobs is None else options.prompt_logprobs
        body["prompt_logprobs"] = prompt_logprobs(scores.prompt, count or 0)
    if options.return_token_ids:  # the ids prompt_logprobs is keyed by, as vLLM returns them
        body["prompt_token_ids"] = [token_id(t) for t in tokenize(request.prompts[index].text)]
        body["token_ids"] = [token_id(t) for t in generation.tokens[: 0 if options.echo_only else None]]
    return body


def chunk_choice(
    request: CompletionRequest,
    index: int,
    tokens: list[str],
    scored: list[Scored] | None,
    offset: int,
    finish_reason: FinishReason | None,
    *,
    first: bool = False,
) -> Json:
    """One streamed choice carrying ``tokens`` (none, to close a choice), scored when the
    request asked for logprobs.

    ``first`` opens a chat choice with the assistant role, as OpenAI's first delta does.
    """
    options = request.options
    text = "".join(tokens)
    if request.chat:
        delta: Json = {}
        if first:
            delta["role"] = "assistant"
        if tokens or first:
            delta["content"] = text
        return {
            "index": index,
            "delta": delta,
            "logprobs": chat_logprobs(scored, options) if scored and tokens else None,
            "finish_reason": finish_reason,
        }
    out: Json = {
        "index": index,
        "text": text,
        "logprobs": completion_logprobs(tokens, list(scored), options, offset) if scored and tokens else None,
        "finish_reason": finish_reason,
    }
    if options.return_token_ids:  # the chunk's new ids, as vLLM and SGLang stream them
        out["token_ids"] = [token_id(t) for t in tokens]
    return out
