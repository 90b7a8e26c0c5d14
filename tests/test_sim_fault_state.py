"""The simulator's count-based faults (sim/faults.py `FaultState`), decided in this process: request
N+1 trips them, fatal-log prints ATOM's GPU fault line once and then the engine answers nothing,
hang-after answers nothing without a word, and a rate-based fault hits a reproducible share of the
requests after the first N. What the engine process does then (exit, hang under evalkit's
supervision) is tests/test_sim_faults.py's and test_faults.py's, in `e2e`."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.sim.config import Faults
from evalkit.sim.faults import GPU_FAULT_LINE, FaultState


def stalls(state: FaultState) -> bool:
    """Whether a request that reached this point would never be answered."""
    async def wait() -> bool:
        try:
            await asyncio.wait_for(state.stall_if_stalled(), timeout=0.05)
        except asyncio.TimeoutError:
            return True
        return False

    return asyncio.run(wait())


def test_fatal_log_prints_the_gpu_fault_line_once_at_request_n_plus_1_then_answers_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    state = FaultState(Faults(frozenset({"fatal-log"}), after=2, rate=1.0), seed=0)
    assert [state.admit(), state.admit()] == [1, 2] and not stalls(state)
    assert capsys.readouterr().err == ""
    assert state.admit() == 3 and stalls(state)
    state.admit()
    assert capsys.readouterr().err == GPU_FAULT_LINE + "\n"  # once, not per request


def test_hang_after_answers_nothing_from_request_n_plus_1_without_a_word(capsys: pytest.CaptureFixture[str]) -> None:
    state = FaultState(Faults(frozenset({"hang-after"}), after=1, rate=1.0), seed=0)
    state.admit()
    assert not stalls(state)
    state.admit()
    assert stalls(state) and capsys.readouterr().err == ""


def test_a_rate_fault_spares_the_first_n_and_hits_the_same_requests_for_the_same_seed() -> None:
    def hit(seed: int) -> list[int]:
        state = FaultState(Faults(frozenset({"http-500"}), after=10, rate=0.3), seed=seed)
        return [n for n in range(1, 1001) if state.hits("http-500", n)]

    hits = hit(0)
    assert min(hits) > 10 and 0.25 < len(hits) / 990 < 0.35
    assert hit(0) == hits and hit(1) != hits
    assert not FaultState(Faults(frozenset(), after=0, rate=1.0), seed=0).hits("http-500", 5)
