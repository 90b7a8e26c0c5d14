"""The early-abort schedule without any shortcut, as a reference for StreamingDetector.

After each chunk: once ``check_every`` more tokens have arrived since the last check, read the
text received so far as a whole text (its runs merged into symbols, from the first token on,
as ``analyze`` reads it) and evaluate the abort rules on its last ``tail_window +
recurrence_lookback + ngram - 1`` symbols and the runs among them; the first check at which a
rule holds is the abort. StreamingDetector finds the symbols incrementally and skips checks
that cannot fire, and must abort at exactly the same token as this.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from evalkit.evals.detector import DetectorSettings
from evalkit.evals.detector import _kernels as K
from evalkit.evals.detector._analysis import fired_rules, measure
from evalkit.evals.detector._symbols import factorize

DEFAULT = DetectorSettings()


def window_fires(tokens: np.ndarray, s: DetectorSettings = DEFAULT) -> bool:
    """Whether the abort rules hold on the window at the end of ``tokens``."""
    window = s.tail_window + s.recurrence_lookback + s.recurrence_ngram - 1
    sym = factorize(K.mix(tokens), s.run_unit, s.run_copies)
    first = max(0, len(sym.values) - window)
    runs = sym.lengths[first:][sym.units[first:] > 0]
    run = max(int(runs.max()) if runs.size else 0, sym.open_run[0])
    return bool(fired_rules(measure(sym.values[first:], s, run), s, natural_end=False, scale=s.abort_margin))


def reference_abort(tokens: np.ndarray, chunks: Iterable[int], s: DetectorSettings = DEFAULT) -> int | None:
    """Token count at which the unshortened schedule aborts ``tokens`` fed in ``chunks``."""
    n, next_check = 0, s.check_every
    for size in chunks:
        if n >= len(tokens):
            return None
        n = min(len(tokens), n + size)
        if n >= next_check:
            next_check = n + s.check_every
            if window_fires(tokens[:n], s):
                return n
    return None
