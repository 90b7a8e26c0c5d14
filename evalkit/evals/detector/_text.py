"""A tokenizer-free split of text into pieces, for servers that return text but no token ids.

The pieces imitate a byte-level BPE pre-tokenizer (GPT-2 / cl100k style): a word with its
leading space, digit groups of at most three, one piece per CJK character, and runs capped as
BPE merges cap them: letters and punctuation at 16 characters, spaces at 16, line breaks at
four. Every piece is short, so a loop written without spaces ("hahaha...", a CJK phrase)
still comes out as many pieces. Token counts then come out close to a real
tokenizer's, so thresholds written in tokens mean roughly the same thing on both paths: a long
line of dashes is a few pieces, as BPE merges make it, while a model stuck emitting newlines
still shows up as a run of equal pieces.

Ids are the first 63 bits of a BLAKE2b digest of the piece: stable across processes and
machines (Python's ``hash()`` of a str is salted per process), and collisions between the few
thousand distinct pieces of a text are negligible.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"  # kana, CJK, Hangul

_PIECE = re.compile(
    r"'(?:s|t|re|ve|m|ll|d)\b"  # English contractions, as GPT-2 splits them
    rf"|[{_CJK}]"  # one CJK / kana / Hangul character: these scripts write no spaces
    rf"| ?[^\W\d_{_CJK}]{{1,16}}"  # a word (letters only) with its leading space, capped
    r"| ?\d{1,3}"  # digits in groups of at most three
    r"| ?(?:[^\w\s]|_){1,16}"  # a punctuation run, capped like BPE merges
    r"|[^\S\r\n]{0,16}(?:\r?\n){1,4}"  # up to four line breaks with the spaces before them
    r"|[^\S\r\n]{1,16}(?!\S)"  # a run of spaces that the next piece does not start with
    r"|\s",  # anything else: a lone space before a digit or punctuation piece, a lone \r
)
HELD_PIECES = 2
"""Pieces of a growing text that may still change when more text arrives: the last piece can
grow, and a contraction ("'ll") can merge the last two. Every piece before them is final, so
splitting a stream chunk by chunk while holding these back equals splitting the whole text."""


def split_pieces(text: str) -> list[str]:
    """Split ``text`` into pieces; ``"".join(split_pieces(text)) == text`` always holds."""
    return _PIECE.findall(text)


_IDS: dict[str, int] = {}
"""Ids of pieces seen before, shared by every call (a GSM8K cell splits 1319 answers that use
the same few thousand pieces); cleared when it reaches ``_IDS_MAX`` entries."""
_IDS_MAX = 1 << 17


def _new_id(piece: str) -> int:
    value = int.from_bytes(hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little") >> 1
    if len(_IDS) >= _IDS_MAX:
        _IDS.clear()
    _IDS[piece] = value
    return value


def piece_ids(pieces: list[str]) -> np.ndarray:
    """Stable int64 ids of ``pieces`` (equal pieces get equal ids in every process)."""
    known = _IDS.get
    return np.array([known(piece) or _new_id(piece) for piece in pieces], dtype=np.int64)


def split_text(text: str) -> np.ndarray:
    """Token-like int64 ids of ``text`` without a tokenizer (see the module docstring)."""
    return piece_ids(split_pieces(text))


@dataclass(frozen=True)
class SplitText:
    """A text already split into :func:`split_pieces` pieces and their :func:`piece_ids` (a
    stream splits its text as it comes; its final analysis need not split it again)."""

    pieces: Sequence[str]
    ids: np.ndarray
