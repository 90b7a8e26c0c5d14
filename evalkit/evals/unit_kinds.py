"""The `Unit` a metric declares (`MetricSpec.unit`) and the units evalkit knows: values with no
evalkit imports, so evals/base.py can hold them. Read them through evalkit/evals/units.py, which
adds `unit_of` (a metric's unit by name, over the registered evals) and documents the API.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    """What a metric's values are: their name, their range and how a difference reads."""

    name: str
    """Its word in messages and in summary.json ("share", "tokens/s")."""
    noun: str = "a number"
    """What a value is, in an error's words ("a share", "a throughput in tokens/s")."""
    low: float | None = None
    """The least value a metric in this unit can take; None: no bound."""
    high: float | None = None
    """The largest; None: no bound."""
    change_scale: float = 1.0
    """A difference is said multiplied by this (a share: 100, so 0.071 reads 7.1 points)."""
    change_word: str = ""
    """What a scaled difference is in ("points", "tokens/s", "ms"); "": a plain number."""
    value_scale: float = 1.0
    """A value is said multiplied by this (a time in seconds: 1000, in ms)."""
    value_word: str = ""
    """What a scaled value is in ("tokens/s", "ms"); "": a bare number (a share, a count)."""
    digits: int = 3
    """Decimals of a value as `describe` says it."""
    change_digits: int = 1
    """Decimals of a scaled difference as `describe_change` says it."""

    @property
    def range_text(self) -> str:
        """The range in words: ``[0, 1]``, ``at least 0``, ``any number``."""
        if self.low is not None and self.high is not None:
            return f"[{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f"at least {self.low:g}"
        if self.high is not None:
            return f"at most {self.high:g}"
        return "any number"

    @property
    def span(self) -> float | None:
        """The largest difference two values can have (a share: 1); None: unbounded."""
        return None if self.low is None or self.high is None else self.high - self.low

    @property
    def said(self) -> str:
        """What a value of the unit is, with its range: ``a share in [0, 1]``, ``a throughput in
        tokens/s, at least 0``."""
        if self.low is not None and self.high is not None:
            return f"{self.noun} in {self.range_text}"
        return f"{self.noun}, {self.range_text}"

    def check(self, value: float) -> str | None:
        """None when a metric in this unit can take `value`; else why not, in words for a one-line
        error that the caller prefixes with the metric's name."""
        if math.isnan(value):
            return "is not a number"
        if (self.low is None or value >= self.low) and (self.high is None or value <= self.high):
            return None
        if self.span == 1 and self.change_scale == 100 and 1 < value <= 100:
            return f"is {self.said}; {value:g} reads as a percentage: {value / 100:.2f}?"
        return f"is {self.said}; {value:g} is outside it"

    def check_change(self, margin: float) -> str | None:
        """None when a difference of `margin` (a margin, a noise: not negative) can occur between
        two values in this unit; else why not (a share's change of 2 reads as 2 points: 0.02?)."""
        span = self.span
        if math.isnan(margin):
            return "is not a number"
        if span is None or margin <= span:
            return None
        said = f"is {self.said}: it changes by at most {span:g}"
        if self.change_scale != 1 and margin <= span * self.change_scale:
            return f"{said}; {margin:g} reads as {self.change_word}: {margin / self.change_scale:.2g}?"
        return f"{said}; {margin:g} is more than that"

    def clamp(self, value: float) -> float:
        """`value` brought inside the range (a floor suggested below 0 becomes 0)."""
        if self.low is not None:
            value = max(self.low, value)
        if self.high is not None:
            value = min(self.high, value)
        return value

    def describe(self, value: float | None) -> str:
        """A value as a reader sees it: ``0.942``, ``1234 tokens/s``, ``12.0 ms``; ``-`` for none."""
        if value is None:
            return "-"
        text = f"{value * self.value_scale:.{self.digits}f}"
        return f"{text} {self.value_word}" if self.value_word else text

    def describe_change(self, delta: float | None, signed: bool = True) -> str:
        """A difference (or a noise, `signed=False`) as a reader sees it: ``-7.1 points``,
        ``+120.0 tokens/s``, ``3.0 ms``; ``-`` for none."""
        if delta is None:
            return "-"
        sign = "+" if signed else ""
        scaled = round(delta * self.change_scale, self.change_digits) + 0.0  # -0.04 rounds to -0.0: said 0.0
        text = f"{scaled:{sign}.{self.change_digits}f}"
        return f"{text} {self.change_word}" if self.change_word else text


SHARE = Unit("share", "a share", 0.0, 1.0, change_scale=100.0, change_word="points")
"""A share of questions or samples (accuracy, a collapse or disagreement rate, an agreement)."""
TOKENS_PER_S = Unit("tokens/s", "a throughput in tokens/s", 0.0, None, change_word="tokens/s",
                    value_word="tokens/s", digits=1)
"""Throughput."""
SECONDS = Unit("seconds", "a time in seconds", 0.0, None, change_scale=1000.0, change_word="ms",
               value_scale=1000.0, value_word="ms", digits=1)
"""A time (a time per output token): said in ms."""
NATS = Unit("nats", "a divergence in nats", 0.0, None, change_word="nats", value_word="nats", digits=4,
            change_digits=4)
"""A divergence or a mean absolute difference of log-probabilities: never below 0."""
NATS_CHANGE = Unit("nats per token", "a change in nats per token", None, None, change_word="nats per token",
                   value_word="nats per token", digits=4, change_digits=4)
"""A signed change of log-likelihood per token (a generation's NLL rise)."""
TOKENS = Unit("tokens", "a number of tokens", 0.0, None, change_word="tokens", value_word="tokens", digits=1)
"""A number or position of tokens (a mean accepted length, a median first divergence)."""
COUNT = Unit("count", "a count", 0.0, None, digits=0, change_digits=0)
"""A number of events or items."""
NUMBER = Unit("number", change_digits=3)
"""Nothing known: any value, changes as plain numbers (an lm-eval score that is not 0/1 per
question, a plugin's metric that declares nothing)."""

UNITS: dict[str, Unit] = {u.name: u for u in (SHARE, TOKENS_PER_S, SECONDS, NATS, NATS_CHANGE, TOKENS, COUNT, NUMBER)}
"""Every unit by its name: summary.json records a spec's unit by name; an unknown name reads NUMBER."""


def unit_named(name: str | None) -> Unit:
    """The unit summary.json recorded by `name` (None or unknown, from an older or newer evalkit: NUMBER)."""
    return UNITS.get(name or "", NUMBER)
