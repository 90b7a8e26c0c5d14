"""A run's stop, reaching the event loop of whichever eval is running when it comes.

Cells run in worker threads, and every eval's requests run in an asyncio loop of that thread
(lm-eval's own `asyncio.run`, the repetition eval's streams, ...). Setting a `threading.Event`
wakes none of them: an interrupted run used to wait while lm-eval retried requests against the
stopped engine and the long-generation eval backed off for ~12 s, and then printed the tracebacks
of lm-eval's orphaned request tasks after the verdict.

`Stop` is an Event whose `set` also calls back. `run_cell` binds the cell's stop to its thread
(`bound`); an eval's loop registers the cancellation of its main task (`until_stopped`, or `run`
in place of `asyncio.run`), so a stop ends the eval's requests within one turn of its loop, and the
eval raises `Interrupted`. Between evals, `check` does the same for work that is not a loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from evalkit.errors import Interrupted

T = TypeVar("T")

STOPPED = "stopped: the run was interrupted"


class Stop(threading.Event):
    """A `threading.Event` that calls back: `set` runs, in the setting thread, every callback
    registered with `calling` at that moment (each at most once)."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next = 0
        self._lock = threading.Lock()

    def set(self) -> None:
        with self._lock:
            super().set()
            callbacks, self._callbacks = list(self._callbacks.values()), {}
        for callback in callbacks:
            callback()

    @contextmanager
    def calling(self, callback: Callable[[], None]) -> Iterator[None]:
        """Call `callback` when the stop is set while the block runs (at once if it already is)."""
        with self._lock:
            key, self._next = self._next, self._next + 1
            if not self.is_set():
                self._callbacks[key] = callback
        if self.is_set():
            callback()
        try:
            yield
        finally:
            with self._lock:
                self._callbacks.pop(key, None)


_BOUND: contextvars.ContextVar[Stop | None] = contextvars.ContextVar("evalkit_stop", default=None)


@contextmanager
def bound(stop: Stop) -> Iterator[None]:
    """`stop` is the stop of the work this thread runs inside the block (and of the loops it starts:
    asyncio copies the context into them)."""
    token = _BOUND.set(stop)
    try:
        yield
    finally:
        _BOUND.reset(token)


def current() -> Stop | None:
    """The stop bound to this thread's work, if any: what a cell that runs its evals in threads
    of their own chains their stop to (run/wave.py)."""
    return _BOUND.get()


def check() -> None:
    """Raise `Interrupted` when this thread's stop is set: what a cell checks between its steps."""
    stop = _BOUND.get()
    if stop is not None and stop.is_set():
        raise Interrupted(STOPPED)


async def until_stopped(work: Coroutine[Any, Any, T]) -> T:
    """Await `work` in the running loop's current task, cancelled at once when this thread's stop is
    set; a cancellation by the stop is raised as `Interrupted`. Without a bound stop, just `work`."""
    stop = _BOUND.get()
    if stop is None:
        return await work
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None, "until_stopped runs inside a task"

    def cancel() -> None:
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:  # the loop closed after the block ended: nothing left to cancel
            pass

    with stop.calling(cancel):
        try:
            return await work
        except asyncio.CancelledError:
            if stop.is_set():
                raise Interrupted(STOPPED) from None
            raise


def run(work: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(work)`, ended at once (`Interrupted`) when this thread's stop is set."""
    return asyncio.run(until_stopped(work))
