"""Injected failures, so evalkit's engine supervision can be tested against a real process.

Every fault is off unless named with ``--sim-fault KIND`` (repeatable); ``FAULT_HELP`` in
``evalkit.sim.config`` says what each kind does (it is also the ``--help`` text). Decisions:

- Count-based faults (crash-after, hang-after, fatal-log) count completion requests that got
  past the readiness gate (warm-up 503s do not count); request N+1 trips them.
- A crash is ``os._exit(1)``: no cleanup, no graceful close, as when an engine dies.
- truncated-stream ends the HTTP response cleanly but without the final chunk and
  ``data: [DONE]``: only a client that checks for [DONE] notices.
- stream-error ends a stream half-way the way vLLM 0.34.0 and SGLang 0.5.23 end one that failed
  after it started (vllm/entrypoints/openai/completion/serving.py:620-626,
  sglang/srt/entrypoints/openai/serving_completions.py:356-371 and :498-504): an event
  ``{"error": {"message", "type", "param", "code"}}``, then ``data: [DONE]``, all inside the 200.
- Which requests a share F hits is a hash of (seed, kind, request number): reproducible; the
  first N (``--sim-fault-after``) are spared.
- The orphan gives up after an hour, so a leak in a broken test run is bounded.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from evalkit.sim.config import FaultKind, Faults
from evalkit.sim.hashing import unit

GPU_FAULT_LINE = (
    "Memory access fault by GPU node-2 (Agent handle: 0x0) on address 0x0. Reason: Unknown."
)
ORPHAN_SECONDS = 3600


class FaultState:
    """The runtime side of ``Faults``: counts completion requests and trips the faults."""

    def __init__(self, faults: Faults, seed: int) -> None:
        self.faults = faults
        self.seed = seed
        self.requests = 0
        self._stalled = False

    def has(self, kind: FaultKind) -> bool:
        """Whether ``kind`` was asked for."""
        return kind in self.faults.kinds

    @property
    def never_ready(self) -> bool:
        """The engine binds but never becomes healthy."""
        return self.has("never-ready")

    def admit(self) -> int:
        """Count one completion request and trip the count-based faults; its number (1-based)."""
        self.requests += 1
        over = self.requests > self.faults.after
        if over and self.has("crash-after"):
            _say(f"sim: fault crash-after: exiting after {self.faults.after} completion requests")
            os._exit(1)
        if over and self.has("fatal-log") and not self._stalled:
            _say(GPU_FAULT_LINE)
        if over and (self.has("hang-after") or self.has("fatal-log")):
            self._stalled = True
        return self.requests

    async def stall_if_stalled(self) -> None:
        """Never return once the engine has hung: the request stays unanswered."""
        if self._stalled:
            await asyncio.Event().wait()

    def hits(self, kind: FaultKind, request_number: int) -> bool:
        """Whether a rate-based fault hits this request."""
        return (self.has(kind) and request_number > self.faults.after
                and unit(self.seed, kind, request_number) < self.faults.rate)


def spawn_orphan() -> int:
    """Start a child in our process group that keeps running after we die; its pid."""
    child = subprocess.Popen(
        [sys.executable, "-S", "-c", f"import time; time.sleep({ORPHAN_SECONDS})"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return child.pid


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
