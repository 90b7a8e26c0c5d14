"""What each character of a text is, for the stutter and soup rules: its script, whether it
is a letter or starts a word, whether a healthy detokenizer could have written it; and the
soup events (invalid characters, script switches) read from that (see ``_garble``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

# Letters of each alphabet, as code point ranges (marks of the Indic and Thai scripts included:
# they sit inside words). Anything outside them is not a letter here.
_SCRIPT_RANGES = {
    "latin": [(0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x24F), (0x1E00, 0x1EFF)],
    "cyrillic": [(0x400, 0x52F)],
    "greek": [(0x370, 0x3FF), (0x1F00, 0x1FFF)],
    "armenian": [(0x531, 0x58F)],
    "hebrew": [(0x5D0, 0x5EA)],
    "arabic": [(0x620, 0x63F), (0x641, 0x64A), (0x66E, 0x6D3), (0x750, 0x77F)],
    "devanagari": [(0x900, 0x97F)],
    "thai": [(0xE00, 0xE7F)],
    "georgian": [(0x10A0, 0x10FF)],
    "han_kana": [(0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF)],
    "hangul": [(0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF)],
}
_WRITTEN_TOGETHER = {frozenset(pair) for pair in (("latin", "greek"), ("cyrillic", "greek"), ("latin", "han_kana"),
                                                  ("han_kana", "hangul"), ("latin", "hangul"))}
"""Script pairs healthy text writes letter against letter (see the module docstring); Greek
letters are symbols in every language, and Korean attaches its particles to a Latin word
("--mtime으로", "%s초": GNU tar's Korean catalogue)."""


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
_BMP_SCRIPT = _IDS[np.searchsorted(_STARTS, np.arange(0x10000, dtype=np.uint32), side="right") - 1]
"""Script id of every code point below U+10000 (every script of ``_SCRIPT_RANGES`` is there):
one look-up per character instead of a binary search."""


def _script_of(points: np.ndarray) -> np.ndarray:
    return _BMP_SCRIPT.take(np.minimum(points, 0xFFFF))


ASCII_LETTER = np.zeros(128, dtype=bool)
ASCII_LETTER[[*range(0x41, 0x5B), *range(0x61, 0x7B)]] = True
_LATIN, _HAN_KANA, _HANGUL = (list(_SCRIPT_RANGES).index(name) + 1 for name in ("latin", "han_kana", "hangul"))
INVALID = re.compile("[\ufffd\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
ASCII_INVALID = np.zeros(128, dtype=bool)
ASCII_INVALID[[*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F]] = True
"""Control characters a healthy detokenizer never emits. Tab, line feed, vertical tab, form
feed and carriage return are plain text: a form feed is the page break of the GNU licences
(GPL-1, LGPL-2 and 2.1), of CPython's ``email`` package and of many C headers (issue 36)."""
_BMP_INVALID = np.zeros(0x10000, dtype=bool)
_BMP_INVALID[:128] = ASCII_INVALID
_BMP_INVALID[[*range(0x80, 0xA0), *range(0xD800, 0xE000), 0xFFFD]] = True
_FORMAT_END = re.compile(r"(?:%[-+ #0'*]*\d*\$?[-+ #0'*]*\d*(?:\.\d*)?[hlLqjzt]{0,2}|\\)[A-Za-z]\Z")
"""A printf conversion or a backslash escape ending in a Latin letter ("%s", "%ld", "%1$s",
"\\n"): written against a word of another script in every gettext catalogue ("%sФайл",
"%liд", "\\tПравы"), it is not a letter of a word."""
WORD = re.compile(r"(?<![^\W_])[^\W\d_]{2}|[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
"""A word: two letters in a row that do not follow a letter or digit (the letters of "0xffff",
"3rd" or "10px" are part of a number), or one CJK or Hangul character."""
FORMAT_BEFORE = 16
"""Characters before a switch that :data:`_FORMAT_END` reads (a stream keeps as many)."""


def codepoints(text: str) -> np.ndarray:
    """The code points of ``text`` (uint8 for ASCII text, whose encoding is one copy; uint32
    otherwise, lone surrogates kept)."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def soup_events(text: str, points: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Character offsets of the soup events in ``text``: (invalid characters, script switches).

    A switch is dated at the second letter (where the foreign letter starts). ASCII text can
    hold no switch, and ``str.isascii`` is O(1) in CPython, so English text costs one table
    look-up per character; other text is classified code point by code point in numpy.
    ``points``: :func:`codepoints` of ``text`` when the caller has them. An ESC that starts a
    terminal control sequence ("ESC [", colours in a captured log or in GNU's en@boldquot
    catalogues) is text."""
    points = codepoints(text) if points is None else points
    if points.dtype == np.uint8:
        invalid = np.flatnonzero(ASCII_INVALID.take(points))
        return _without_csi(invalid, points), np.zeros(0, dtype=np.int64)
    wide = points > 0x7F  # every switch has a non-ASCII letter on one side
    bmp = points if int(points.max()) <= 0xFFFF else np.minimum(points, 0xFFFF)
    invalid = _without_csi(np.flatnonzero(_BMP_INVALID.take(bmp)), points)
    at = np.flatnonzero(wide[1:] | wide[:-1]) + 1  # at[k]: the pair (at[k] - 1, at[k]) holds one
    before = _script_of(points[at - 1])
    foreign = _FOREIGN[before, _script_of(points[at])]
    at, latin = at[foreign], before[foreign] == _LATIN
    if latin.any():  # a Latin letter ending a printf conversion or an escape is none
        search = _FORMAT_END.search
        formats = [search(text, max(0, a - FORMAT_BEFORE), a) is not None for a in at[latin].tolist()]
        keep = np.ones(len(at), dtype=bool)
        keep[np.flatnonzero(latin)[np.array(formats, dtype=bool)]] = False
        at = at[keep]
    return invalid, at.astype(np.int64)


def _without_csi(invalid: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``invalid`` without the ESC characters that a "[" follows."""
    if not invalid.size:
        return invalid
    after = np.append(points, points.dtype.type(0))[invalid + 1]
    return invalid[~((points[invalid] == 0x1B) & (after == 0x5B))]


def is_letter(points: np.ndarray) -> np.ndarray:
    """Whether each code point is a letter of one of the alphabets of ``_SCRIPT_RANGES``
    (CJK and Hangul excepted: each of their characters is a piece of its own)."""
    if points.dtype == np.uint8:
        return ASCII_LETTER.take(points)
    return BMP_ALPHABET.take(np.minimum(points, 0xFFFF))


_NOT_WORDS = np.array([0, 0xC0, 0x2000, 0x2C00, 0x3000, 0x3040, 0xFE30, 0xFE50, 0xFF00, 0xFF21], dtype=np.uint32)
"""Code point ranges (start, end) that start no word: ASCII (its letters are looked up apart),
Latin-1 punctuation, general punctuation and symbols, CJK punctuation, full-width punctuation."""
BMP_ALPHABET = (_BMP_SCRIPT > 0) & (_BMP_SCRIPT != _HAN_KANA) & (_BMP_SCRIPT != _HANGUL)
BMP_WORD = np.searchsorted(_NOT_WORDS, np.arange(0x10000, dtype=np.uint32), side="right") % 2 == 0
BMP_WORD[:128] = ASCII_LETTER
BMP_LOWER = np.array([chr(c).islower() for c in range(0x3000)] + [False] * (0x10000 - 0x3000), dtype=bool)
BMP_LOWER[0x10D0:0x1100] = False  # Georgian Mkhedruli: "lowercase" since Unicode 11, but no text has capitals
"""Lowercase letters of the scripts that write capitals (below U+3000: they are all there)."""
ASCII_LOWER = BMP_LOWER[:128].copy()


def piece_ends(pieces: Sequence[str]) -> np.ndarray:
    """End offset of each piece in the joined text."""
    return np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)))


def join_pieces(pieces: Sequence[str], text: str | None = None) -> tuple[str, np.ndarray]:
    """The text of ``pieces`` and :func:`piece_ends`. Joining them once more with a NUL between
    pieces, whose positions numpy finds, costs about half of measuring every piece in Python;
    a text that holds a NUL itself (soup) is measured piece by piece. ``text``: the pieces
    joined, when the caller has it (a text it split)."""
    joined = "".join(pieces) if text is None else text
    marked = "\x00".join(pieces)
    cuts = np.flatnonzero(codepoints(marked) == 0)
    if len(cuts) != max(0, len(pieces) - 1):
        return joined, piece_ends(pieces)
    ends = np.empty(len(pieces), dtype=np.int64)
    ends[:-1] = cuts - np.arange(len(cuts))
    ends[-1:] = len(marked) - len(cuts)
    return joined, ends  # a second join is cheaper than removing the NULs
