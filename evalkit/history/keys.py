"""A recorded cell's comparability key as the history keeps it, and what makes two series' keys differ.

A history series is one comparability key (store/comparability.py) spanning builds: the engine's
commit is the series' time axis, everything else that decides a figure (the eval set-up, the
question set after `--limit`, the model, the engine's arguments and environment, the devices) is
the same along it. The history keeps nothing from the environment, so the key is stored with its
engine arguments and environment replaced by a hash of each (`stored_key`): two launches that
differ there still differ, and a reader who wants the flag's name runs `evalkit compare` on the
two runs. A cell recorded before keys were (m006) has the key its row can tell: each eval's set-up
fingerprint and number of questions, the model and the engine (`row_key`); a part unknown on
either side is no difference (`comparability.differences`), so such a cell joins the series of
the keys it agrees with.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from evalkit.store.comparability import ComparabilityKey, EvalKey, Field, compare_keys, key_of
from evalkit.store.records import CellRecord, RunRecord

SPANS: tuple[Field, ...] = ("build",)
"""The parts a series expects to change from point to point: the build is its time axis."""
HIDDEN_WORDS = {"argv": "engine arguments differ", "env": "engine environment differs"}
"""How a difference in a hashed part is said (`evalkit compare` of the two runs names it)."""


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def stored_key(run: Mapping[str, Any], record: Mapping[str, Any]) -> str | None:
    """The key of a cell of `run` as the history stores it (JSON; its argv and env as hashes); None
    where the records do not read as a run and a cell (a hand-written row: it keeps the legacy key)."""
    try:
        key = key_of(RunRecord.model_validate(dict(run)), CellRecord.model_validate(dict(record)))
    except (ValidationError, ValueError, TypeError, KeyError, AttributeError):
        return None
    hidden = key.model_copy(update={"argv": None if key.argv is None else (f"sha256:{_hash(key.argv)}",),
                                    "env": None if key.env is None else (("sha256", _hash(key.env)),)})
    return hidden.model_dump_json()


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> ComparabilityKey:
    return ComparabilityKey.model_validate_json(text)


def row_key(stored: str | None, eval_name: str, setups: Mapping[str, Any], metrics: Mapping[str, float],
            model: str, engine: str) -> ComparabilityKey:
    """The key a recorded cell's metric of eval `eval_name` is compared by: its `stored` key (or,
    recorded before m006, the key its row tells: `setups`, `metrics`' n, `model`, `engine`) with
    only that eval's part, so a change to another eval's set-up does not split this metric's series."""
    key = None
    if stored:
        try:
            key = _parsed(stored)
        except ValidationError:
            key = None
    if key is None:
        setup = setups.get(eval_name) or {}
        n = metrics.get(f"{eval_name}.n")
        fields = tuple(sorted((k, json.dumps(v, sort_keys=True, default=str, separators=(",", ":")))
                              for k, v in (setup.get("fields") or {}).items()))
        evals = (EvalKey(name=eval_name, setup=setup.get("hash"), fields=fields,
                         questions=int(n) if n else None),)
        return ComparabilityKey(evals=evals, model=model, engine=engine)
    return key.model_copy(update={"evals": tuple(e for e in key.evals if e.name == eval_name)})


def key_differences(a: ComparabilityKey, b: ComparabilityKey) -> list[str]:
    """What differs between two series' keys beyond their builds, in words ([]: one series)."""
    return [HIDDEN_WORDS.get(d.field, d.words) for d in compare_keys(a, b, ("the earlier", "the later"))
            if d.field not in SPANS]


def digest(key: ComparabilityKey) -> str:
    """A series' key as a short name: the digest of all but its build."""
    return key.digest_except(*SPANS)
