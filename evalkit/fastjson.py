"""JSON on the hot wire paths: the simulator's answers and events, and the answers evals decode.

A demo cell moves ~60 MB of JSON: 64 teacher-forced answers of 4,000 logprob entries each, 16k
streamed events, the divergence eval's logprobs. With the standard library, encoding them was a
fifth of the simulator's CPU and decoding them a sixth of evalkit's (py-spy, one demo cell).
orjson (a maintained C extension, docs/design.md) does both several times faster with the same
meaning:

* `dumps` writes what ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` writes, as
  UTF-8 bytes, up to the spelling of a float's exponent (``1e-5`` for ``1e-05``: the same
  number). It never writes NaN or Infinity (JSON has neither; a non-finite float is ``null``).
* `loads` parses what ``json.loads`` parses. orjson refuses the NaN and Infinity literals some
  servers still send, so a document it refuses is parsed again by the standard library, which
  accepts those and raises its own `json.JSONDecodeError` for anything truly malformed: callers
  see exactly the errors they saw before.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON (module docstring); dict keys that are not strings are written as strings."""
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)


def loads(data: bytes | str) -> Any:
    """The document in `data`; malformed input raises `json.JSONDecodeError` (module docstring)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
