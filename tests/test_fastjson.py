"""evalkit/fastjson.py: orjson on the wire paths, meaning exactly what the standard library meant."""

from __future__ import annotations

import json

import pytest

from evalkit import fastjson

ANSWER = {
    "id": "cmpl-1", "object": "text_completion", "created": 1,
    "choices": [{"index": 0, "text": "Ça fait 42 — 答え", "finish_reason": "length",
                 "logprobs": {"tokens": ["Ça", " fait"], "token_logprobs": [None, -0.25],
                              "top_logprobs": [None, {" fait": -0.25}], "text_offset": [0, 2]}}],
    "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
}


def test_dumps_writes_the_standard_librarys_compact_utf8_bytes() -> None:
    assert fastjson.dumps(ANSWER) == json.dumps(ANSWER, ensure_ascii=False, separators=(",", ":")).encode()


def test_floats_round_trip_to_the_same_number() -> None:
    values = [1e-05, -9999.0, 0.1 + 0.2, -1.2345678901234567e-300, 3.0]
    assert json.loads(fastjson.dumps(values)) == values


def test_loads_reads_what_the_standard_library_reads_nan_included() -> None:
    text = '{"logprob": NaN, "worst": -Infinity, "ok": [1, 2.5, "x"]}'
    got, expected = fastjson.loads(text.encode()), json.loads(text)
    assert got["ok"] == expected["ok"] and got["worst"] == expected["worst"] and got["logprob"] != got["logprob"]


@pytest.mark.parametrize("bad", [b'{"choices": [', b"", b'{"a": 1}}'])
def test_malformed_json_raises_the_standard_librarys_error(bad: bytes) -> None:
    with pytest.raises(json.JSONDecodeError):
        fastjson.loads(bad)
