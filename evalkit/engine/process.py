"""Start one engine process, wait until it really serves, and always tear it down.

`EngineProcess` is a context manager in the manner of vLLM's `RemoteOpenAIServer` and SGLang's
`popen_launch_server`, keeping what they get right and avoiding what they get wrong:

- the argv is a list, copied, never a shell string; the process gets its own process group so
  that stopping it also stops every worker and grandchild it spawned;
- readiness is health 200, then the served name in `/v1/models`, then one real warm-up
  completion (graph capture and JIT can still run after `/health` answers, as ATOM's CI found);
- every loop iteration checks the process, the log's fatal lines and the deadline, so a crashed
  engine fails at once and a server answering non-200 forever cannot spin forever;
- stop is SIGTERM to the group, a grace period, then SIGKILL to the group and to any descendant
  that left it, and it runs on every exit path including Ctrl-C. A process whose launcher would
  not pass a SIGTERM on (srun turns it into a SIGKILL of its step) is asked through `ask_stop`
  instead; only past the grace period is its launcher signalled, to force it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal

import httpx
import psutil

from evalkit import waits
from evalkit.errors import EngineExited, EngineFault, PortInUse, StartupTimeout
from evalkit.redact import redact_argv

LOG_TAIL_LINES = 20
SETTLE_S = 5.0
"""How long an engine that stopped answering gets to show it exited or hit a fatal line, after an
eval failed (`EngineProcess.settle`): an engine's event, not a wait of evalkit's own, so not scaled."""
FORCE_S = 15.0
"""After an engine asked through `ask_stop` outlived its grace: how long its launcher's own forced
stop gets (srun, SIGTERMed, SIGKILLs its step and waits for it) before the group is SIGKILLed."""
REAP_S = 1.0
"""After `stop` saw the engine's processes end, how long it waits to reap the leader: at once,
unless another thread was polling it at that moment."""
PORT_IN_USE = re.compile(r"address already in use|Errno 98|port .* is (already )?in use", re.IGNORECASE)


@dataclass
class ReadyTimings:
    """Seconds from launch until each readiness stage passed."""

    health_s: float | None = None
    models_s: float | None = None
    warmup_s: float | None = None
    warmup_attempts: int = 0


@dataclass
class EngineProcess:
    """One engine launch; use as `with EngineProcess(...) as engine: engine.wait_ready()`."""

    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    base_url: str
    served_name: str
    health_path: str = "/health"
    fatal_patterns: Sequence[str] = ()
    stop_grace_s: float = 30.0
    hang_timeout_s: float | None = None
    """While evals run: no /health answer for this long means the engine hangs; it is stopped."""
    cwd: Path | None = None
    """Where the engine starts: the cell's own empty directory (engine/launch.py says why)."""
    readiness: Literal["serve", "health", "alive"] = "serve"
    """What ready means: `serve` health, the model listed and a warm-up completion (the part the
    evals talk to); `health` only (a PD worker, which cannot answer alone); `alive` only (a rank
    above 0, which serves no HTTP: its rank 0 is ready only once it has joined)."""
    ask_stop: Callable[[], str] | None = None
    """Asks the engine to stop past its launcher (a Slurm step: `scancel --signal=TERM`), in place
    of SIGTERM to the group; says what it did, for the log, or raises where it could not ask."""
    cpus: Sequence[int] | None = None
    """The logical CPUs the engine and every process it starts may run on (`devices.kind: cpu`);
    set by the exec wrapper before the engine's first instruction, so no child escapes it."""
    timings: ReadyTimings = field(default_factory=ReadyTimings)
    stop_s: float | None = field(default=None, init=False)
    """Seconds from the first `stop` until the engine and its children were gone: recorded here,
    by the stop itself, so a cell has it whatever fails after (the wait for its GPUs' memory)."""
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _started_at: float = field(default=0.0, init=False, repr=False)
    _fatal: list[str] = field(default_factory=list, init=False, repr=False)
    _log_offset: int = field(default=0, init=False, repr=False)
    _launch_offset: int = field(default=0, init=False, repr=False)
    _monitor: threading.Thread | None = field(default=None, init=False, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _stop_began: float = field(default=0.0, init=False, repr=False)

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> EngineProcess:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            # A retried or resumed cell appends to its log: this launch is judged on its own lines.
            self._launch_offset = self._log_offset = log.tell()
            # _deathsig's CPUS_FLAG, spelled here: importing that module would make `python -m` warn
            pinned = [] if self.cpus is None else ["--cpus", ",".join(map(str, self.cpus))]
            on = f" on CPUs {pinned[1]}" if pinned else ""
            log.write(f"[evalkit] launching{on}: {shlex.join(redact_argv(self.argv))}\n".encode())
            log.flush()
            self._started_at = time.monotonic()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "evalkit.engine._deathsig", str(os.getpid()), *pinned, *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(self.env),
                cwd=self.cwd,
                start_new_session=True,
                close_fds=True,
            )
            log.write(f"[evalkit] engine pid {self._proc.pid}\n".encode())

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def elapsed(self) -> float:
        return time.monotonic() - self._started_at

    @property
    def exit_code(self) -> int | None:
        """The process's exit code once it has exited (negative: the signal that ended it)."""
        return self._proc.poll() if self._proc is not None else None

    @property
    def running(self) -> bool:
        """Started, and its process has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the group and every descendant now, without the grace of `stop` (a second Ctrl-C)."""
        self._stopping.set()
        if self._proc is not None:
            _signal_all(self._proc.pid, _group_members(self._proc.pid) | _descendants(self._proc.pid), signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM the group (or `ask_stop`), wait `stop_grace_s`, SIGKILL whatever is left. Idempotent."""
        first = not self._stopping.is_set()
        if first:
            self._stop_began = time.monotonic()
        self._stopping.set()
        if self._proc is None:
            return
        pgid = self._proc.pid
        members = _group_members(pgid) | _descendants(pgid)
        asked = self._ask_to_stop() if first and self._proc.poll() is None else False
        if not asked:
            _signal_all(pgid, members, signal.SIGTERM)
        gone = _wait_gone(pgid, members, self._proc, self.stop_grace_s)
        if not gone and asked:  # its launcher's own forced stop, then ours
            _signal_all(pgid, members, signal.SIGTERM)
            gone = _wait_gone(pgid, members, self._proc, FORCE_S)
        if not gone:
            members |= _group_members(pgid)
            _signal_all(pgid, members, signal.SIGKILL)
            _wait_gone(pgid, members, self._proc, 10)
        try:  # reap it: `poll()` answers None while another thread (the monitor) polls at that moment
            self._proc.wait(timeout=REAP_S)
        except subprocess.TimeoutExpired:
            pass
        if self.stop_s is None:
            self.stop_s = round(time.monotonic() - self._stop_began, 3)
        if self._monitor is not None:
            self._monitor.join(timeout=2)

    def _ask_to_stop(self) -> bool:
        """`ask_stop`, its answer written to the log; False where there is none or it could not ask."""
        if self.ask_stop is None:
            return False
        try:
            line, asked = f"asked: {self.ask_stop()}", True
        except Exception as e:  # noqa: BLE001  asking is best effort: SIGTERM to the group follows
            line, asked = f"could not ask ({e}); SIGTERM to its launcher", False
        with self.log_path.open("ab") as log:
            log.write(f"[evalkit] stopping: {line}\n".encode())
        return asked

    # -- readiness -------------------------------------------------------------------------

    def wait_ready(self, timeout_s: float, warmup_timeout_s: float = 300.0) -> ReadyTimings:
        """Block until every stage of its `readiness` passes (health, model list and a warm-up
        completion for a serving engine), or raise."""
        deadline = time.monotonic() + timeout_s
        delay = waits.POLL_FIRST_S
        stages = {"serve": ("health", "models"), "health": ("health",), "alive": ()}[self.readiness]
        with httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(10.0)) as client:
            for stage in stages:
                while not self._stage_ok(client, stage):
                    self._check(deadline, f"waiting for {stage}")
                    self._stopping.wait(delay)
                    delay = waits.next_poll_s(delay)
                setattr(self.timings, f"{stage}_s", round(self.elapsed(), 3))
            if self.readiness == "serve":
                warm_deadline = min(deadline, time.monotonic() + warmup_timeout_s)
                while True:
                    self.timings.warmup_attempts += 1
                    if self._warmup(client):
                        break
                    self._check(warm_deadline, "warming up (completions still failing after /health passed)")
                    self._stopping.wait(delay)
                    delay = waits.next_poll_s(delay)
                self.timings.warmup_s = round(self.elapsed(), 3)
            else:
                self.check_alive()
        self._start_monitor()
        return self.timings

    def _stage_ok(self, client: httpx.Client, stage: str) -> bool:
        try:
            if stage == "health":
                return client.get(self.health_path).status_code == 200
            listed = client.get("/v1/models")
            return listed.status_code == 200 and any(
                m.get("id") == self.served_name for m in listed.json().get("data", [])
            )
        except (httpx.HTTPError, ValueError, AttributeError):
            return False

    def _warmup(self, client: httpx.Client) -> bool:
        try:
            r = client.post(
                "/v1/completions",
                json={"model": self.served_name, "prompt": "hi", "max_tokens": 1, "temperature": 0},
                timeout=60.0,
            )
            return r.status_code == 200 and bool(r.json().get("choices"))
        except (httpx.HTTPError, ValueError):
            return False

    def _check(self, deadline: float, doing: str) -> None:
        """Raise if the process died, logged a fatal line, is being stopped (a run's stop, a cell's
        budget: the waits above end at once on it), or the deadline passed."""
        self.check_alive()
        if self._stopping.is_set():
            raise EngineExited(f"engine stopped by evalkit after {self.elapsed():.1f} s ({doing})",
                               log_tail=self.log_tail())
        if time.monotonic() > deadline:
            raise StartupTimeout(
                f"engine not ready after {self.elapsed():.0f} s ({doing})", log_tail=self.log_tail()
            )

    def check_alive(self) -> None:
        """Raise EngineExited / EngineFault if the engine is no longer fit to serve."""
        assert self._proc is not None, "start() first"
        self._scan_log()
        if self._fatal:
            raise EngineFault(self._fatal[0], log_tail=self.log_tail())
        code = self._proc.poll()
        if code is not None:
            tail = self.log_tail()
            cls = PortInUse if PORT_IN_USE.search(tail) else EngineExited
            raise cls(f"engine exited with code {code} after {self.elapsed():.1f} s", log_tail=tail, exit_code=code)

    def settle(self, within_s: float = SETTLE_S) -> None:
        """`check_alive` after an eval failed, giving an engine that no longer answers on its
        health path up to `within_s` to show why: a crashed engine closes its port before its
        process has exited, so on a loaded box the eval's connection error comes first and, read
        at once, the cell would blame the eval for the engine's exit. An engine that answers is
        alive and the eval's error stands at once."""
        if self.readiness == "alive":  # no health path to ask
            self.check_alive()
            return
        with httpx.Client(base_url=self.base_url, timeout=1.0) as client:
            self._answers_within(client, within_s)

    def _answers_within(self, client: httpx.Client, within_s: float) -> bool:
        """Whether the engine answers its health path within `within_s`, looking at its process
        and log before each try (raising EngineExited / EngineFault as `check_alive`)."""
        deadline = time.monotonic() + within_s
        while True:
            self.check_alive()
            if self._health_ok(client, 1.0):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def _health_ok(self, client: httpx.Client, timeout_s: float) -> bool:
        """Whether the health path answers 200 within `timeout_s`."""
        try:
            return client.get(self.health_path, timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    # -- log -------------------------------------------------------------------------------

    def _scan_log(self) -> None:
        if not self.fatal_patterns or self._fatal:
            return
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._log_offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        # Only whole lines: a partial last line is read again next time.
        end = chunk.rfind(b"\n") + 1
        self._log_offset += end
        for line in chunk[:end].decode("utf-8", "replace").splitlines():
            if any(re.search(p, line) for p in self.fatal_patterns):
                self._fatal.append(f"fatal line in engine log: {line.strip()}")
                return

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(self._launch_offset, f.tell() - 64 * 1024))
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def launch_log(self) -> str:
        """This launch's whole log so far (an earlier launch of a retried cell is not part of it):
        what the profile's log reader and the config's log assertions read."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._launch_offset)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    # -- monitor ---------------------------------------------------------------------------

    def _start_monitor(self) -> None:
        """While evals run: a fatal log line or a hang kills the engine at once, so the eval's
        requests fail fast instead of waiting out their timeouts, and the cell reports why."""

        def watch() -> None:
            last_ok = time.monotonic()
            next_probe = 0.0
            with httpx.Client(base_url=self.base_url, timeout=5.0) as client:
                try:
                    while not self._stopping.wait(0.5):
                        self.check_alive()
                        if self.hang_timeout_s is None or self.readiness == "alive" or time.monotonic() < next_probe:
                            continue
                        next_probe = time.monotonic() + min(5.0, self.hang_timeout_s / 3)
                        if self._health_ok(client, min(10.0, self.hang_timeout_s)):
                            last_ok = time.monotonic()
                        elif time.monotonic() - last_ok > self.hang_timeout_s:
                            # looked at again: an engine that crashed while the probe waited shows
                            # its exit (or fatal line) within a moment, the cell's error, not a hang
                            if self._answers_within(client, 1.0):
                                last_ok = time.monotonic()
                                continue
                            if not self._stopping.is_set():
                                self._fatal.append(f"engine hangs: no answer on {self.health_path} "
                                                   f"for {self.hang_timeout_s:g} s")
                                self._kill_from_monitor()
                            return
                except EngineFault:
                    self._kill_from_monitor()
                except EngineExited:
                    pass

        self._monitor = threading.Thread(target=watch, name="engine-monitor", daemon=True)
        self._monitor.start()

    def _kill_from_monitor(self) -> None:
        self.stop_grace_s = min(self.stop_grace_s, 5.0)
        threading.Thread(target=self.stop, daemon=True).start()


def _group_members(pgid: int) -> set[int]:
    members = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                members.add(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def _descendants(pid: int) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def _signal_all(pgid: int, members: set[int], sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in members:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _alive(pgid: int, members: set[int], proc: subprocess.Popen[bytes]) -> bool:
    proc.poll()  # reap the leader so it does not linger as a zombie
    return any(_running(pid) for pid in members | {pgid})


def _wait_gone(pgid: int, members: set[int], proc: subprocess.Popen[bytes], seconds: float) -> bool:
    """Wait up to `seconds` for the group and its members to end; whether they did."""
    deadline = time.monotonic() + seconds
    while (alive := _alive(pgid, members, proc)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive
