"""A cell's logical serving settings, which each engine profile turns into its own flags.

Their own module so that both the config's schema (schema.py) and a topology's roles
(topology.py), which override them per role, use the one model without importing each other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evalkit.config.base import StrictModel

GraphMode = Literal["FULL", "PIECEWISE", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "NONE", "eager"]
"""`eager` means no graphs at all (`--enforce-eager`); `NONE` is the engine's own cudagraph mode."""


class EngineSettings(StrictModel):
    """Logical serving settings; a profile turns them into one engine's flags."""

    tensor_parallel: int | None = Field(None, ge=1, description="Tensor-parallel size (-tp).")
    data_parallel: int | None = Field(None, ge=1, description="Data-parallel size (-dp).")
    dp_attention: bool | None = Field(None, description="Data-parallel attention ranks.")
    expert_parallel: bool | None = Field(None, description="Expert parallelism for MoE layers.")
    graph_mode: GraphMode | None = Field(None, description="CUDA-graph mode, or eager.")
    max_num_seqs: int | None = Field(None, ge=1, description="Maximum concurrent sequences.")
    devices: int | None = Field(None, ge=1, description="Devices the cell needs; default tensor x data parallel.")

    def merged(self, other: EngineSettings) -> EngineSettings:
        """Return these settings overridden by every field that `other` sets."""
        return self.model_copy(update=other.model_dump(exclude_none=True))
