"""Degenerate output that is not a loop: stutter and token soup.

A broken serving path does not only loop. Two other shapes are reported against engines:

* **Stutter**: every word written twice in place, "The capital capital of of France France is
  is Paris Paris.." (ik_llama.cpp #2006, buun-llama-cpp #116). There is no long period and
  no n-gram recurs at a distance, so the loop rules see nothing. What is left is local: many
  tokens are covered by a short unit (at most ``stutter_unit`` tokens) written exactly twice
  in a row. Exactly twice, because three or more copies are a run, which the loop rules
  already judge (``token_run``); so "ha" written 2,000 times, a row of zeros or a counting
  song's refrain never count here. A one-sided CUSUM over the per-token flag "covered by such
  a doubled unit" (reference ``stutter_rate``) fires when a stretch of about
  ``min_stutter_tokens`` fully doubled tokens has accumulated anywhere. Healthy text doubles a
  word now and then ("had had", "bye bye", Chinese reduplication 看看, a "1,000,000"), far
  below the reference rate; every word doubled is ~90% of tokens.
* **Token soup**: fluent-looking random vocabulary pieces across scripts, "Demp
  Schul.scalablytyped373ьallis gutterぼdiaeftry" (sglang #2354), "recless ${INFRINGEMENT
  Консульта" (ik_llama.cpp #1495), or a U+FFFD replacement character where a digit belongs
  (tt-metal #40960). Nothing repeats, so no repetition statistic can see it. The cheapest
  honest evidence in text alone: characters a healthy detokenizer never emits (U+FFFD, C0/C1
  control characters other than tab and line breaks, lone surrogates), and a letter of one
  alphabet written directly against a letter of another with no space, digit or punctuation
  between ("ьallis"). Pairs that healthy text writes that way are not counted: Latin or Greek
  next to Greek (units and maths: μm, Δx), Han and kana next to Latin (Chinese and Japanese
  write English words without spaces: 使用PyTorch的tensor), Han next to Hangul (hanja).
  A U+FFFD that is the last character of a text cut by max_tokens is not counted either: an
  engine that stops in the middle of a multi-byte character may emit one there.

These signals read the text (the pieces: :func:`split_text`'s, or the server's token strings),
so they work on engines that stream text only (ATOM). Without pieces (ids only) they are not
measured: a doubled unit counts only when it holds a word, which ids alone cannot tell.

What is not caught, honestly: soup written in one script only (random Latin subwords,
"diaeftry Sransself"), which needs a language model's view of the text (how unlikely it is
under a healthy engine), and stutter sparser than about a third of the words.

Every quantity here is a count over flags that no later token changes once ``lookahead``
tokens have followed (and a CUSUM or window count over them), so a stream can keep them up
to date exactly in O(new tokens), and an abort on them implies the whole-text verdict (see
:class:`GarbleStream`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._settings import DetectorSettings

STUTTER_SIGNALS = ("stutter",)
SOUP_SIGNALS = ("invalid_chars", "script_switches")

# Letters of each alphabet, as code point ranges (marks of the Indic and Thai scripts included:
# they sit inside words). Anything outside them is not a letter here.
_SCRIPT_RANGES = {
    "latin": [(0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x24F), (0x1E00, 0x1EFF)],
    "cyrillic": [(0x400, 0x52F)],
    "greek": [(0x370, 0x3FF), (0x1F00, 0x1FFF)],
    "armenian": [(0x531, 0x58F)],
    "hebrew": [(0x5D0, 0x5EA)],
    "arabic": [(0x620, 0x64A), (0x66E, 0x6D3), (0x750, 0x77F)],
    "devanagari": [(0x900, 0x97F)],
    "thai": [(0xE00, 0xE7F)],
    "georgian": [(0x10A0, 0x10FF)],
    "han_kana": [(0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF)],
    "hangul": [(0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF)],
}
_WRITTEN_TOGETHER = {frozenset(pair) for pair in (("latin", "greek"), ("cyrillic", "greek"), ("latin", "han_kana"),
                                                  ("han_kana", "hangul"))}
"""Script pairs healthy text writes letter against letter (see the module docstring); Greek
letters are symbols in every language."""


def _script_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(range starts, script id of each range, 0 in the gaps; foreign[a, b]: a letter of script
    a against one of script b is a switch). Ids start at 1; 0 is "not a letter"."""
    names = list(_SCRIPT_RANGES)
    edges = sorted((lo, hi, names.index(name) + 1) for name, ranges in _SCRIPT_RANGES.items() for lo, hi in ranges)
    starts, ids = [0], [0]
    for lo, hi, sid in edges:
        starts += [lo, hi + 1]
        ids += [sid, 0]
    foreign = np.zeros((len(names) + 1, len(names) + 1), dtype=bool)
    for a, x in enumerate(names, 1):
        for b, y in enumerate(names, 1):
            foreign[a, b] = a != b and frozenset((x, y)) not in _WRITTEN_TOGETHER
    return np.array(starts, dtype=np.uint32), np.array(ids, dtype=np.int8), foreign


