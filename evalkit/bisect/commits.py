"""The commits a bisect searches: `good..bad` of the engine source repo, oldest first.

`git rev-list --ancestry-path [--first-parent] good..bad` keeps only the commits that are both
descendants of good and ancestors of bad, the ones that can have introduced the regression.
First-parent by default: on a merge-heavy engine repo the mainline is what was released, and a
bisect through a merged branch's private history tests trees nobody served. `--all-parents`
follows the merged branches too. Every git call is an argv list (no shell), run in the repo the
matrix's source resolution uses (a local path in place, a URL's bare clone in the cache).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from evalkit.config import Source
from evalkit.engine.sources import _repo_dir, resolve_sha
from evalkit.errors import ConfigError, SourceError

FIELD_SEP = "\x1f"
"""Separates the fields of one `git log` line (a subject never holds it)."""


@dataclass(frozen=True)
class Commit:
    """One commit of the range: what a step tests and what the report names."""

    sha: str
    """The full 40-hex SHA."""
    subject: str
    author_date: str
    """ISO 8601, the author's own time zone (what `git log` shows a developer)."""

    @property
    def short(self) -> str:
        return self.sha[:12]


@dataclass(frozen=True)
class CommitRange:
    """The good end, the bad end, and the commits between them (good excluded, bad included last)."""

    repo: str
    good: Commit
    bad: Commit
    commits: list[Commit]
    """Oldest first; `commits[-1]` is the bad end."""
    first_parent: bool


def _git(repo: Path, args: list[str]) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=600, check=False)
    except FileNotFoundError as e:
        raise SourceError("git is not installed: bisect needs it") from e
    except subprocess.TimeoutExpired as e:
        raise SourceError(f"{repo}: git {args[0]} timed out") from e
    if done.returncode != 0:
        raise SourceError(f"{repo}: git {args[0]}: " + (done.stderr.strip().splitlines() or ["failed"])[-1])
    return done.stdout


def _resolve(repo: str, ref: str, cache: Path, option: str) -> str:
    """The SHA `ref` names in `repo`. The repo is reached first, so a clone that fails (offline, a
    wrong URL) says so as it is, and only a ref the reached repo lacks is "not a commit"."""
    source = Source(repo=repo, ref=ref)
    _repo_dir(source, cache)
    try:
        return resolve_sha(source, cache)
    except SourceError as e:
        raise SourceError(f"{option} {ref}: no such commit, branch or tag in {repo}") from e


def describe(repo_dir: Path, shas: list[str]) -> dict[str, Commit]:
    """Subject and author date of each SHA, in one `git log --no-walk` call."""
    if not shas:
        return {}
    out = _git(repo_dir, ["log", "--no-walk=unsorted", f"--format=%H{FIELD_SEP}%aI{FIELD_SEP}%s", *shas])
    found: dict[str, Commit] = {}
    for line in out.splitlines():
        sha, date, subject = line.split(FIELD_SEP, 2)
        found[sha] = Commit(sha, subject, date)
    return found


def commit_range(repo: str, good_ref: str, bad_ref: str, cache: Path, *, first_parent: bool = True) -> CommitRange:
    """The commits between `good_ref` and `bad_ref`; bad input (an unknown ref, good not an
    ancestor of bad, good == bad) is a one-line ConfigError/SourceError (exit 2)."""
    good = _resolve(repo, good_ref, cache, "--good")
    bad = _resolve(repo, bad_ref, cache, "--bad")
    repo_dir = _repo_dir(Source(repo=repo, ref=good_ref), cache)
    if good == bad:
        raise ConfigError(f"--good {good_ref} and --bad {bad_ref} are the same commit {good[:12]}: nothing to bisect")
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", good, bad], cwd=repo_dir,
                              capture_output=True, timeout=600, check=False)
    if ancestor.returncode == 1:
        raise ConfigError(f"--good {good_ref} ({good[:12]}) is not an ancestor of --bad {bad_ref} ({bad[:12]})")
    if ancestor.returncode != 0:
        raise SourceError(f"{repo}: git merge-base failed: {ancestor.stderr.decode(errors='replace').strip()}")
    args = ["rev-list", "--reverse", "--ancestry-path", *(["--first-parent"] if first_parent else []), f"{good}..{bad}"]
    shas = _git(repo_dir, args).split()
    if not shas or shas[-1] != bad:
        # --first-parent with an ancestry path that leaves the mainline (good only reached through a merge)
        raise ConfigError(f"--good {good_ref} is not on the first-parent line of --bad {bad_ref}; pass --all-parents")
    info = describe(repo_dir, [good, *shas])
    return CommitRange(repo, info[good], info[bad], [info[s] for s in shas], first_parent)
