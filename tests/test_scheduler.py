"""run/scheduler.py: how many devices a cell needs, and a pool that hands out disjoint sets.

A box declares `devices.count`; a cell gets the lowest-numbered free devices it needs when fewer
than `max_parallel` cells run. Without declared devices, one cell at a time.
"""

from __future__ import annotations

import threading
import time

import pytest

from evalkit.config import EngineSettings
from evalkit.errors import ConfigError
from evalkit.run import scheduler
from evalkit.run.scheduler import DevicePool, device_need


@pytest.fixture(autouse=True)
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused try_acquire waits one slice (for Ctrl-C responsiveness); keep the tests quick."""
    monkeypatch.setattr(scheduler, "WAIT_SLICE_S", 0.001)


@pytest.mark.parametrize(
    ("settings", "need"),
    [({}, 1), ({"tensor_parallel": 8}, 8), ({"data_parallel": 2}, 2), ({"tensor_parallel": 4, "data_parallel": 2}, 8),
     ({"tensor_parallel": 8, "devices": 4}, 4), ({"devices": 1, "data_parallel": 8}, 1)],
)
def test_device_need_is_explicit_devices_else_tensor_times_data_parallel(settings: dict, need: int) -> None:
    assert device_need(EngineSettings(**settings)) == need


def test_cells_get_disjoint_lowest_numbered_device_sets() -> None:
    pool = DevicePool(8, max_parallel=8)
    assert pool.try_acquire(4) == (0, 1, 2, 3)
    assert pool.try_acquire(2) == (4, 5)
    assert pool.try_acquire(4) is None  # two free: a 4-device cell waits
    assert pool.try_acquire(2) == (6, 7)
    assert pool.try_acquire(1) is None


def test_released_devices_are_handed_out_again() -> None:
    pool = DevicePool(4, max_parallel=4)
    first, second = pool.try_acquire(2), pool.try_acquire(2)
    assert pool.try_acquire(1) is None
    pool.release(first)
    assert pool.try_acquire(1) == (0,)
    assert pool.try_acquire(1) == (1,)
    pool.release(second)
    pool.release((0,))
    pool.release((1,))
    assert pool.try_acquire(4) == (0, 1, 2, 3)


def test_max_parallel_limits_running_cells_even_with_free_devices() -> None:
    pool = DevicePool(8, max_parallel=2)
    held = [pool.try_acquire(1), pool.try_acquire(1)]
    assert held == [(0,), (1,)]
    assert pool.try_acquire(1) is None
    pool.release(held[0])
    assert pool.try_acquire(1) == (0,)


def test_without_declared_devices_cells_run_one_at_a_time_on_no_device_set() -> None:
    pool = DevicePool(None, max_parallel=8)
    assert pool.max_parallel == 1
    assert pool.try_acquire(8) == ()
    assert pool.try_acquire(1) is None
    pool.release(())
    assert pool.try_acquire(1) == ()


def test_a_cell_needing_more_devices_than_the_box_is_refused_with_a_clear_error() -> None:
    pool = DevicePool(8, max_parallel=8)
    pool.check("tp16-full", 8)  # exactly the box: fine
    with pytest.raises(ConfigError, match=r"^cell tp16-full: needs 16 devices, devices\.count is 8$"):
        pool.check("tp16-full", 16)
    assert pool.try_acquire(16) is None  # and the pool itself never hands out devices it lacks


def test_without_declared_devices_any_need_is_accepted() -> None:
    DevicePool(None, max_parallel=1).check("tp64", 64)


def test_a_waiting_cell_starts_once_another_releases() -> None:
    pool = DevicePool(2, max_parallel=2)
    running = pool.try_acquire(2)
    waiting_started = threading.Event()
    got: list[tuple[int, ...]] = []

    def waiter() -> None:
        waiting_started.set()
        while (devices := pool.try_acquire(2)) is None:
            pass
        got.append(devices)

    thread = threading.Thread(target=waiter)
    thread.start()
    waiting_started.wait()
    assert got == []  # nothing is free while `running` holds both devices
    pool.release(running)
    thread.join(timeout=10)
    assert not thread.is_alive() and got == [(0, 1)]


def test_concurrent_cells_never_share_a_device_nor_exceed_max_parallel() -> None:
    pool = DevicePool(6, max_parallel=3)
    guard = threading.Lock()
    in_use: set[int] = set()
    running = [0]
    peak = [0]
    problems: list[str] = []

    def cell(need: int) -> None:
        for _ in range(60):
            while (devices := pool.try_acquire(need)) is None:
                pass
            with guard:
                if len(devices) != need:
                    problems.append(f"asked {need}, got {devices}")
                if in_use & set(devices):
                    problems.append(f"{devices} overlaps {in_use}")
                in_use.update(devices)
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.0002)  # the cell "runs": other threads get the GIL meanwhile
            with guard:
                in_use.difference_update(devices)
                running[0] -= 1
            pool.release(devices)

    threads = [threading.Thread(target=cell, args=(need,)) for need in (1, 2, 3, 1, 2, 1, 4, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert problems == []
    assert 1 <= peak[0] <= 3
    assert pool.try_acquire(6) == (0, 1, 2, 3, 4, 5)  # every device came back
