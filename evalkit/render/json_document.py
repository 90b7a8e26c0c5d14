"""`--format json`: summary.json as it is written, and a comparison as compare_runs returns it,
for a script to read rather than a person."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from evalkit.verdict.summary import RunSummary

if TYPE_CHECKING:
    from evalkit.render.details import Details


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


def report(summary: RunSummary, details: Details) -> str:
    """The summary's dump: the run folder's details are not part of it."""
    return _json(summary.dump())


def comparison(result: dict[str, Any]) -> str:
    return _json(result)
