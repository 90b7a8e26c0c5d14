"""`--format json`: summary.json as it is written, and a comparison's dump (a `RunComparison`),
for a script to read rather than a person."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from evalkit.verdict.summary import RunComparison, RunSummary

if TYPE_CHECKING:
    from evalkit.render.details import Details


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


def report(summary: RunSummary, details: Details) -> str:
    """The summary's dump: the run folder's details are not part of it."""
    return _json(summary.dump())


def comparison(result: RunComparison) -> str:
    """The comparison's dump."""
    return _json(result.dump())
