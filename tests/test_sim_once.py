"""The simulated model's corpus tables are built once per process, even when the first requests
of a run arrive together in the server's worker threads (evalkit/sim/once.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from evalkit.sim.once import BuiltOnce


def test_threads_asking_at_once_share_one_build() -> None:
    builds: list[int] = []

    def build() -> list[int]:
        """A table."""
        builds.append(threading.get_ident())
        time.sleep(0.05)  # long enough for every thread to ask while the first builds
        return [1, 2, 3]

    table = BuiltOnce(build)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: table(), range(8)))
    assert len(builds) == 1 and all(g is got[0] for g in got) and got[0] == [1, 2, 3]
    assert table.__doc__ == "A table."
