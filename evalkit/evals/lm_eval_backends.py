"""The lm-eval backends evalkit registers, `evalkit-completions` and `evalkit-chat-completions`:
lm-eval's own local-completions and local-chat-completions clients (lm_eval/models/
openai_completions.py) plus a record, per prompt, of what lm-eval drops: the server's finish
reason, token counts, attempts, and a request that failed for good (unscorable, not wrong).
Split from lm_eval_adapter.py, which calls lm-eval with them.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalkit.evals import cancel
from evalkit.wire import Wire


@dataclass
class ResponseMeta:
    """What lm-eval's client drops: per prompt, the server's finish reason (canonical, through the
    engine's map, and raw as `engine_finish_reason`), usage and attempts."""

    by_prompt: dict[str, dict[str, Any]] = field(default_factory=dict)
    wire: Wire = field(default_factory=Wire)
    """The engine's dialect: its raw finish reasons -> evalkit's (ATOM answers `max_tokens`)."""
    progress: Callable[[int], None] | None = None
    """Called with the number of answers received so far (the live view's `gsm8k n/N`)."""
    answered: int = 0
    allowed_failures: int = 0
    """Requests that may fail for good (every retry spent) and be recorded as unscorable rather
    than fail the eval: the caller's share of its questions (GSM8K's `max_unscorable`); one
    more fails it at once, so a dead engine costs one round of retries, not one per question."""
    failures: int = 0
    first_request: float | None = None
    last_answer: float | None = None
    """monotonic() of the first request and the last answer: the request phase, for timings."""

    def record(self, prompt: str, choice: dict[str, Any], usage: dict[str, Any] | None) -> None:
        entry = self.by_prompt.setdefault(prompt, {"attempts": 0})
        entry["completion_tokens"] = (usage or {}).get("completion_tokens")
        entry["prompt_tokens"] = (usage or {}).get("prompt_tokens")
        if "finish_reason" not in entry:  # first answer for this prompt (a retry answers again)
            self.answered += 1
        raw = choice.get("finish_reason")
        entry["finish_reason"] = self.wire.finish(raw)
        entry["engine_finish_reason"] = raw
        self.last_answer = time.monotonic()
        if self.progress is not None:
            self.progress(self.answered)

    def fail(self, prompt: str, error: BaseException, max_retries: int) -> bool:
        """A request failed: True when it was its last attempt and is recorded as unscorable
        (its answer stays empty, its `error` says why), False when it is retried or is one
        failure too many (the caller raises)."""
        entry = self.by_prompt.setdefault(prompt, {"attempts": 0})
        if entry["attempts"] < max_retries or self.failures >= self.allowed_failures:
            return False
        self.failures += 1
        timed_out = isinstance(error, (TimeoutError, asyncio.TimeoutError))
        entry["error"] = "timeout" if timed_out else f"engine error: {type(error).__name__}: {str(error)[:200]}"
        return True

    def attempt(self, prompt: str) -> None:
        if self.first_request is None:
            self.first_request = time.monotonic()
        self.by_prompt.setdefault(prompt, {"attempts": 0})["attempts"] += 1

    @property
    def requests_s(self) -> float | None:
        if self.first_request is None or self.last_answer is None:
            return None
        return round(self.last_answer - self.first_request, 3)


_META: contextvars.ContextVar[ResponseMeta | None] = contextvars.ContextVar("evalkit_meta", default=None)
_PROMPT: contextvars.ContextVar[str | None] = contextvars.ContextVar("evalkit_prompt", default=None)


def prompt_key(messages: Any) -> str:
    """The key of one request's prompt in `ResponseMeta.by_prompt` (text, or the chat JSON)."""
    if isinstance(messages, list) and len(messages) == 1:
        messages = messages[0]
    return messages if isinstance(messages, str) else json.dumps(messages, sort_keys=True, default=str)


def _register_backends() -> None:
    """`evalkit-completions` / `evalkit-chat-completions`: lm-eval's backends plus metadata capture."""
    from lm_eval.api.registry import MODEL_REGISTRY, register_model
    from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI

    if "evalkit-completions" in MODEL_REGISTRY:
        return

    class _Recording:
        async def amodel_call(self, session: Any, sem: Any, messages: Any, **kwargs: Any) -> Any:  # noqa: D401
            key = prompt_key(messages)
            meta = _META.get()
            if meta is not None:
                meta.attempt(key)
            token = _PROMPT.set(key)
            try:
                return await super().amodel_call(session, sem, messages, **kwargs)  # type: ignore[misc]
            except Exception as e:  # BaseException (a cancelled task, Ctrl-C) always propagates
                if meta is None or not meta.fail(key, e, self.max_retries):  # type: ignore[attr-defined]
                    raise
                return [""] * (len(messages) if isinstance(messages, list) else 1)
            finally:
                _PROMPT.reset(token)

        async def get_batched_requests(self, *args: Any, **kwargs: Any) -> Any:
            """lm-eval's requests, in the loop its `asyncio.run` started: cancelled when the run stops
            (`cancel.until_stopped`), their orphans quiet (`_quiet_orphans`)."""
            asyncio.get_running_loop().set_exception_handler(_quiet_orphans)
            return await cancel.until_stopped(super().get_batched_requests(*args, **kwargs))  # type: ignore[misc]

        def parse_generations(self, outputs: Any, **kwargs: Any) -> list[str]:
            meta, key = _META.get(), _PROMPT.get()
            if meta is not None and key is not None and isinstance(outputs, dict):
                for choice in outputs.get("choices") or []:
                    meta.record(key, choice, outputs.get("usage"))
            generations: list[str] = super().parse_generations(outputs, **kwargs)  # type: ignore[misc]
            return generations

    register_model("evalkit-completions")(type("EvalkitCompletions", (_Recording, LocalCompletionsAPI), {}))
    register_model("evalkit-chat-completions")(type("EvalkitChatCompletions", (_Recording, LocalChatCompletion), {}))


def _quiet_orphans(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's error handler while lm-eval's requests run: a request task whose failure nobody
    awaited is not reported again.

    lm-eval awaits its request tasks in turn (`tqdm_asyncio.gather`) and stops at the first that
    fails; the others' failures (every request of a stopped or crashed engine) are reported by
    asyncio when the tasks are collected, often after evalkit printed its verdict: ~1,900 lines of
    `Task exception was never retrieved` for one interrupted cell. Each was already logged by
    lm-eval to the cell's log, and the first is the eval's error. Anything else goes to asyncio.
    """
    if context.get("message") != "Task exception was never retrieved":
        loop.default_exception_handler(context)
