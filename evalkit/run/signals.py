"""SIGINT and SIGTERM during a run: raised as `Interrupted`, or held for a moment that must not be cut.

Ctrl-C and a scheduler's SIGTERM mean the same thing, stop cleanly: both become `Interrupted`
(evalkit/errors.py), so the `finally` blocks on the way up stop every engine or cancel every job.
Around a whole command line SIGTERM is Ctrl-C too (`terminate_as_interrupt`), and once the
command is done neither is handled any more (`ignore_stop_signals`).

Python runs a signal's handler between two bytecodes of the main thread, wherever it is, a
finalizer included (an object's `__del__`, a weakref callback, a generator closed by the garbage
collector). An exception cannot leave a finalizer: Python prints `Exception ignored in ...` and
goes on, and the stop would be lost (a CI run saw a SIGTERM while the report was written end in
exit 0 and that message). While a handler here is set, such a stop is delivered again
(`_redelivered_from_finalizers`), and raised in the ordinary code that runs next.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from evalkit.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

REDELIVER_S = 0.01
"""How long after a finalizer swallowed a stop it is delivered again: long enough for the
finalizer to have returned (the thread that delivers it waits for the GIL), too short to be
noticed. Swallowed again, it is delivered again."""


class TerminatedAsInterrupt(KeyboardInterrupt):
    """SIGTERM under `terminate_as_interrupt`: a KeyboardInterrupt that knows its signal, so that a
    swallowed one is sent again as SIGTERM (a process started in the background by a shell
    ignores SIGINT: sent as SIGINT, it would be lost)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise TerminatedAsInterrupt


def _stop_signal_of(exc: BaseException | None) -> int | None:
    """The signal a swallowed exception stood for: one that a handler here raised, or Python's
    Ctrl-C, or None."""
    if isinstance(exc, Interrupted) and exc.signum is not None:
        return exc.signum
    if isinstance(exc, TerminatedAsInterrupt):
        return int(signal.SIGTERM)
    if isinstance(exc, KeyboardInterrupt):
        return int(signal.SIGINT)
    return None


@contextmanager
def _redelivered_from_finalizers() -> Iterator[None]:
    """Inside the block, a stop that a finalizer swallowed is sent again to the main thread a moment
    later, a real signal so that a wait in progress (a sleep, a join) is cut short as by the first;
    any other exception in a finalizer goes to the hook that was there before."""
    previous = sys.unraisablehook
    main = threading.main_thread().ident

    def hook(unraisable: Any) -> None:
        signum = _stop_signal_of(unraisable.exc_value)
        if signum is None:
            previous(unraisable)
            return
        timer = threading.Timer(REDELIVER_S, signal.pthread_kill, (main, signum))
        timer.daemon = True
        timer.start()

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


@contextmanager
def interrupts_raise() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into `Interrupted` inside the block (main thread only, like any
    signal handler); the previous handlers come back after it."""

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name, signum=signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        with _redelivered_from_finalizers():
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


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt (`TerminatedAsInterrupt`) inside the block, as Ctrl-C does.

    A CI runner's timeout, cron's `kill` or `timeout(1)` then end a command the way Ctrl-C does at
    every moment of it, between runs included (writing the verdict, printing the report), with
    exit 130. Python's default for SIGTERM would end the process on the spot: no word, code 143.
    """
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        with _redelivered_from_finalizers():
            yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def ignore_stop_signals() -> None:
    """From now until the process exits, SIGINT and SIGTERM are ignored: the command has printed its
    output and decided its exit code, nothing is left to stop, and a handler run while the
    interpreter shuts down would print a traceback after the output."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
