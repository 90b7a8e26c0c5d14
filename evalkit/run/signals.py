"""SIGINT and SIGTERM during a run: raised as `Interrupted`, or held for a moment that must not be cut.

Ctrl-C and a scheduler's SIGTERM mean the same thing, stop cleanly: both become `Interrupted`
(evalkit/errors.py), so the `finally` blocks on the way up stop every engine or cancel every job.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from evalkit.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interrupts_raise() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into `Interrupted` inside the block (main thread only, like any
    signal handler); the previous handlers come back after it."""

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM for the moment of a submission or a cancellation, then deliver them.

    A Ctrl-C between sbatch accepting a job and evalkit recording its id would leave a job that
    nobody cancels. A signal that arrives inside the block is raised again when it ends, so the
    usual handler (`Interrupted`) runs with the job already on record. Outside the main thread
    (where no handler can be set) the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if held:
            signal.raise_signal(held[0])
