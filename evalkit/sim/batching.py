"""Continuous batching as the simulator models it, and what a batch does to a greedy output.

A real engine runs the requests it holds as one batch per step, and a greedy output can depend
on that batch: kernels pick another reduction split for another batch size (healthy engines are
not batch-invariant), and a race between data-parallel ranks (ATOM PR #1596's, vLLM #41331's
"garbled only under concurrent identical requests") makes a request's numbers depend on who
else was in flight. The simulator answers in microseconds, so nothing is "in flight" by the
clock; a step is instead the completion requests that reach the engine in the same turn of its
event loop (`Steps`): sent one at a time, each is alone in its step; sent together, they share
one. A request's `Slot` (its position in its step and the step's size) is the in-flight state
the decisions below are keyed on, so identical requests part only when they ran in different
company, and two copies that ran in the same company give the same text.

Only short prose (max_tokens below model.LONG_GENERATION) is affected: GSM8K answers, long
generations and teacher-forced scoring keep the models that own those figures (accuracy, the
collapse, the logprobs), which stay independent of concurrency.

* Every cell: a share ``batch_variance`` of prompts (decided per prompt and numerics path) is a
  near-tie whose output, from a token 8-48 on, takes another continuation when its step holds at
  least 2-8 requests (decided the same way): rare divergence between copies.
* The buggy cell: in a step of two or more, each request is hit by the race with chance
  ``race_rate``, decided per (prompt, step size, position): from a token 2-40 on its text is
  another continuation, one per in-flight state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from evalkit.sim.config import Behaviour, Cell
from evalkit.sim.hashing import between, unit


@dataclass(frozen=True)
class Slot:
    """Where a sequence ran: its position in its step's batch and the batch's size."""

    position: int
    size: int


class Steps:
    """Groups the sequences that arrive in one turn of the event loop into one step."""

    def __init__(self) -> None:
        self._waiting: list[asyncio.Future[list[Slot]]] = []
        self._size = 0

    async def join(self, sequences: int) -> list[Slot]:
        """The slots of a request's `sequences` prompts, once the step they joined is closed (at
        the end of the current turn: every request that arrived with this one is in it)."""
        loop = asyncio.get_running_loop()
        if not self._waiting:
            loop.call_soon(self._close)
        future: asyncio.Future[list[Slot]] = loop.create_future()
        self._waiting.append(future)
        first, self._size = self._size, self._size + sequences
        slots = await future
        return slots[first: first + sequences]

    def _close(self) -> None:
        waiting, size = self._waiting, self._size
        self._waiting, self._size = [], 0
        slots = [Slot(position, size) for position in range(size)]
        for future in waiting:
            if not future.cancelled():
                future.set_result(slots)


def variant(behaviour: Behaviour, cell: Cell, identity: str, slot: Slot | None) -> tuple[int, str] | None:
    """Where this short generation leaves the text it has alone in a step, and the key of the
    continuation it takes there; None: it keeps that text (module docstring)."""
    if slot is None or slot.size < 2:
        return None
    seed = behaviour.seed
    if cell.buggy and unit(seed, "race", identity, slot.size, slot.position) < behaviour.race_rate:
        return between(2, 40, seed, "race-onset", identity, slot.size, slot.position), f"race:{slot.size}:{slot.position}"
    path = cell.numerics
    if (unit(seed, "batch-tie", identity, path) < behaviour.batch_variance
            and slot.size >= between(2, 8, seed, "batch-tie-size", identity, path)):
        return between(8, 48, seed, "batch-tie-onset", identity, path), "batch-tie"
    return None
