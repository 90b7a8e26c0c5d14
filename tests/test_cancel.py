"""A run's stop reaching the work it cuts (evals/cancel.py): `Stop` calls back whoever registered,
and an eval's coroutine is cancelled at once, as `Interrupted`, when its thread's stop is set
from another thread (the executor's, on Ctrl-C)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from evalkit.errors import Interrupted
from evalkit.evals import cancel
from evalkit.evals.cancel import STOPPED, Stop


def test_setting_a_stop_calls_each_registered_callback_once_and_a_late_one_at_once() -> None:
    stop, heard = Stop(), []
    with stop.calling(lambda: heard.append("a")), stop.calling(lambda: heard.append("b")):
        stop.set()
        stop.set()  # a second set calls nobody again
    assert sorted(heard) == ["a", "b"]
    with stop.calling(lambda: heard.append("late")):  # registered after the stop: called at once
        assert heard[-1] == "late"


def test_a_callback_whose_block_ended_is_not_called() -> None:
    stop, heard = Stop(), []
    with stop.calling(lambda: heard.append("gone")):
        pass
    stop.set()
    assert heard == [] and stop.is_set()


def test_work_bound_to_a_stop_ends_at_once_as_interrupted_when_another_thread_sets_it() -> None:
    stop = Stop()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    threading.Thread(target=lambda: (started.wait(10), stop.set()), daemon=True).start()
    with cancel.bound(stop), pytest.raises(Interrupted, match=STOPPED):
        cancel.run(forever())


def test_without_a_bound_stop_the_work_just_runs() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert cancel.run(answer()) == 42
    with cancel.bound(Stop()):
        assert cancel.run(answer()) == 42  # a stop never set changes nothing


def test_a_cancellation_that_is_not_the_stop_s_stays_a_cancellation() -> None:
    async def cancelled_by_someone_else() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_soon(task.cancel)
        await asyncio.sleep(3600)

    with cancel.bound(Stop()), pytest.raises(asyncio.CancelledError):
        cancel.run(cancelled_by_someone_else())
