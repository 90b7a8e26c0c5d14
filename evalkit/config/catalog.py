"""`engine.catalog`: which entry of the engine's CI catalog a config's launch is taken from
(engine/catalog.py reads it in each cell's tree)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evalkit.config.base import StrictModel

ATOM_CATALOG = ".github/benchmark/models_accuracy.json"
"""ATOM's accuracy catalog (read by .github/workflows/atom-test.yaml at ccc861dc5 and HEAD ffdf3bb5)."""


class Catalog(StrictModel):
    """A model's launch taken from the engine's own CI catalog inside each cell's source tree, at
    that cell's ref (engine/catalog.py): the entry's flags, environment and gates, with the
    config's engine and axis settings, args and env applied on top."""

    entry: str = Field(min_length=1, description="The entry's `model_name`, e.g. \"DeepSeek-V4-Pro\".")
    path: str = Field(ATOM_CATALOG, min_length=1, description="The catalog file inside the source tree.")
    gates: Literal["fail", "warn", "off"] = Field(
        "warn", description="Judge each cell by its own entry's gates (accuracy_threshold on gsm8k.flexible, "
                            "mtp_accept_threshold on engine.spec_acceptance_rate), as ATOM's CI does at that ref: "
                            "a broken one is a flag with this action.")
