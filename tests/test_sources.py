"""Engine sources: a {repo, ref} becomes a cached worktree at the resolved SHA."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evalkit.config import Source
from evalkit.engine.sources import checkout, peek_sha
from evalkit.errors import SourceError


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def make_engine_repo(root: Path) -> tuple[Path, str, str]:
    """A throwaway 'engine' repo: commit 1 without the fix, commit 2 with it."""
    repo = root / "engine"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "config", "user.name", "t")
    (repo / "simfix.py").write_text("FORCE_UNREG_COPY_IN = False\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "before the fix")
    before = git(repo, "rev-parse", "HEAD")
    (repo / "simfix.py").write_text("FORCE_UNREG_COPY_IN = True\n")
    git(repo, "commit", "-qam", "the fix")
    return repo, before, git(repo, "rev-parse", "HEAD")


@pytest.mark.smoke  # real git: a throwaway repo, `git worktree add` per commit
def test_checkout_makes_one_worktree_per_commit(tmp_path: Path) -> None:
    repo, before, after = make_engine_repo(tmp_path)
    cache = tmp_path / "cache"
    old = checkout(Source(repo=str(repo), ref="HEAD~1"), cache)
    new = checkout(Source(repo=str(repo), ref=after[:9]), cache)
    assert (old.sha, new.sha) == (before, after)
    assert "False" in (old.worktree / "simfix.py").read_text()
    assert "True" in (new.worktree / "simfix.py").read_text()
    assert checkout(Source(repo=str(repo), ref=after), cache).worktree == new.worktree  # cached


def test_bad_ref_is_a_clear_error(tmp_path: Path) -> None:
    repo, _, _ = make_engine_repo(tmp_path)
    with pytest.raises(SourceError, match=r"@nope: ref does not resolve"):
        checkout(Source(repo=str(repo), ref="nope"), tmp_path / "cache")


def test_plan_does_not_clone_remote_repos(tmp_path: Path) -> None:
    assert peek_sha(Source(repo="https://example.invalid/engine.git", ref="abc"), tmp_path) is None


def test_relative_cache_dir_puts_worktrees_under_it_not_in_the_engine_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, before, _ = make_engine_repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    got = checkout(Source(repo=str(repo), ref=before), Path("cache"))
    assert got.worktree == tmp_path / "cache" / "worktrees" / before
    assert got.worktree.is_absolute() and (got.worktree / "simfix.py").is_file()
    assert not (repo / "cache").exists()


def test_a_checkout_killed_half_way_is_made_again_not_reused(tmp_path: Path) -> None:
    repo, before, _ = make_engine_repo(tmp_path)
    cache = tmp_path / "cache"
    first = checkout(Source(repo=str(repo), ref=before), cache)
    (first.worktree / "simfix.py").unlink()  # what a SIGKILL during `git worktree add` leaves:
    first.worktree.with_name(f"{before}.ready").unlink()  # files missing, no ready marker
    again = checkout(Source(repo=str(repo), ref=before), cache)
    assert (again.worktree / "simfix.py").read_text() == "FORCE_UNREG_COPY_IN = False\n"
