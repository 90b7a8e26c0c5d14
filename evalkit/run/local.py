"""The local executor: cells on this machine, one worker thread each, in plan order.

Without declared devices cells run one at a time. With them (`devices: {count: N}`), a cell starts
as soon as the device pool (run/scheduler.py) has enough free devices and fewer than
`max_parallel` cells run, each on a disjoint set, and no running cell holds a host resource it
needs too (a port or cache folder its engine cannot be given alone: engine/isolation.py).
`timeouts.run` skips the cells that would start after the run's budget and cuts the budget of
those that start before it. On Ctrl-C or SIGTERM the progress says at once which engines stop
(the `run` row), the running evals are cancelled (evals/cancel.py) and every engine is stopped at
once, in parallel, before `Interrupted` goes on up; a second signal meanwhile kills them outright.
"""

from __future__ import annotations

import threading
import time

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.engine.isolation import shared_resources
from evalkit.engine.sources import ResolvedSource
from evalkit.errors import Interrupted
from evalkit.evals.cancel import Stop
from evalkit.run.cell import CellControl, CellJob, run_cell
from evalkit.run.executor import OnCellDone
from evalkit.run.options import Progress, RunOptions
from evalkit.run.scheduler import WAIT_SLICE_S, DevicePool
from evalkit.store import RunStore
from evalkit.store.records import FINISHED, CellError, failed_cell

STOP_WAIT_S = 60.0
"""How long an interrupted run waits for its engines to stop (each may need its SIGKILL grace)."""
WORKER_WAIT_S = 2.0
"""How long it then waits for the cells' workers: a cancelled eval ends within a turn of its loop.
Work that no stop can cut (importing lm-eval and building its requests, 10 s on a loaded box, or a
plugin eval's own blocking calls) is left to end with the process: its cell is not kept either
way (no cell.json), and waiting for it would only delay the verdict."""
RUN_ROW = "run"
"""The progress row that says, the moment a signal arrives, what the run stops."""
RUN_BUDGET_USED = "the run budget was used up before this cell started"


class LocalExecutor:
    """Cells on this machine (the `Executor` protocol, run/executor.py)."""

    def __init__(self, config: MatrixConfig, store: RunStore, options: RunOptions, progress: Progress,
                 sources: dict[str, ResolvedSource]) -> None:
        self.config = config
        self.store = store
        self.options = options
        self.progress = progress
        self.sources = sources
        self.pool = DevicePool(config.devices.count if config.devices else None, options.max_parallel)

    def preflight(self, todo: list[Cell]) -> None:
        """Nothing to ask beyond the run's own checks (devices, launches, sources, evals)."""

    def run(self, todo: list[Cell], on_cell_done: OnCellDone | None = None) -> None:
        """Start each cell when devices free up, wait for all; stop every engine on an interrupt."""
        stop = Stop()
        controls: dict[str, CellControl] = {}
        workers: list[threading.Thread] = []
        timeouts = self.config.timeouts
        deadline = time.monotonic() + timeouts.run if timeouts.run else None

        def worker(job: CellJob, devices: tuple[int, ...], holds: frozenset[str], control: CellControl) -> None:
            try:
                record = run_cell(job, control)
                if on_cell_done and record.status in FINISHED:
                    on_cell_done(record.dump())
            finally:
                self.pool.release(devices, holds)

        try:
            for cell in todo:
                shared = shared_resources(self.config, cell) if self.pool.max_parallel > 1 else {}
                holds = frozenset(shared)
                if busy := self.pool.busy(holds):
                    self.progress.update(cell.id, "waiting", "; ".join(shared[r] for r in sorted(busy))
                                         + ": not side by side with a cell that does too")
                while (devices := self.pool.try_acquire(cell.topology.devices, holds)) is None:
                    pass
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    self.pool.release(devices, holds)
                    self._skip(cell, RUN_BUDGET_USED)
                    continue
                budgets = [b for b in (timeouts.cell, remaining) if b is not None]
                control = controls[cell.id] = CellControl(stop, min(budgets) if budgets else None)
                thread = threading.Thread(target=worker, args=(self._job(cell, devices), devices, holds, control),
                                          name=cell.id, daemon=True)
                thread.start()
                workers.append(thread)
            for thread in workers:
                while thread.is_alive():
                    thread.join(WAIT_SLICE_S)
        except (KeyboardInterrupt, Interrupted) as e:
            _stop_all(stop, controls, workers, self.progress, str(e) or "interrupted")
            raise

    def _job(self, cell: Cell, devices: tuple[int, ...]) -> CellJob:
        return CellJob(self.config, cell, self.store, self.progress, limit=self.options.limit,
                       base_url=self.options.base_url, source=self.sources.get(cell.id),
                       devices=devices if self.config.devices else None)

    def _skip(self, cell: Cell, reason: str) -> None:
        self.store.write_cell(cell.id, failed_cell(cell, CellError(message=reason), status="skipped").dump())
        self.progress.update(cell.id, "skipped", reason)


def _stop_all(stop: Stop, controls: dict[str, CellControl], workers: list[threading.Thread], progress: Progress,
              why: str) -> None:
    """Say what stops, cancel every eval and stop every engine at once (in parallel: each may need
    its SIGKILL grace), then wait a little for the workers. A second signal meanwhile SIGKILLs every
    engine and ends the wait: the interrupt goes on up all the same."""
    engines = [(cell_id, c.engine) for cell_id, c in controls.items() if c.engine is not None]
    running = [cell_id for cell_id, engine in engines if engine.running]
    what = f"the engine of {', '.join(running)}" if running else "the run (no engine is running)"
    progress.update(RUN_ROW, "interrupted", f"{why}: stopping {what}; a second Ctrl-C or SIGTERM stops at once")
    stop.set()
    stoppers = [threading.Thread(target=engine.stop, daemon=True) for _, engine in engines]
    for t in stoppers:
        t.start()
    try:
        _join(stoppers, STOP_WAIT_S)
        _join(workers, WORKER_WAIT_S)
    except (KeyboardInterrupt, Interrupted):
        for _, engine in engines:
            engine.kill()


def _join(threads: list[threading.Thread], within_s: float) -> None:
    """Wait for `threads` up to `within_s` in all, in short slices so a second signal is heard at once."""
    deadline = time.monotonic() + within_s
    for t in threads:
        while t.is_alive() and time.monotonic() < deadline:
            t.join(min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic())))
