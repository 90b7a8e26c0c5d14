"""How the HTTP evals talk to a server: one pooled client, bounded concurrency with progress,
and one retry policy (which failures are transient, how long to back off, how often to try),
applied by one loop, `with_retries`.

repetition.py (streams), divergence.py (prefills) and consistency.py (short generations) each
wrote these once; one home keeps their retries alike, so a flaky server fails or recovers the
same way, with the same message, whichever eval asked."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

import httpx

from evalkit import waits
from evalkit.errors import EvalError, StreamBroken
from evalkit.evals.base import Server

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
"""Statuses worth asking again: overloaded (429) or failing for now (5xx); repetition.py and
divergence.py cite where the engines answer their transient errors with these."""
MAX_ATTEMPTS = 4
"""Tries per request before a transient failure is the cell's error."""
RETRIED: tuple[type[Exception], ...] = (httpx.TransportError, httpx.HTTPStatusError, StreamBroken,
                                        json.JSONDecodeError, UnicodeDecodeError)
"""The failures of a request on the wire, which `with_retries` turns into a retry or an EvalError:
no answer (connection, timeout), an error status, a stream cut before `[DONE]` or ended by an
error event (`StreamBroken`), a body or stream chunk that is not JSON. Anything else is a bug of
evalkit's (a detector's ValueError) and is raised as it is, not retried."""

T = TypeVar("T")
R = TypeVar("R")


def pooled_client(server: Server, concurrency: int, timeout: float) -> httpx.AsyncClient:
    """A client of `server` with one connection per request in flight, so no request waits for a
    socket (over the server's own transport, where it has one: `Server.transport`)."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(base_url=server.base_url, timeout=timeout, limits=limits, transport=server.transport)


def is_transient(error: Exception) -> bool:
    """A failure with no HTTP status (connection, a broken stream or body) or a transient status."""
    status = error.response.status_code if isinstance(error, httpx.HTTPStatusError) else None
    return status is None or status in TRANSIENT_STATUS


async def back_off(attempt: int) -> None:
    """Exponential, capped (evalkit/waits.py), jittered by +-50% so retries of many requests do
    not align."""
    await asyncio.sleep(waits.back_off_s(attempt, 0.5 + random.random()))


@dataclass
class Tries:
    """One request's tries so far, for the try under way: what the earlier ones failed with (a
    sample records how often it was asked, and repetition.py how many streams ended in an error
    event)."""

    failed: list[Exception] = field(default_factory=list)

    @property
    def attempt(self) -> int:
        """This try's number, from 1."""
        return len(self.failed) + 1


async def with_retries(request: Callable[[Tries], Awaitable[R]], what: str) -> R:
    """`request` until it returns, retrying its `RETRIED` failures that are transient with
    `back_off`, at most MAX_ATTEMPTS tries. A failure that is not transient fails at once, a
    transient one still there at the last try fails with how often it was tried: both as an
    EvalError naming `what` (the eval and the item: "divergence: text gsm8k-train-0") and
    carrying the server's own message."""
    tries = Tries()
    while True:
        try:
            return await request(tries)
        except RETRIED as e:
            transient = is_transient(e)
            if not transient or tries.attempt == MAX_ATTEMPTS:
                suffix = f" (attempt {tries.attempt} of {MAX_ATTEMPTS})" if transient else ""
                raise EvalError(f"{what}: {type(e).__name__}: {e}{suffix}") from e
            await back_off(tries.attempt)
            tries.failed.append(e)


class Bounded(Generic[T, R]):
    """`work` on many items with at most `concurrency` in flight; `progress(done, total)` after
    each, counted across every `map` (an eval that asks the same items again keeps one count)."""

    def __init__(self, work: Callable[[T], Awaitable[R]], concurrency: int, total: int,
                 progress: Callable[[int, int], None] | None) -> None:
        self._work, self._progress, self._total = work, progress, total
        self._semaphore = asyncio.Semaphore(concurrency)
        self.done = 0

    async def map(self, items: Iterable[T]) -> list[R]:
        """The results in the order of `items`; on failure, the error of the first failing item in
        that order, so the error names the same item whatever finished first."""
        results = await asyncio.gather(*(self._one(item) for item in items), return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed
        return cast(list[R], results)

    async def judged(self, items: Sequence[T], stop_when: Callable[[list[R]], str | None]) -> tuple[list[R], str | None]:
        """The results of `items`, submitted in their order, judged in that order as they come:
        after each one that extends the finished prefix, `stop_when(prefix)`; when it gives a
        reason, the rest are cancelled and (the prefix, the reason) returned, else (all, None).
        What finished beyond the prefix is never judged: results in completion order would
        favour the quick ones (a collapsed generation runs to its limit). A failing item fails
        the whole, the rest cancelled."""
        tasks = [asyncio.ensure_future(self._one(item)) for item in items]  # in order: the semaphore is FIFO
        results: list[R] = []
        try:
            for index, task in enumerate(tasks):
                results.append(await task)
                if (index + 1 == len(tasks) or not tasks[index + 1].done()) and (why := stop_when(results)):
                    return results, why
            return results, None
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, item: T) -> R:
        async with self._semaphore:
            result = await self._work(item)
        self.done += 1
        if self._progress:
            self._progress(self.done, self._total)
        return result
