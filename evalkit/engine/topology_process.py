"""A cell's topology run: every part's process started wave by wave, each ready, watched, scraped
and stopped together, used like one `EngineProcess` (run/cell.py). The launch it runs is
engine/topology.py's; what one part's process must answer is `PartProcess`.

Any part that fails (exits, logs a fatal line, never gets ready) fails the whole topology with
that part's name and log tail; stopping stops every part, the front first, in reverse start
order, each with its process group (engine/process.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from evalkit import waits
from evalkit.engine.metrics import scrape
from evalkit.engine.process import ReadyTimings
from evalkit.engine.topology import PartLaunch, TopologyLaunch
from evalkit.errors import EngineError, EngineExited
from evalkit.redact import scrub, secret_values


class PartProcess(Protocol):
    """What the topology asks of one part's process: an `EngineProcess` (a test may serve a part
    in this process instead, behind the same calls)."""

    timings: ReadyTimings
    stop_s: float | None

    @property
    def pid(self) -> int | None: ...
    @property
    def running(self) -> bool: ...
    @property
    def exit_code(self) -> int | None: ...
    def start(self) -> None: ...
    def wait_ready(self, timeout_s: float, warmup_timeout_s: float = ...) -> ReadyTimings: ...
    def check_alive(self) -> None: ...
    def settle(self) -> None: ...
    def stop(self) -> None: ...
    def kill(self) -> None: ...
    def log_tail(self, lines: int = ...) -> str: ...
    def launch_log(self) -> str: ...


ProcessFactory = Callable[[PartLaunch], PartProcess]
"""How a part's launch becomes its process (run/cell.py: an `EngineProcess` with its log file,
timeouts and environment)."""


@dataclass
class TopologyProcess:
    """Every part's process, used like one `EngineProcess`: `with topology: topology.wait_ready(...)`."""

    launch: TopologyLaunch
    make: ProcessFactory
    processes: dict[str, PartProcess] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    """When each part was started (monotonic seconds)."""
    stop_s: float | None = None
    ready_s: dict[str, float] = field(default_factory=dict)
    """Seconds from the first part's start until each part was ready."""
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What each engine part's `/metrics` counted when the cell ended (`_scrape_parts`)."""
    _t0: float = 0.0
    _stopped: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> TopologyProcess:
        self._t0 = time.monotonic()
        self._start(self.launch.waves[0])
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self, wave: tuple[PartLaunch, ...]) -> None:
        """Start `wave`'s parts, unless the topology is already being stopped (a run's stop from
        another thread between two waves): a part started after `stop` would be left running."""
        with self._lock:
            for part in wave:
                if self._stopped.is_set():
                    raise EngineExited(f"{part.name}: stopped by evalkit before it started")
                if part.launch.cwd is not None:
                    part.launch.cwd.mkdir(parents=True, exist_ok=True)  # each part's own empty folder
                process = self.make(part)
                self.processes[part.name] = process
                self.started[part.name] = time.monotonic()
                process.start()

    @property
    def front(self) -> PartProcess:
        return self.processes[self.launch.front.name]

    @property
    def running(self) -> bool:
        """Whether any part's process still runs."""
        return any(p.running for p in self.processes.values())

    @property
    def pid(self) -> int | None:
        return self.front.pid if self.launch.front.name in self.processes else None

    def wait_ready(self, timeout_s: float, warmup_timeout_s: float = 300.0) -> ReadyTimings:
        """Each wave ready before the next starts; the front's timings, from the first start."""
        deadline = time.monotonic() + timeout_s
        for i, wave in enumerate(self.launch.waves):
            if i:
                self._start(wave)
            self._wait_wave(wave, max(deadline - time.monotonic(), 0.001), warmup_timeout_s)
        timings = self.front.timings
        offset = round(self.started[self.launch.front.name] - self._t0, 3)
        def shifted(t: float | None) -> float | None:
            return None if t is None else round(t + offset, 3)

        return ReadyTimings(shifted(timings.health_s), shifted(timings.models_s), shifted(timings.warmup_s),
                            timings.warmup_attempts)

    def _wait_wave(self, wave: tuple[PartLaunch, ...], timeout_s: float, warmup_timeout_s: float) -> None:
        """Wait for every part of `wave` at once; the first to fail fails the topology (named), the
        others' waits end with it."""
        if len(wave) == 1:  # one part (an ordinary cell's engine, a router): waited for in this thread
            try:
                self.processes[wave[0].name].wait_ready(timeout_s, warmup_timeout_s)
            except EngineError as e:
                raise self._named(wave[0].name, e) from e
            self.ready_s[wave[0].name] = round(time.monotonic() - self._t0, 3)
            return
        failures: list[tuple[str, EngineError]] = []
        done: set[str] = set()

        def wait(name: str) -> None:
            try:
                self.processes[name].wait_ready(timeout_s, warmup_timeout_s)
                self.ready_s[name] = round(time.monotonic() - self._t0, 3)
                done.add(name)
            except EngineError as e:
                failures.append((name, e))

        threads = [threading.Thread(target=wait, args=(p.name,), name=f"ready-{p.name}", daemon=True) for p in wave]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads) and not failures:
            for name in list(done):
                try:
                    self.processes[name].check_alive()  # a part ready early that died while the others wait
                except EngineError as e:
                    failures.append((name, e))
            self._stopped.wait(waits.POLL_FIRST_S)
        if failures:  # the caller's `with` stops every part, which ends the other waits
            raise self._named(*failures[0])

    def check_alive(self) -> None:
        """Raise the first part's failure (exited, fatal line), named."""
        for name, process in self.processes.items():
            try:
                process.check_alive()
            except EngineError as e:
                raise self._named(name, e) from e

    def settle(self) -> None:
        """`check_alive` after an eval failed, each part given its time to show why it stopped
        answering (`EngineProcess.settle`)."""
        for name, process in self.processes.items():
            try:
                process.settle()
            except EngineError as e:
                raise self._named(name, e) from e

    def _named(self, name: str, error: EngineError) -> EngineError:
        """`error` with the part's name in front (not for an ordinary cell's one engine), its
        class, log tail and exit code kept."""
        if self.launch.topology.kind == "single" or str(error).startswith(f"{name}: "):
            return error
        try:
            return type(error)(f"{name}: {error}", log_tail=error.log_tail, exit_code=error.exit_code)
        except TypeError:  # an error class with other arguments
            return EngineError(f"{name}: {error}", log_tail=error.log_tail, exit_code=error.exit_code)

    def log_tail(self) -> str:
        return self.front.log_tail()

    def launch_log(self) -> str:
        """The primary engine's log of this launch (what the profile's log reader reads)."""
        return self.processes[self.launch.primary.name].launch_log()

    def stop(self) -> None:
        """Stop every part, the last wave first, each wave's parts side by side. Idempotent.
        A topology's parts' `/metrics` are read first, while they still serve (`records`)."""
        began = time.monotonic()
        with self._lock:  # no part starts after this
            first = not self._stopped.is_set()
            self._stopped.set()
        if first and self.launch.topology.kind != "single":
            self._scrape_parts()
        for wave in reversed(self.launch.waves):
            threads = [threading.Thread(target=self.processes[p.name].stop, daemon=True)
                       for p in wave if p.name in self.processes]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        if self.stop_s is None:
            self.stop_s = round(time.monotonic() - began, 3)

    def _scrape_parts(self) -> None:
        """Each engine part's generated tokens and requests from its own `/metrics`, once, as the
        cell ends: the front's figures are scraped around each eval as for any cell; these say
        what each worker or rank did. A part that does not answer in a second is left out."""
        for part in self.launch.parts:
            profile = part.launch.profile
            process = self.processes.get(part.name)
            if (part.part.role == "router" or part.readiness == "alive" or profile.metrics_path is None
                    or profile.metric_names is None or process is None or not process.running):
                continue
            with httpx.Client(timeout=1.0) as client:
                found = scrape(client, part.launch.base_url, profile.metrics_path)
            names = profile.metric_names
            self.metrics[part.name] = ({"error": found.error} if found.error else
                                       {"generation_tokens": found.totals.get(names.generation_tokens),
                                        **({"requests": found.totals.get(names.requests)} if names.requests else {})})

    def records(self, secret_env: list[str]) -> list[dict[str, Any]]:
        """cell.json's `parts`: each part's launch, pid, seconds to ready (from the first start)
        and to stop, exit code, log file, metrics, and its log's tail when it did not end well."""
        out: list[dict[str, Any]] = []
        for part in self.launch.parts:
            record: dict[str, Any] = {**part.display(secret_env), "log": part.part.log_name}
            process = self.processes.get(part.name)
            if process is None:
                out.append({**record, "started": False})
                continue
            ready = self.ready_s.get(part.name)
            record |= {"pid": process.pid, "ready_s": ready, "stop_s": process.stop_s, "exit_code": process.exit_code}
            if part.name in self.metrics:
                record["metrics"] = self.metrics[part.name]
            if ready is None or process.exit_code not in (None, 0, -15):
                record["log_tail"] = scrub(process.log_tail(), secret_values({**os.environ, **part.launch.env},
                                                                             secret_env))
            out.append(record)
        return out

    def kill(self) -> None:
        for process in self.processes.values():
            process.kill()
