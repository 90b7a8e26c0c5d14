"""What an engine's answers look like on the wire, in the terms evals read them.

Engines name the end of a generation in their own words: ATOM says `max_tokens`, `eos`,
`stop_sequence`, `stop_<token id>` or `aborted` where vLLM and SGLang say `length`, `stop` or
`abort`. Each engine's profile maps its raw reasons to evalkit's canonical three, and evals only
ever judge the canonical one (the detector's cut vs natural-end rules, `hit_max_tokens`,
`cut_by_max_gen_toks`) while their samples keep the raw one beside it, so a reader sees what
the engine said. The map reaches the evals as a `Wire` in their `EvalContext`: no eval knows a
profile by name.

This module sits below everything that uses it (profiles, evals, the run), like stats/tests.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

Canonical = Literal["stop", "length", "aborted"]
"""evalkit's finish reasons: the model ended the text itself (`stop`), the text was cut while
the model was still generating (`length`: max_tokens, or an engine-side cut), or the request was
ended early (`aborted`: by the engine, or by evalkit's own early abort of a collapsed stream)."""
CANONICAL: tuple[Canonical, ...] = ("stop", "length", "aborted")

FinishMap = Mapping[str, Canonical]
"""Raw finish reason pattern (a regex matched against the whole raw string) -> canonical reason."""

OPENAI_FINISH_REASONS: FinishMap = MappingProxyType({"stop": "stop", "length": "length", "tool_calls": "stop"})
"""The OpenAI API's reasons: what an engine evalkit knows nothing more about is assumed to send."""

TokenIdsRequest = Literal["return_tokens_as_token_ids", "return_token_ids"]
"""How a completions request asks for exact token ids: vLLM's `return_tokens_as_token_ids` with
`logprobs` (ids as `token_id:N` strings in `logprobs.tokens`), or `return_token_ids: true`
(SGLang's and vLLM's: each streamed choice carries its new ids in `token_ids`)."""


def canonical_finish(raw: str | None, finish_reasons: FinishMap) -> Canonical | None:
    """The canonical reason for an engine's raw one; None when the engine said nothing or said
    something its map does not know (the detector then treats the text as cut, its strict side)."""
    if raw is None:
        return None
    for pattern, reason in finish_reasons.items():
        if re.fullmatch(pattern, raw):
            return reason
    return None


@dataclass(frozen=True)
class Wire:
    """The engine's dialect as an eval needs it: its finish-reason map and how it returns ids."""

    finish_reasons: FinishMap = field(default_factory=lambda: OPENAI_FINISH_REASONS)
    token_ids: TokenIdsRequest | None = None
    """How to ask for exact token ids; None: the server returns none (the detector splits text)."""

    def finish(self, raw: str | None) -> Canonical | None:
        """The canonical reason for `raw` under this engine's map."""
        return canonical_finish(raw, self.finish_reasons)
