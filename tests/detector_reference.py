"""The early-abort schedule without any shortcut, as a reference for StreamingDetector.

After each chunk: once ``check_every`` more tokens have arrived since the last check, evaluate
the abort rules on the window of the last ``tail_window + recurrence_lookback + ngram - 1``
tokens; the first check at which a rule holds is the abort. StreamingDetector skips checks
that cannot fire, and must abort at exactly the same token as this.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from evalkit.evals.detector import DetectorSettings
from evalkit.evals.detector._analysis import fired_rules, measure

DEFAULT = DetectorSettings()


def reference_abort(tokens: np.ndarray, chunks: Iterable[int], s: DetectorSettings = DEFAULT) -> int | None:
    """Token count at which the unshortened schedule aborts ``tokens`` fed in ``chunks``."""
    window = s.tail_window + s.recurrence_lookback + s.recurrence_ngram - 1
    n, next_check = 0, s.check_every
    for size in chunks:
        if n >= len(tokens):
            return None
        n = min(len(tokens), n + size)
        if n >= next_check:
            next_check = n + s.check_every
            if fired_rules(measure(tokens[max(0, n - window) : n], s), s, natural_end=False, scale=s.abort_margin):
                return n
    return None
