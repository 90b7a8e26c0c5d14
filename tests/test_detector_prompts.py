"""The shipped long-generation prompt set and its loader."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import pytest

from evalkit.errors import ConfigError
from evalkit.evals.prompts import load_prompt_set

KINDS = {"story", "reasoning", "explanation", "math", "code", "essay", "howto", "dialogue", "structured"}


def test_long_generation_v1_is_large_varied_and_well_formed() -> None:
    s = load_prompt_set()
    assert s.id == "long_generation_v1"
    assert len(s.prompts) >= 64
    assert all(re.fullmatch(r"lg-\d{3}", p.id) for p in s.prompts)
    assert len({p.id for p in s.prompts}) == len({p.prompt for p in s.prompts}) == len(s.prompts)
    assert {p.kind for p in s.prompts} == KINDS
    assert all(len(p.prompt) > 100 for p in s.prompts)  # each asks for a long answer in detail


def test_the_first_prompts_already_mix_every_kind() -> None:
    """`count: N` runs the first N prompts, so a short run must not be all stories."""
    assert {p.kind for p in load_prompt_set().prompts[: len(KINDS)]} == KINDS


def test_the_version_is_the_sha256_of_the_file() -> None:
    raw = (resources.files("evalkit.evals.prompts") / "long_generation_v1.jsonl").read_bytes()
    assert load_prompt_set("long_generation_v1").version == hashlib.sha256(raw).hexdigest()


def test_an_unknown_set_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="no_such_set"):
        load_prompt_set("no_such_set")
