"""A stop (SIGINT, SIGTERM) is never lost: one that arrives while a finalizer runs, where Python
cannot raise it and prints `Exception ignored` instead, is raised again in the code that runs next
(evalkit/run/signals.py). A CI run lost a SIGTERM that way while the report was written."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from evalkit.errors import Interrupted
from evalkit.run.signals import interrupts_raise, terminate_as_interrupt


class _SignalledWhileFinalized:
    """An object whose finalizer receives `sig`: the handler runs inside `__del__`."""

    def __init__(self, sig: signal.Signals) -> None:
        self.sig = sig

    def __del__(self) -> None:
        signal.raise_signal(self.sig)


def _drop_and_wait(sig: signal.Signals) -> None:
    """Drop an object whose finalizer is signalled, then wait as a run's next lines of code would.

    In short sleeps: a signal sent again before a C call starts (the 10 ms can pass first on a
    loaded box) interrupts no wait and runs its handler only when the call returns, so one long
    sleep made this test fail 1 run in 20 that way, the stop merely late. A lost stop still lets
    the whole loop run and nothing is raised."""
    _SignalledWhileFinalized(sig)
    for _ in range(500):
        time.sleep(0.01)


def test_a_stop_a_finalizer_swallowed_is_raised_in_the_code_that_runs_next(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    with pytest.raises(Interrupted, match="SIGTERM"), interrupts_raise():
        _drop_and_wait(signal.SIGTERM)
    assert time.monotonic() - started < 2
    assert "Exception ignored" not in capsys.readouterr().err


def test_a_sigterm_a_finalizer_swallowed_around_a_command_is_still_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    """Sent again as SIGTERM, not SIGINT: a process a shell started in the background ignores
    SIGINT (here, SIGINT ignored stands for that)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt), terminate_as_interrupt():
            _drop_and_wait(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "Exception ignored" not in capsys.readouterr().err


def test_other_exceptions_in_a_finalizer_still_reach_the_previous_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def __del__(self) -> None:
            raise ValueError("broken finalizer")

    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable.exc_value))
    with interrupts_raise():
        Broken()
    assert [str(e) for e in seen] == ["broken finalizer"]
