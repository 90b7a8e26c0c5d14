"""The early-abort schedule without any shortcut, as a reference for StreamingDetector.

After each chunk: once ``check_every`` more tokens have arrived since the last check, read the
text received so far as a whole text (its runs merged into symbols, from the first token on,
as ``analyze`` reads it) and evaluate the abort rules on its last ``tail_window +
recurrence_lookback + ngram - 1`` symbols and the runs among them, and the stutter and soup
rules on everything received (the doubled flags that no later token can change, recomputed
from the first token) at the first check at or after every ``UPDATE_EVERY`` tokens; the first
check at which a rule holds is the abort. StreamingDetector
finds the symbols incrementally, keeps the stutter and soup figures up to date incrementally
and skips loop checks that cannot fire, and must abort at exactly the same token as this.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from evalkit.evals.detector import DetectorSettings
from evalkit.evals.detector import _kernels as K
from evalkit.evals.detector._analysis import fired_rules, measure
from evalkit.evals.detector._chars import codepoints, piece_ends
from evalkit.evals.detector._garble import UPDATE_EVERY, garble_rules, measure_garble, peak_window_count
from evalkit.evals.detector._stutter import cusum_from, cusum_steps, doubled_lines, lookahead, stutter_flags
from evalkit.evals.detector._symbols import factorize

DEFAULT = DetectorSettings()


def garble_fires(tokens: np.ndarray, pieces: Sequence[str] | None, s: DetectorSettings = DEFAULT) -> bool:
    """Whether the stutter or soup abort rules hold on everything received: the stutter CUSUM
    over the stutter flags that are final (``lookahead`` tokens follow them), the soup events
    of the text read as a cut one (a trailing U+FFFD left out)."""
    if pieces is None:
        return False
    final = max(0, len(tokens) - lookahead(s))
    text = "".join(pieces)
    ends, points = piece_ends(pieces), codepoints(text)
    flags, heads, _ = stutter_flags(tokens, pieces, s, ends, text, points)
    steps = cusum_steps(flags[:final], s.stutter_rate, heads.word[:final])
    if steps.size and cusum_from(steps, 0).max() >= (1000 - round(s.stutter_rate * 1000)) * s.min_stutter_tokens * s.abort_margin:
        return True
    lines = doubled_lines(ends, points, text, s.stutter_copies)  # the doubled lines that are final
    if peak_window_count(lines[lines < final], s.stutter_line_window)[0] >= s.min_stutter_lines * s.abort_margin:
        return True
    soup = [name for name in garble_rules(measure_garble(tokens, pieces, s, natural_end=False), s, scale=s.abort_margin) if name != "stutter"]
    return bool(soup)


def window_fires(tokens: np.ndarray, s: DetectorSettings = DEFAULT) -> bool:
    """Whether the loop abort rules hold on the window at the end of ``tokens``."""
    window = s.tail_window + s.recurrence_lookback + s.recurrence_ngram - 1
    sym = factorize(K.mix(tokens), s.run_unit, s.run_copies)
    first = max(0, len(sym.values) - window)
    runs = sym.lengths[first:][sym.units[first:] > 0]
    run = max(int(runs.max()) if runs.size else 0, sym.open_run[0])
    return bool(fired_rules(measure(sym.values[first:], s, run), s, natural_end=False, scale=s.abort_margin))


def reference_abort(tokens: np.ndarray, chunks: Iterable[int], s: DetectorSettings = DEFAULT,
                    pieces: Sequence[str] | None = None) -> int | None:
    """Token count at which the unshortened schedule aborts ``tokens`` fed in ``chunks``."""
    n, next_check, next_garble = 0, s.check_every, UPDATE_EVERY
    for size in chunks:
        if n >= len(tokens):
            return None
        n = min(len(tokens), n + size)
        if n >= next_check:
            next_check = n + s.check_every
            if n >= next_garble and pieces is not None:  # the stutter and soup figures' schedule
                next_garble = n + UPDATE_EVERY
                if garble_fires(tokens[:n], pieces[:n], s):
                    return n
            if window_fires(tokens[:n], s):
                return n
    return None
