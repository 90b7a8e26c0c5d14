"""Engine source trees: `{repo, ref}` -> a cached git worktree at an exact commit.

The fix A/B of ATOM PR #1596 has no flag: fix on and fix off are two commits of ATOM. evalkit
checks each ref out once into a worktree under its cache, puts it first on the engine's
PYTHONPATH, and records the resolved SHA, so a result always names the code that produced it.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from evalkit.config import Source
from evalkit.errors import SourceError


@dataclass(frozen=True)
class ResolvedSource:
    repo: str
    ref: str
    sha: str
    worktree: Path


def _git(args: list[str], cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
        )
    except FileNotFoundError as e:
        raise SourceError("git is not installed: engine sources need it") from e
    except subprocess.TimeoutExpired as e:
        raise SourceError(f"git {' '.join(args[:2])} timed out") from e
    if done.returncode != 0:
        said = done.stderr.strip().splitlines() or [f"git {args[0]} failed"]
        # git's cause is its first `fatal:` line; the last is often advice ("and the repository exists.")
        raise SourceError(next((line for line in said if line.startswith(("fatal:", "error:"))), said[-1]))
    return done.stdout.strip()


def _is_local(repo: str) -> bool:
    return "://" not in repo and not repo.startswith("git@") and Path(repo).expanduser().exists()


def _repo_dir(source: Source, cache: Path) -> Path:
    """A local repo is used in place; a URL is cloned once (bare) into the cache."""
    if _is_local(source.repo):
        return Path(source.repo).expanduser().resolve()
    key = hashlib.sha256(source.repo.encode()).hexdigest()[:16]
    bare = cache / "repos" / key
    if not bare.exists():
        made = [p for p in (*reversed(bare.parent.parents), bare.parent) if not p.exists()]
        bare.parent.mkdir(parents=True, exist_ok=True)
        try:
            _git(["clone", "--bare", "--quiet", source.repo, str(bare)])
        except SourceError as e:
            for folder in reversed(made):  # a failed clone leaves no empty cache behind (git leaves them)
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
            raise SourceError(f"source {source.repo}: cannot clone: {e}") from e
    return bare


def resolve_sha(source: Source, cache: Path) -> str:
    """The commit SHA `source.ref` names, or SourceError naming the repo and ref."""
    repo = _repo_dir(source, cache)
    try:
        return _git(["rev-parse", "--verify", "--quiet", f"{source.ref}^{{commit}}"], cwd=repo)
    except SourceError as e:
        raise SourceError(f"source {source.repo}@{source.ref}: ref does not resolve to a commit") from e


def peek_sha(source: Source, cache: Path) -> str | None:
    """The SHA if it can be known without network (local repo or cached clone), else None."""
    key = hashlib.sha256(source.repo.encode()).hexdigest()[:16]
    if not _is_local(source.repo) and not (cache / "repos" / key).exists():
        return None
    return resolve_sha(source, cache)


def peek_file(source: Source, cache: Path, path: str) -> tuple[str, str | None] | None:
    """(the SHA, the text of `path` in that commit, None when it has no such file), if the commit
    can be read without network (local repo or cached clone, as `peek_sha`); else None."""
    sha = peek_sha(source, cache)
    if sha is None:
        return None
    try:
        return sha, _git(["show", f"{sha}:{path}"], cwd=_repo_dir(source, cache))
    except SourceError:
        return sha, None


def worktree_path(cache: Path, sha: str) -> Path:
    """Where the worktree of commit `sha` is (or will be) checked out under `cache`."""
    return cache.expanduser().resolve() / "worktrees" / sha


def checkout(source: Source, cache: Path) -> ResolvedSource:
    """A worktree of `source` at its resolved commit, created once and reused.

    The cache is made absolute first: git runs in the repository, so a relative path would put
    the worktree inside the engine's own tree and hand the engine a relative PYTHONPATH. A
    worktree counts as made only once its `<sha>.ready` marker exists beside it: a checkout
    killed half-way (SIGKILL during `git worktree add`) is removed and made again, never reused.
    """
    cache = cache.expanduser().resolve()
    sha = resolve_sha(source, cache)
    worktree = worktree_path(cache, sha)
    ready = worktree.with_name(f"{sha}.ready")
    if not ready.exists():
        repo = _repo_dir(source, cache)
        if worktree.exists():
            shutil.rmtree(worktree)
        worktree.parent.mkdir(parents=True, exist_ok=True)
        _git(["worktree", "prune"], cwd=repo)
        _git(["worktree", "add", "--detach", "--force", str(worktree), sha], cwd=repo)
        ready.touch()
    return ResolvedSource(source.repo, source.ref, sha, worktree)
