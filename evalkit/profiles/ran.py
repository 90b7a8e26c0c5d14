"""What an engine's own log says it ran: the graph mode and the parallel layout, and the lines that say so.

Engines rewrite what they are asked: ATOM keeps `cudagraph_mode=FULL` under `--enforce-eager`,
SGLang drops the prefill graph for several reasons after logging the request, vLLM downgrades a
mode its attention backend cannot capture. A command line is therefore no proof of what a cell
measured; each profile has a `LogReader` that reads the engine's start-up log (once it serves)
into a `RanAs`, and `disagreements` compares that with the cell's requested settings, so a cell
whose engine ran something else is flagged instead of compared as if it ran what was asked.

Modes are in evalkit's vocabulary (config `graph_mode`): `eager` and `NONE` both mean "no graphs"
here, because an engine may log either for the same request (vLLM logs NONE for --enforce-eager).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evalkit.config import EngineSettings

NO_GRAPHS = frozenset({"eager", "NONE"})
"""Modes that both mean the engine captured no CUDA graph."""


@dataclass(frozen=True)
class RanAs:
    """The engine's own account of a launch; None: its log does not say."""

    mode: str | None = None
    """The graph mode it ran (`FULL`, `PIECEWISE`, ..., `NONE`, `eager`)."""
    tensor_parallel: int | None = None
    data_parallel: int | None = None
    dp_attention: bool | None = None
    """Whether attention runs data-parallel."""
    dp_attention_ranks: int | None = None
    """How many attention-DP ranks it says it runs (shown, not compared: engines count them differently)."""
    evidence: list[str] = field(default_factory=list)
    """The log lines (or, for a line whose absence is the evidence, a sentence saying so) read."""

    def layout(self) -> dict[str, int | bool]:
        """The parallel layout it reports, only the keys the log gave."""
        found = {"tensor_parallel": self.tensor_parallel, "data_parallel": self.data_parallel,
                 "dp_attention": self.dp_attention, "dp_attention_ranks": self.dp_attention_ranks}
        return {key: value for key, value in found.items() if value is not None}


LogReader = Callable[[str], RanAs]
"""A profile's reader: the engine log of one launch (from its first line) -> what it ran."""


def disagreements(ran: RanAs, asked: EngineSettings) -> list[str]:
    """How what ran differs from what the cell asked, one phrase each; empty when they agree.

    Only what both sides name is compared: a setting the cell leaves to the engine's default, or
    a fact the log does not give, is no disagreement."""
    found = []
    if asked.graph_mode is not None and ran.mode is not None and not _same_mode(asked.graph_mode, ran.mode):
        found.append(f"graph mode {ran.mode}, asked {asked.graph_mode}")
    if asked.tensor_parallel is not None and ran.tensor_parallel not in (None, asked.tensor_parallel):
        found.append(f"tensor parallel {ran.tensor_parallel}, asked {asked.tensor_parallel}")
    if asked.data_parallel is not None and ran.data_parallel not in (None, asked.data_parallel):
        found.append(f"data parallel {ran.data_parallel}, asked {asked.data_parallel}")
    if ran.dp_attention is not None and ran.dp_attention != bool(asked.dp_attention):
        found.append(f"DP attention {'on' if ran.dp_attention else 'off'}, asked {'on' if asked.dp_attention else 'off'}")
    return found


def _same_mode(asked: str, ran: str) -> bool:
    return asked == ran or (asked in NO_GRAPHS and ran in NO_GRAPHS)
