"""A table the simulated model builds once per process, on first use, however many threads ask.

The server computes generations and scores in worker threads (sim/server.py), so the first
requests of a run arrive together: with `functools.cache` each of them built the corpus tables
(about a second of CPU each) side by side, 24 s of a demo cell's simulator CPU on 2 cores. Here
the first caller builds and the others wait for its table.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

_UNBUILT = object()


class BuiltOnce(Generic[T]):
    """`build()`'s value, computed by the first call and returned to every later one."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._value: object = _UNBUILT
        self.__doc__ = build.__doc__

    def __call__(self) -> T:
        if self._value is _UNBUILT:
            with self._lock:
                if self._value is _UNBUILT:
                    self._value = self._build()
        return self._value  # type: ignore[return-value]
