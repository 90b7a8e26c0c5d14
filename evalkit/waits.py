"""The waits evalkit chooses for itself, in one place: how long a retried request backs off and how
fast a readiness poll slows down. Not the waits a user or an engine decides (a config's timeouts
and grace periods, an engine's start-up): those stay where they are configured.

`EVALKIT_WAIT_SCALE` multiplies every one of them (default 1, the product's behaviour). evalkit's
own test suite sets it to 0 for every test and every process a test starts (tests/conftest.py), so
a retry test proves what is retried, how often and with which message without sleeping through
0.5 x 2^n seconds of back-off; a test about the waits themselves sets it back. A value that is not
a non-negative number is refused by name rather than read as 1."""

from __future__ import annotations

import os

ENV = "EVALKIT_WAIT_SCALE"

BACK_OFF_BASE_S = 0.5
"""A retry's first back-off: 0.5 s, doubling per attempt."""
BACK_OFF_CAP_S = 8.0
"""No back-off is longer than this."""


def scale() -> float:
    """`EVALKIT_WAIT_SCALE` as read now (so a test may change it for a block), 1 when unset."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise ValueError(f"{ENV}={raw!r} is not a non-negative number (1 is evalkit's own waits, 0 none)")
    return value


def back_off_s(attempt: int, jitter: float) -> float:
    """The back-off before try `attempt` + 1: exponential from BACK_OFF_BASE_S, capped at
    BACK_OFF_CAP_S, times `jitter` (the caller's random factor), times the scale."""
    return min(BACK_OFF_CAP_S, BACK_OFF_BASE_S * 2**attempt) * jitter * scale()


POLL_FIRST_S = 0.1
"""A readiness poll's first pause: an engine that is up at once is seen at once."""
POLL_CAP_S = 5.0
"""A readiness poll slows down by half each time up to this: a model that loads for an hour is
not asked twice a second, and one that loads in 3 s is seen within ~1.5 s of it. Scaled to 0, the
poll stays at POLL_FIRST_S."""


def next_poll_s(delay: float) -> float:
    """The pause after one of `delay`: 1.5 times longer, at most POLL_CAP_S (scaled), never below
    POLL_FIRST_S."""
    return max(POLL_FIRST_S, min(delay * 1.5, POLL_CAP_S * scale()))