_STARTS, _IDS, _FOREIGN = _script_table()
_INVALID = re.compile("[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_ASCII_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def soup_events(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Character offsets of the soup events in ``text``: (invalid characters, script switches).

    A switch is dated at the second letter (where the foreign letter starts). ASCII text can
    hold no switch, and ``str.isascii`` is O(1) in CPython, so English text costs one scan
    for control characters; other text is classified code point by code point in numpy."""
    if text.isascii():
        return np.array([m.start() for m in _ASCII_INVALID.finditer(text)], dtype=np.int64), np.zeros(0, dtype=np.int64)
    invalid = np.array([m.start() for m in _INVALID.finditer(text)], dtype=np.int64)
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    wide = points > 0x7F  # every switch has a non-ASCII letter on one side
    at = np.flatnonzero(wide[1:] | wide[:-1]) + 1  # at[k]: the pair (at[k] - 1, at[k]) holds one
    before = _IDS[np.searchsorted(_STARTS, points[at - 1], side="right") - 1]
    after = _IDS[np.searchsorted(_STARTS, points[at], side="right") - 1]
    return invalid, at[_FOREIGN[before, after]].astype(np.int64)


def lookahead(s: DetectorSettings) -> int:
    """Tokens that must follow a token before its doubled flag is final: the flag of token i
    reads at most up to token ``i + 3 * stutter_unit - 1`` (a third copy rules a double out)."""
    return 3 * s.stutter_unit - 1


def _all_in_window(eq: np.ndarray, width: int) -> np.ndarray:
    """``out[i] = eq[i : i + width].all()`` for every full window (doubling, as run_starts)."""
    window, have = eq, 1
    while have < width:
        step = min(have, width - have)
        window = window[:-step] & window[step:]
        have += step
    return window


_WORD = re.compile("[^\\W\\d_]{2}|[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
"""A word: two letters in a row, or one CJK or Hangul character (a single "x" is the 0x of hex)."""


def doubled_flags(x: np.ndarray, pieces: Sequence[str], max_unit: int) -> np.ndarray:
    """Per token: covered by a unit of at most ``max_unit`` tokens written exactly twice in a
    row (not preceded or followed by a third copy) that holds a word (see ``_WORD``; read
    from ``pieces``, aligned with ``x``) and no line break, and is not itself a repeat of a
    shorter unit ("a a" twice is a run of "a"). Numbers and punctuation doubled are data
    ("1,000,000", the "0,0" of a sparse CSV row, "0x00, 0x00"), a doubled line is layout (two
    equal rows of a bitmap).

    A unit of p tokens written twice needs p tokens in a row equal to the token p before them,
    so unit lengths with fewer such tokens are skipped (in healthy text, usually most of them),
    and only the candidate units are read as text."""
    n = len(x)
    flags = np.zeros(n, dtype=bool)
    if n < 2:
        return flags
    eqs = {p: x[p:] == x[:-p] for p in range(1, min(max_unit, n // 2) + 1)}  # eq[p][j]: x[j + p] == x[j]
    search = _WORD.search
    for p, eq in eqs.items():
        if np.count_nonzero(eq) < p:  # usual in healthy text
            continue
        square = _all_in_window(eq, p)  # square[i]: x[i : i + p] == x[i + p : i + 2p]
        if not square.any():
            continue
        exact = square.copy()
        exact[p:] &= ~square[:-p]  # a copy before it
        exact[:-p] &= ~square[p:]  # a copy after it
        for d in range(1, p):  # the unit has a smaller period d dividing p: a run, not a word
            if p % d == 0:
                exact &= ~_all_in_window(eqs[d], p - d)[: len(exact)]
        for i in np.flatnonzero(exact).tolist():
            unit = "".join(pieces[i : i + p])
            if "\n" not in unit and search(unit):
                flags[i : i + 2 * p] = True
    return flags


def cusum_steps(flags: np.ndarray, rate: float) -> np.ndarray:
    """Per-mille CUSUM increments of ``flags`` with reference ``rate`` (integers: exact)."""
    k = round(rate * 1000)
    return np.where(flags, 1000 - k, -k).astype(np.int64)


def cusum_from(steps: np.ndarray, start: int) -> np.ndarray:
    """``S[i] = max(0, S[i-1] + steps[i])`` with ``S[-1] = start`` (>= 0), without a Python loop."""
    total = start + np.cumsum(steps)
    return total - np.minimum(np.minimum.accumulate(total), 0)


def peak_window_count(positions: np.ndarray, window: int) -> tuple[int, int, int]:
    """(count, first, last): the most events of the sorted ``positions`` within any ``window``
    consecutive positions, and the first and last event of the first such window."""
    if not positions.size:
        return 0, 0, 0
    counts = np.arange(len(positions)) - np.searchsorted(positions, positions - window + 1) + 1
    last = int(np.argmax(counts))
    count = int(counts[last])
    return count, int(positions[last - count + 1]), int(positions[last])


@dataclass(frozen=True)
class Garble:
    """The stutter and soup measurements of one text (tokens, and pieces when known)."""

    doubled: np.ndarray
    """Per token: covered by a unit written exactly twice in a row (see :func:`doubled_flags`)."""
    stutter_score: int
    """Highest CUSUM of the doubled flags anywhere (per mille)."""
    stutter_start: int
    stutter_end: int
    """Tokens ``[stutter_start, stutter_end)`` of that CUSUM's excursion (0, 0: none)."""
    measured: bool
    """Whether the text (pieces) was known: without it nothing here is measured."""
    invalid: np.ndarray
    """Token index of each invalid character (a trailing U+FFFD of a cut text left out)."""
    switches: np.ndarray
    """Token index of each script switch inside a word."""
    switch_peak: tuple[int, int, int]
    """(count, first token, last token) of the most switches within ``script_window`` tokens."""
    invalid_offsets: np.ndarray
    switch_offsets: np.ndarray
    """Character offsets of the same events, for the examples."""


_ONSET_RATE = 0.1
"""Reference of the CUSUM that dates a stutter's start: the alarm CUSUM (stutter_rate) of a
stutter of a quarter of the words touches zero now and then after it began; at 0.1 the
excursion starts where doubled words began to come more often than in healthy text (~0.5%)."""


def measure_garble(tokens: np.ndarray, pieces: Sequence[str] | None, s: DetectorSettings, *, natural_end: bool,
                   text: str | None = None) -> Garble:
    """Stutter and soup measurements of a whole text (see the module docstring); nothing is
    measured without its pieces. ``text``: the pieces joined, when the caller has it."""
    empty = np.zeros(0, dtype=np.int64)
    if pieces is None:
        return Garble(np.zeros(0, dtype=bool), 0, 0, 0, False, empty, empty, (0, 0, 0), empty, empty)
    doubled = doubled_flags(tokens, pieces, s.stutter_unit)
    score = cusum_from(cusum_steps(doubled, s.stutter_rate), 0) if len(tokens) else np.zeros(1, dtype=np.int64)
    end = int(np.argmax(score))
    top = int(score[end])
    start = 0
    if top:  # dated by a CUSUM with a lower reference, which a sparse stutter keeps above zero
        dating = cusum_from(cusum_steps(doubled[: end + 1], _ONSET_RATE), 0)
        zeros = np.flatnonzero(dating == 0)
        start = int(zeros[-1]) + 1 if zeros.size else 0
    text = "".join(pieces) if text is None else text
    invalid_at, switch_at = soup_events(text)
    if not natural_end and invalid_at.size and invalid_at[-1] == len(text) - 1 and text[-1] == "\ufffd":
        invalid_at = invalid_at[:-1]  # cut in the middle of a multi-byte character
    invalid = switches = empty
    if invalid_at.size or switch_at.size:  # token index of each event
        ends = np.cumsum([len(p) for p in pieces])
        invalid = np.searchsorted(ends, invalid_at, side="right")
        switches = np.searchsorted(ends, switch_at, side="right")
    return Garble(doubled, top, start if top else 0, end + 1 if top else 0, True, invalid, switches,
                  peak_window_count(switches, s.script_window), invalid_at, switch_at)


def garble_rules(g: Garble, s: DetectorSettings, *, scale: float) -> tuple[str, ...]:
    """Names of the stutter and soup rules that hold; ``scale`` multiplies the thresholds (the
    early-abort margin). The finish reason does not matter: neither shape is a model's choice
    to stop or go on."""
    fired = []
    if g.stutter_score >= (1000 - round(s.stutter_rate * 1000)) * s.min_stutter_tokens * scale:
        fired.append("stutter")
    if g.invalid.size >= s.min_invalid_chars * scale:
        fired.append("invalid_chars")
    if g.switch_peak[0] >= s.min_script_switches * scale:
        fired.append("script_switches")
    return tuple(fired)


UPDATE_EVERY = 512
"""A stream brings its stutter and soup figures up to date at the first check at or after
every 256 tokens: a check costs ~20 us of numpy calls whatever its size, which every 64
tokens would halve the speed of a text-only stream; a stutter or a soup is then aborted at
most ~256 tokens later than it could be."""


class GarbleStream:
    """The stutter and soup rules of a stream, kept up to date in O(new tokens) per update.

    The doubled flag of token i is final once ``lookahead`` more tokens have arrived; the CUSUM
    over the final flags is carried from check to check (``cusum_from``), so at every check it
    equals the CUSUM that :func:`measure_garble` computes over the same flags of the whole
    text. Soup events are final as soon as their piece arrives (a switch reads the previous
    piece's last character), except an invalid character that is the last one received (it
    might be a cut multi-byte character). Whole-text values can only be higher (more flags and
    events, computed up to the text's end), and every rule is a threshold on a maximum or a
    count that only grows: so when a check fires, ``analyze`` of the text received so far and
    of any continuation of it fire too.
    """

    def __init__(self, s: DetectorSettings, scale: float) -> None:
        self._s, self._scale = s, scale
        self._ahead = lookahead(s)
        self._next_update = UPDATE_EVERY
        self._done = 0  # tokens whose doubled flag is final and counted
        self._score = 0
        self._peak = 0
        self._steps_k = round(s.stutter_rate * 1000)
        self._stutter_alarm = (1000 - self._steps_k) * s.min_stutter_tokens * scale
        self._pieces_done = 0  # pieces whose soup events are counted
        self._last_char = ""
        self._invalid = 0
        self._held_invalid = False  # the last character received is an invalid one, not yet counted
        self._switches: list[int] = []  # token index of the recent script switches
        self._fired_soup = False

    def fires(self, x: np.ndarray, n: int, pieces: Sequence[str] | None) -> bool:
        """Whether a stutter or soup rule holds on the first ``n`` tokens ``x`` (mixed or raw
        ids) and their ``pieces`` (None when the stream has no text: nothing to measure)."""
        s = self._s
        if pieces is None or n < self._next_update:
            return False
        self._next_update = n + UPDATE_EVERY
        final = n - self._ahead
        if final > self._done:
            lo = max(0, self._done - self._ahead)
            flags = doubled_flags(x[lo:n], pieces[lo:n], s.stutter_unit)[self._done - lo : final - lo]
            score = cusum_from(cusum_steps(flags, s.stutter_rate), self._score) if flags.any() else None
            if score is None:  # nothing doubled: the CUSUM only falls
                self._score = max(0, self._score - self._steps_k * len(flags))
            else:
                self._score = int(score[-1])
                self._peak = max(self._peak, int(score.max()))
            self._done = final
        if self._peak >= self._stutter_alarm:
            return True
        if len(pieces) <= self._pieces_done:
            return False
        text = self._last_char + "".join(pieces[self._pieces_done : n])
        invalid_at, switch_at = soup_events(text)
        offset = len(self._last_char)
        if switch_at.size:
            ends = np.cumsum([len(p) for p in pieces[self._pieces_done : n]]) + offset
            new = self._pieces_done + np.searchsorted(ends, switch_at, side="right")
            # Events more than a window before the new ones can share no window with them.
            keep = [e for e in self._switches if e > int(new[0]) - s.script_window]
            self._switches = keep + new.tolist()
            if peak_window_count(np.array(self._switches, dtype=np.int64), s.script_window)[0] >= s.min_script_switches * self._scale:
                self._fired_soup = True
        self._invalid += int(np.count_nonzero(invalid_at >= offset)) + self._held_invalid
        self._held_invalid = bool(invalid_at.size) and int(invalid_at[-1]) == len(text) - 1 and text[-1] == "\ufffd"
        self._invalid -= self._held_invalid
        self._last_char = text[-1:] or self._last_char
        self._pieces_done = n
        return self._fired_soup or self._invalid >= s.min_invalid_chars * self._scale


def category_of(signal: str) -> str:
    """The kind of degenerate output a rule names: loop, stutter or soup."""
    return "stutter" if signal in STUTTER_SIGNALS else "soup" if signal in SOUP_SIGNALS else "loop"


def garble_extent(g: Garble, fired: tuple[str, ...], tokens: np.ndarray, s: DetectorSettings) -> tuple[int, int, int]:
    """(period, onset, end) in tokens of the stretch the first firing stutter or soup rule
    describes: the stutter CUSUM's excursion from its first doubled token, with the first
    doubled unit's length; or the soup events from the first invalid character, else the
    densest window of script switches (period 0: soup has no unit)."""
    if "stutter" in fired:
        first = g.stutter_start + int(np.argmax(g.doubled[g.stutter_start : g.stutter_end]))
        return _unit_at(tokens, first, s.stutter_unit), first, g.stutter_end
    if "invalid_chars" in fired:
        return 0, int(g.invalid[0]), int(g.invalid[-1]) + 1
    _, first, last = g.switch_peak
    return 0, first, last + 1


def _unit_at(tokens: np.ndarray, i: int, max_unit: int) -> int:
    """Length of the smallest unit written twice from token ``i``."""
    for p in range(1, max_unit + 1):
        if i + 2 * p <= len(tokens) and np.array_equal(tokens[i : i + p], tokens[i + p : i + 2 * p]):
            return p
    return 1


_EXAMPLES = 5
_AROUND = 12  # characters shown either side of a soup event


def garble_examples(g: Garble, fired: tuple[str, ...], tokens: np.ndarray, pieces: Sequence[str] | None,
                    s: DetectorSettings) -> tuple[str, ...]:
    """Up to five places where the stutter and soup rules that fired found their evidence, as
    text: doubled units from the stutter stretch (as ids when no pieces are known), then the
    characters around invalid characters and script switches."""
    out: list[str] = []
    if "stutter" in fired:
        i, end = g.stutter_start, g.stutter_end
        while i < end and len(out) < _EXAMPLES:
            if g.doubled[i]:
                p = _unit_at(tokens, i, s.stutter_unit)
                unit = tokens[i : i + 2 * p]
                out.append("".join(pieces[i : i + 2 * p]) if pieces is not None else " ".join(str(t) for t in unit))
                i += 2 * p
            else:
                i += 1
    if pieces is not None:
        text = "".join(pieces)
        for name, offsets in (("invalid_chars", g.invalid_offsets), ("script_switches", g.switch_offsets)):
            if name in fired:
                for at in offsets[: _EXAMPLES - len(out)].tolist():
                    lo, hi = max(0, at - _AROUND), at + _AROUND
                    lo = text.find(" ", lo, at) + 1 or lo  # whole words around the event
                    right = text.rfind(" ", at + 1, hi)
                    hi = right if right > at else hi
                    out.append(_shown(text[lo:hi]))
    return tuple(out[:_EXAMPLES])


def _shown(text: str) -> str:
    """Invalid characters made visible: U+FFFD as itself, the others as \\xNN or \\uNNNN."""
    return _INVALID.sub(lambda m: m.group() if m.group() == "\ufffd" else ascii(m.group())[1:-1], text)
