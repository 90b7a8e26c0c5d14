"""Each engine's finish reasons in evalkit's terms, and how each profile asks for token ids.

The raw strings are the engines' own, read where each profile's docstring cites: ATOM at
0e9804c21 (atom/model_engine/scheduler.py), vLLM 0.34.0 (vllm/v1/engine/__init__.py:37), SGLang
0.5.23 (entrypoints/openai/protocol.py:550).
"""

from __future__ import annotations

import pytest

from evalkit.evals.repetition import RepetitionSettings, ids_request
from evalkit.profiles import get_profile
from evalkit.wire import Wire


@pytest.mark.parametrize(("profile", "raw", "canonical"), [
    ("atom", "max_tokens", "length"), ("atom", "eos", "stop"), ("atom", "stop_sequence", "stop"),
    ("atom", "stop_128001", "stop"), ("atom", "aborted", "aborted"), ("atom", "stop", "stop"),
    ("atom", "unschedulable: prompt too long", None), ("atom", "stop_", None), ("atom", "length", None),
    ("sim-atom", "max_tokens", "length"),
    ("vllm", "length", "length"), ("vllm", "stop", "stop"), ("vllm", "abort", "aborted"),
    ("vllm", "repetition", "length"),
    ("sglang", "length", "length"), ("sglang", "stop", "stop"), ("sglang", "abort", "aborted"),
    ("sim", "length", "length"), ("command", "max_tokens", None), ("command", None, None),
])
def test_raw_finish_reasons_map_to_canonical_ones(profile: str, raw: str | None, canonical: str | None) -> None:
    assert get_profile(profile).wire().finish(raw) == canonical


def test_how_each_profile_asks_for_token_ids() -> None:
    asks = {name: get_profile(name).wire().token_ids for name in ("vllm", "sim", "sglang", "atom", "sim-atom")}
    assert asks == {"vllm": "return_tokens_as_token_ids", "sim": "return_tokens_as_token_ids",
                    "sglang": "return_token_ids", "atom": None, "sim-atom": None}
    # a server evalkit did not start may not be the profile's engine: no ids, but its reasons
    external = get_profile("sglang").wire(token_ids=False)
    assert external == Wire(finish_reasons=get_profile("sglang").finish_reasons, token_ids=None)


def test_chat_through_sglang_splits_text() -> None:
    """SGLang 0.5.23 answers `return_token_ids` on a chat stream with an error
    (entrypoints/openai/serving_chat.py:1315-1320): the long-generation check does not ask there."""
    sglang, vllm = get_profile("sglang").wire(), get_profile("vllm").wire()
    assert ids_request(RepetitionSettings(endpoint="completions"), sglang) == "return_token_ids"
    assert ids_request(RepetitionSettings(endpoint="chat"), sglang) is None
    assert ids_request(RepetitionSettings(endpoint="chat"), vllm) == "return_tokens_as_token_ids"
