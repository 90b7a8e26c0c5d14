"""ATOM's speculative decoding statistics as the simulator logs them (``--sim-dialect atom`` with
``--method mtp|eagle3|dspark --num-speculative-tokens K``, or ``--sim-spec-decode K``).

ATOM serves no ``/metrics`` at the refs evalkit tests: its scheduler logs what the drafts did
(atom/model_engine/scheduler.py ``SpecStats``, read at 0e9804c21, ccc861dc5 and HEAD ffdf3bb5).
``update`` runs once per sequence per decode step with that step's accepted tokens (the accepted
drafts plus the bonus token) and adds K draft tokens; whenever the total reaches a multiple of
1000 x K draft tokens it logs an ``[MTP Stats Interval]`` line for the steps since its last log
and a cumulative ``[MTP Stats         ]`` line, both through the ``atom`` logger. ``MtpStats``
is that class, line for line; one per DP rank, as each attention-DP engine core runs its own
scheduler (atom/model_engine/engine_core_mgr.py), so their unlabelled lines interleave as ATOM's do.

What a step accepts is drawn, not computed: each of the K drafts of a step is accepted with the
cell's acceptance p (``--sim-spec-acceptance``; the buggy cell's ``--sim-bug-spec-acceptance``,
as ATOM's DSpark nightly fell from ~46% to 0% with its accuracy), from a generator seeded by
``--sim-seed``, and a step never accepts past the generation's end (ATOM drops accepted drafts
past a stop). So a generation of n tokens takes its first from prefill and n - 1 from its steps.
Not reproduced: ATOM's `Engine kwargs` line then holds a `SpeculativeConfig(...)` (atom/config.py:882
at ccc861dc5) whose repr includes the draft model's whole HF config; the simulator's keeps `None`.
"""

from __future__ import annotations

import random

from evalkit.sim.startup import atom_line

LOG_INTERVAL = 1000
"""`SpecStats(mtp_k, log_interval=1000)`: decode steps between two logs of one scheduler."""


class MtpStats:
    """One scheduler's `SpecStats`: counts per step, logs like ATOM."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.total_draft_tokens = 0
        self.distribution = dict.fromkeys(range(k + 1), 0)
        self._interval_draft_tokens = 0
        self._interval = dict.fromkeys(range(k + 1), 0)

    def update(self, accepted_tokens: int) -> None:
        """One sequence's decode step that yielded `accepted_tokens` (accepted drafts + 1)."""
        self.total_draft_tokens += self.k
        self._interval_draft_tokens += self.k
        self.distribution[accepted_tokens - 1] += 1
        self._interval[accepted_tokens - 1] += 1
        if self.total_draft_tokens % (LOG_INTERVAL * self.k) == 0:
            self._log()
            self._interval_draft_tokens = 0
            self._interval = dict.fromkeys(range(self.k + 1), 0)

    def _log(self) -> None:
        steps = sum(self.distribution.values())
        accepted = sum(k * v for k, v in self.distribution.items())
        iv_steps = sum(self._interval.values())
        iv_accepted = sum(k * v for k, v in self._interval.items())
        atom_line(_line("Interval", iv_accepted, self._interval_draft_tokens, iv_steps, self._interval))
        atom_line(_line("        ", accepted, self.total_draft_tokens, steps, self.distribution))


def _line(label: str, accepted: int, draft_tokens: int, steps: int, distribution: dict[int, int]) -> str:
    """ATOM's f-string (scheduler.py `SpecStats._log`), for either line."""
    shares = {k: f"{v / steps:.2%}" for k, v in distribution.items()}
    return (f"[MTP Stats {label}] Average toks/fwd: {1 + accepted / steps:.2f}, "
            f"Accepted/Total Draft tokens: {accepted}/{draft_tokens}, "
            f"Acceptance rate: {accepted / draft_tokens:.2%}, Accepted tokens distribution: {shares}")


class MtpLog:
    """The schedulers of one simulated server: each finished generation's steps go to the next
    rank in turn."""

    def __init__(self, k: int, acceptance: float, ranks: int, seed: int) -> None:
        self.k = k
        self.acceptance = acceptance
        self.ranks = [MtpStats(k) for _ in range(max(1, ranks))]
        self._rng = random.Random(seed)
        self._next = 0

    def generation(self, tokens: int) -> None:
        """The decode steps of a generation of `tokens` tokens."""
        stats = self.ranks[self._next % len(self.ranks)]
        self._next += 1
        left = tokens - 1
        while left > 0:
            drafts = sum(self._rng.random() < self.acceptance for _ in range(self.k))
            took = min(drafts, left - 1)
            stats.update(took + 1)
            left -= took + 1
