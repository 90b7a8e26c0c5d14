"""A config's assertion on an engine's log (`engine.log`, an axis value's `log`): run/engine_log.py
checks it once the engine is ready, before any eval runs."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from evalkit.config.base import StrictModel


class LogAssertion(StrictModel):
    """A line the engine's log must (or must not) hold once the engine is ready, checked before the
    evals run: the proof that a cell ran what its axis value says (a fix that logs itself, a
    collective that can switch itself off). Exactly one of `must_appear`, `must_not_appear`."""

    must_appear: str | None = Field(None, description="Regex some log line must match; else the cell fails at once.")
    must_not_appear: str | None = Field(None, description="Regex no log line may match; else the cell fails at once.")
    when: dict[str, str | list[str]] = Field(
        default_factory=dict, description="Only in cells with these axis values (axis: value or [values]).")

    @field_validator("must_appear", "must_not_appear")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"not a regex ({error})") from error
        return pattern

    @model_validator(mode="after")
    def _one_pattern(self) -> LogAssertion:
        if (self.must_appear is None) == (self.must_not_appear is None):
            raise ValueError("set exactly one of must_appear, must_not_appear")
        return self

    @property
    def pattern(self) -> str:
        pattern = self.must_appear if self.must_appear is not None else self.must_not_appear
        assert pattern is not None, "_one_pattern: exactly one is set"
        return pattern
