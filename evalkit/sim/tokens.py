"""The simulator's tokeniser: a deterministic split of text, not a learned vocabulary.

A token is a run of word characters or a run of punctuation, together with the whitespace
before it (so ``####`` or ``...`` is one token, as in real BPE vocabularies, rather than a
run of identical tokens that a repetition detector would have to excuse); whitespace at the
very end of a text is a token of its own. So every character belongs to exactly one token
and ``"".join(tokenize(text)) == text`` always holds, which is what lets the server stream
tokens and still match the non-streamed text exactly.
Token ids are a stable hash of the token string (crc32 mod 2**17, a vocabulary about the size
of a real model's): clients such as evalkit's repetition detector can ask for ids
(``return_tokens_as_token_ids``) and get the same id for the same token in every run.
"""

from __future__ import annotations

import re
import zlib

VOCAB_SIZE = 2**17
"""Size of the id space token ids are hashed into."""

_TOKEN = re.compile(r"\s*(?:\w+|[^\w\s]+)|\s+")


def tokenize(text: str) -> list[str]:
    """Split ``text`` into tokens whose concatenation is ``text``."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    """Number of tokens in ``text`` (prompt sizes for ``usage`` and the context-length check)."""
    return len(_TOKEN.findall(text))


def token_id(token: str) -> int:
    """Stable id of a token string, the same in every process and run."""
    return zlib.crc32(token.encode("utf-8")) % VOCAB_SIZE
