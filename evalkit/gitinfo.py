"""The git commit an engine's version string names, and whether it is the commit a cell checked out.

A fix-on cell that does not run the fix is the silent way a matrix lies: the worktree is put first
on the engine's PYTHONPATH, but an engine that imports an installed build instead (a compiled
package shadowing the tree, a wrong interpreter) still starts and answers. Engines built with
setuptools_scm (vLLM, SGLang) report versions such as ``0.32.1.dev12+g1a2b3c4d`` or
``0.32.1.dev12+g1a2b3c4d.d20261204`` (a dirty tree) whose ``g<hash>`` is the commit they were
built from; a release (``0.32.0``) names none, and then nothing can be said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_SCM_HASH = re.compile(r"\+(?:[^+]*\.)?g(?P<hash>[0-9a-f]{7,40})(?![0-9a-z])", re.IGNORECASE)
"""setuptools_scm's local version part: ``+g<hash>``, possibly after other dotted parts."""

MISMATCH_WORDS = "ENGINE DOES NOT RUN ITS SOURCE"
"""The words every report and progress line uses for a mismatch, so it is found by one search."""


def commit_of_version(version: str) -> str | None:
    """The (abbreviated, lower-case) commit hash in a version string, or None when it names none."""
    match = _SCM_HASH.search(version.strip())
    return match.group("hash").lower() if match else None


@dataclass(frozen=True)
class SourceMatch:
    """The verdict on one cell: does the engine run the commit evalkit checked out?"""

    status: Literal["match", "mismatch", "unknown"]
    commit: str | None
    """The commit the engine reports (from its version), if any."""
    message: str


def match_source(version: str | None, source_sha: str) -> SourceMatch:
    """Compare the version an engine reports with the full SHA of the cell's source tree."""
    if version is None:
        return SourceMatch("unknown", None, "the engine reported no version")
    commit = commit_of_version(version)
    if commit is None:
        return SourceMatch("unknown", None, f"the engine's version {version!r} names no commit")
    if source_sha.lower().startswith(commit):
        return SourceMatch("match", commit, f"the engine runs {source_sha[:12]} (version {version})")
    return SourceMatch("mismatch", commit, f"{MISMATCH_WORDS}: checked out {source_sha[:12]} but the engine reports "
                                           f"version {version} (commit {commit})")
