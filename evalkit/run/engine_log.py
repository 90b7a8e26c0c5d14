"""What a cell's engine log proves, read once the engine is ready and before any eval runs.

Two readings of the same log (`EngineProcess.launch_log`): the profile's reader says which graph
mode and parallel layout the engine really ran (profiles/ran.py), recorded against what the cell
asked, with a live `warning` when they differ; and the config's `log:` assertions, each recorded,
a broken one failing the cell at once (`LogAssertionFailed`) so no eval time is spent on a cell
that did not run what its axis values say.
"""

from __future__ import annotations

import re

from evalkit.config import LogAssertion, MatrixConfig
from evalkit.config.cells import Cell
from evalkit.errors import LogAssertionFailed
from evalkit.profiles import Profile
from evalkit.profiles.ran import disagreements
from evalkit.store.records import LogCheck, RanAsRecord

ASKED = ("graph_mode", "tensor_parallel", "data_parallel", "dp_attention")
"""The cell settings a profile's log reader can contradict."""


def read_ran_as(profile: Profile, log: str, cell: Cell) -> RanAsRecord | None:
    """What the engine ran against what `cell` asked; None when the profile cannot read its log."""
    if profile.read_log is None:
        return None
    ran = profile.read_log(log)
    asked = {key: value for key in ASKED if (value := getattr(cell.settings, key)) is not None}
    said = ran.mode is not None or bool(ran.layout())
    differ = disagreements(ran, cell.settings)
    return RanAsRecord(mode=ran.mode, layout=ran.layout(), evidence=ran.evidence, asked=asked,
                       agrees=(not differ) if said else None, disagreements=differ)


def applicable(config: MatrixConfig, cell: Cell) -> list[tuple[str, LogAssertion]]:
    """The log assertions for `cell`: the engine's, then its axis values' in axis order, those
    whose `when` its axis values satisfy; each with its origin (`engine` or `axis=value`)."""
    stated = [("engine", a) for a in config.engine.log]
    for axis, value in cell.axes.items():
        stated += [(f"{axis}={value}", a) for a in config.axes[axis][value].log]
    return [(origin, a) for origin, a in stated if all(
        cell.axes.get(axis) in ([want] if isinstance(want, str) else want) for axis, want in a.when.items())]


def check_log(log: str, assertions: list[tuple[str, LogAssertion]]) -> list[LogCheck]:
    """Each assertion against the log's lines."""
    lines = log.splitlines()
    checks = []
    for origin, assertion in assertions:
        pattern = re.compile(assertion.pattern)
        line = next((line.strip() for line in lines if pattern.search(line)), None)
        appear = assertion.must_appear is not None
        checks.append(LogCheck(origin=origin, must="appear" if appear else "not appear", pattern=assertion.pattern,
                               ok=(line is not None) is appear, line=line))
    return checks


def raise_if_broken(checks: list[LogCheck], log_tail: str) -> None:
    """Fail the cell on the first broken assertion, in one line naming its origin and pattern."""
    broken = next((c for c in checks if not c.ok), None)
    if broken is None:
        return
    if broken.must == "appear":
        raise LogAssertionFailed(f"engine log: {broken.origin}: no line matches must_appear '{broken.pattern}'",
                                 log_tail=log_tail)
    raise LogAssertionFailed(f"engine log: {broken.origin}: must_not_appear '{broken.pattern}' matches: "
                             f"{broken.line}", log_tail=log_tail)
