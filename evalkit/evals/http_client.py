"""How the HTTP evals talk to a server: one pooled client, bounded concurrency with progress,
and one retry policy (which failures are transient, how long to back off, how often to try).

repetition.py (streams) and divergence.py (prefills) each wrote these once; one home keeps
their retries alike, so a flaky server fails or recovers the same way whichever eval asked."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar, cast

import httpx

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
"""Statuses worth asking again: overloaded (429) or failing for now (5xx); repetition.py and
divergence.py cite where the engines answer their transient errors with these."""
MAX_ATTEMPTS = 4
"""Tries per request before a transient failure is the cell's error."""

T = TypeVar("T")
R = TypeVar("R")


def pooled_client(base_url: str, concurrency: int, timeout: float) -> httpx.AsyncClient:
    """A client with one connection per request in flight, so no request waits for a socket."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits)


def is_transient(error: Exception) -> bool:
    """A failure with no HTTP status (connection, a broken stream or body) or a transient status."""
    status = error.response.status_code if isinstance(error, httpx.HTTPStatusError) else None
    return status is None or status in TRANSIENT_STATUS


async def back_off(attempt: int) -> None:
    """Exponential, capped at 8 s, jittered by +-50% so retries of many requests do not align."""
    await asyncio.sleep(min(8.0, 0.5 * 2**attempt) * (0.5 + random.random()))


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

    async def _one(self, item: T) -> R:
        async with self._semaphore:
            result = await self._work(item)
        self.done += 1
        if self._progress:
            self._progress(self.done, self._total)
        return result
