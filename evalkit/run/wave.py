"""A cell's evals on its one live engine: in one wave (all at once) or apart (one after another).

An engine start costs minutes and a cell's evals idle most of it when they run one after
another: GSM8K's short answers leave the engine's batch half empty while the long generations
wait their turn, and the cell then waits on the slowest long generation alone. `run.evals: wave`
(the default) runs every eval of the cell at the same time, each in a thread of its own (each
has its own event loop: lm-eval's client, the HTTP evals' pooled clients), the evals that
declare `wave_first` (the long generations: they finish last) started first.

The engine's concurrency budget: `run.concurrency`, else the cell's `max_num_seqs`, else none
(each eval keeps its own). When the evals ask more in flight together than the budget, each
gets its share of it in proportion to what it asks alone (at least one): an eval's in-flight
limit is its settings' `concurrency` or `num_concurrent` (every built-in names it so; a plugin
with neither keeps its own). An engine is not batch-invariant: other company in a step can flip
a near-tie, so a wave may move marks within a healthy cell's flip rate, and a config whose
verdict must not depend on it runs `apart` (concurrency is itself an accuracy axis).

What stays ordered: an eval that reads its own cell's results of the others (divergence with
`generations` scores the cell's long generations: `ReadsEarlierCells`) runs after the wave, and
one that scans the texts the others generated (`ScansEarlierTexts`: the collapse detector over
GSM8K's answers) scans them when the wave is over. Each eval's span is its own wall time
(`EvalRun.wall_s`); the spans overlap. The engine's `/metrics` are scraped around the whole wave
(one window, `engine_metrics.wave`), since concurrent evals' counters cannot be told apart.

A failing eval stops the others (their requests cancelled: evals/cancel.py) and is the cell's
error, with every eval that finished before it kept; a stop of the run reaches every thread.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell
from evalkit.errors import Interrupted
from evalkit.evals import cancel
from evalkit.evals.base import SETUP_KEY, Eval, EvalContext, EvalResult, EvalSettings, Server, fingerprint
from evalkit.evals.capabilities import ReadsEarlierCells, ScansEarlierTexts
from evalkit.evals.engine_figures import scraping_enabled
from evalkit.profiles import get_profile
from evalkit.run.engine_report import EngineScrapes
from evalkit.run.parts import CellPart, EvalRun, Phase
from evalkit.run.stopping import stop_rule
from evalkit.store import RunStore, write_jsonl

IN_FLIGHT_FIELDS = ("concurrency", "num_concurrent")
"""The settings field holding an eval's in-flight limit, by the names the built-ins use."""
WAVE = "wave"
"""The name of the wave's one scrape window in cell.json `engine_metrics` and `throughput`."""


class CellJob(Protocol):
    """What this module reads of run/cell.py's `CellJob` (which runs `run_evals`, so it cannot be
    imported here)."""

    @property
    def config(self) -> MatrixConfig: ...
    @property
    def cell(self) -> Cell: ...
    @property
    def cell_dir(self) -> Path: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def store(self) -> RunStore: ...

    def update(self, state: str, detail: str = "") -> None: ...

    def eval_context(self, server: Server, ev: Eval, only: tuple[str, ...] | None = None,
                     earlier: dict[str, EvalResult] | None = None) -> EvalContext: ...


@dataclass(frozen=True)
class Planned:
    """One eval of a cell as it runs: its settings with its share of the budget applied."""

    ev: Eval
    settings: EvalSettings
    asked: tuple[str, int] | None = None
    """(field, limit) the config asks, where the wave gave the eval a smaller share."""


def as_asked(result: EvalResult, p: Planned) -> EvalResult:
    """The result with its setup fingerprint holding the in-flight limit the config asks, and the
    wave's share beside it (``metrics["wave_in_flight"]``).

    The share follows from the cell's engine settings (`max_num_seqs` is the budget), so two
    cells that differ only there, a batch-size axis, would otherwise differ in their evals'
    setups too (the consistency eval's fingerprint holds its concurrency) and every check
    between them would be NOT_CHECKED: the comparison the axis exists for. What the engine was
    given stays in the comparability key (its argv); what the eval was asked stays here."""
    if p.asked is None:
        return result
    field, limit = p.asked
    metrics = {**result.metrics, "wave_in_flight": getattr(p.settings, field)}
    setup = metrics.get(SETUP_KEY)
    if isinstance(setup, dict) and field in (setup.get("fields") or {}):
        metrics[SETUP_KEY] = fingerprint({**setup["fields"], field: limit})
    return dataclasses.replace(result, metrics=metrics)


def in_flight(settings: EvalSettings) -> tuple[str, int] | None:
    """(field, value) of an eval's in-flight limit, None when its settings name none."""
    for name in IN_FLIGHT_FIELDS:
        value = getattr(settings, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return name, value
    return None


def split_budget(asks: Sequence[int], budget: int | None) -> list[int]:
    """Each eval's in-flight limit in a wave: what it asks alone while they fit the budget
    together, else its share of the budget in proportion to what it asks, at least 1."""
    if budget is None or sum(asks) <= budget:
        return list(asks)
    total = sum(asks)
    return [max(1, math.floor(budget * ask / total)) for ask in asks]


def reads_own_results(ev: Eval, settings: EvalSettings) -> bool:
    """An eval that needs the cell's other results before it starts (runs after the wave)."""
    return isinstance(ev, ReadsEarlierCells) and ev.runs_baseline_last(settings)


def plan_wave(job: CellJob) -> tuple[list[Planned], list[Planned]]:
    """(the wave, in start order; the evals after it) for the job's cell: `wave_first` evals
    first, then the rest in run order, each with its share of the budget."""
    enabled = job.config.evals.enabled()
    wave = [(ev, s) for ev, s in enabled if not reads_own_results(ev, s)]
    after = [Planned(ev, s) for ev, s in enabled if reads_own_results(ev, s)]
    wave.sort(key=lambda pair: not pair[0].wave_first)  # stable: run order otherwise
    budget = job.config.run.concurrency or job.cell.settings.max_num_seqs
    limits = [in_flight(s) for _, s in wave]
    shares = split_budget([limit[1] if limit else 1 for limit in limits], budget)
    planned = [Planned(ev, s.model_copy(update={limit[0]: share}), limit if share != limit[1] else None) if limit
               else Planned(ev, s) for (ev, s), limit, share in zip(wave, limits, shares)]
    return planned, after


def run_evals(job: CellJob, server: Server) -> Iterator[CellPart]:
    """Every enabled eval of the job's cell against one running server, as `run.evals` says
    (the module docstring); each writes its samples beside cell.json and returns its raw metrics
    the moment it is done. `run_cell`'s default body."""
    scrapes = None
    if scraping_enabled(job.config.evals):
        scrapes = EngineScrapes(server.base_url, get_profile(job.config.engine.profile), external=job.base_url is not None,
                                metrics_path=job.config.engine.metrics_path, log_path=job.cell_dir / "engine.log")
    with scrapes or contextlib.nullcontext():
        planned, after = plan_wave(job)
        if job.config.run.evals == "apart" or len(planned) < 2:  # a wave of one is that eval alone
            yield from _apart(job, server, scrapes)
        else:
            yield from _wave(job, server, scrapes, planned, after)


def _apart(job: CellJob, server: Server, scrapes: EngineScrapes | None) -> Iterator[CellPart]:
    """One after another in run order, each seeing the results of those before it, the engine
    scraped around each."""
    earlier: dict[str, EvalResult] = {}
    for ev, settings in job.config.evals.enabled():
        cancel.check()  # a stop during the last eval's scoring: the next one does not start
        job.update(ev.name)
        yield from _one(job, server, Planned(ev, settings), earlier, scrapes)


def _wave(job: CellJob, server: Server, scrapes: EngineScrapes | None, planned: list[Planned],
          after: list[Planned]) -> Iterator[CellPart]:
    """The wave's evals at once, then those after it (module docstring)."""
    cancel.check()
    job.update(WAVE, ", ".join(p.ev.name for p in planned))
    t = time.monotonic()
    results: dict[str, EvalResult] = {}
    scanning: list[_Done] = []
    for done in _run_together(job, server, planned):
        results[done.planned.ev.name] = done.result
        write_jsonl(job.cell_dir / done.planned.ev.samples_file, done.result.samples)
        yield Phase(done.planned.ev.name, "eval", done.start, done.end)
        if isinstance(done.planned.ev, ScansEarlierTexts):
            scanning.append(done)  # recorded once it has scanned the others' texts
        else:
            yield EvalRun(done.planned.ev.name, done.result.metrics, done.wall_s)
    for done in scanning:
        ev = done.planned.ev
        assert isinstance(ev, ScansEarlierTexts)
        ev.scan_earlier(done.result, {name: r for name, r in results.items() if name != done.planned.ev.name},
                        done.planned.settings)
        yield EvalRun(done.planned.ev.name, done.result.metrics, done.wall_s)
    if scrapes is not None:
        everything = [row for result in results.values() for row in result.samples]
        yield scrapes.after(WAVE, EvalResult({}, everything), round(time.monotonic() - t, 3))
    for p in after:
        cancel.check()
        job.update(p.ev.name)
        yield from _one(job, server, p, results, scrapes)


def _one(job: CellJob, server: Server, p: Planned, earlier: dict[str, EvalResult],
         scrapes: EngineScrapes | None) -> Iterator[CellPart]:
    """One eval alone on the server, seeing `earlier` (and adding its result to it), the engine
    scraped around it."""
    start = time.monotonic()
    result = p.ev.run(_context(job, server, p, earlier), p.settings)
    end = time.monotonic()
    write_jsonl(job.cell_dir / p.ev.samples_file, result.samples)
    yield Phase(p.ev.name, "eval", start, end)
    yield EvalRun(p.ev.name, result.metrics, round(end - start, 3))
    if scrapes is not None:
        yield scrapes.after(p.ev.name, result, round(end - start, 3))
    earlier[p.ev.name] = result


def _context(job: CellJob, server: Server, p: Planned, earlier: dict[str, EvalResult]) -> EvalContext:
    """What `p` runs with, the cell's stopping rule for it included where there is one
    (run/stopping.py: `run.stop_early`)."""
    ctx = job.eval_context(server, p.ev, earlier=dict(earlier))
    rule = stop_rule(job.config, job.cell, job.store, p.ev, p.settings)
    return dataclasses.replace(ctx, stop_when=rule) if rule is not None else ctx


@dataclass
class _Done:
    """One eval of the wave, finished: its result and its span (`time.monotonic()` seconds)."""

    planned: Planned
    result: EvalResult
    start: float
    end: float

    @property
    def wall_s(self) -> float:
        return round(self.end - self.start, 3)


def _run_together(job: CellJob, server: Server, planned: list[Planned]) -> Iterator[_Done]:
    """Each eval in a thread of its own, started in order; yields each as it finishes. The
    first failure sets the wave's own stop (set by the cell's stop too), which cancels the
    others' requests, and is raised once every thread has ended: an eval's own error before
    the `Interrupted` of those it stopped."""
    stop = cancel.Stop()
    finished: queue.Queue[_Done | BaseException] = queue.Queue()

    def work(p: Planned) -> None:
        t = time.monotonic()
        try:
            with cancel.bound(stop):
                result = as_asked(p.ev.run(_context(job, server, p, {}), p.settings), p)
            finished.put(_Done(p, result, t, time.monotonic()))
        except BaseException as e:  # noqa: BLE001 - handed to the cell's thread, which raises it
            stop.set()
            finished.put(e)

    cell_stop = cancel.current()
    threads = [threading.Thread(target=contextvars.copy_context().run, args=(work, p), daemon=True,
                                name=f"{job.cell.id} {p.ev.name}") for p in planned]
    failed: list[BaseException] = []
    with cell_stop.calling(stop.set) if cell_stop is not None else contextlib.nullcontext():
        try:
            for thread in threads:
                thread.start()
            for _ in threads:
                done = finished.get()
                if isinstance(done, BaseException):
                    failed.append(done)
                elif not failed:
                    yield done
        finally:
            stop.set()  # a failure, or the cell's consumer gone: the rest stop (a no-op once all ended)
            for thread in threads:
                thread.join()
    if failed:
        raise next((e for e in failed if not isinstance(e, Interrupted)), failed[0])
