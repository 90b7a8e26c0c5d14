"""Which commit run.json names as evalkit's own (`evalkit_git_sha`): the commit of a work tree
rooted right above the package, never that of some other checkout it was unpacked into."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from evalkit.run.stages import evalkit_commit
from tests.conftest import ROOT


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def repo_with(path: Path, files: dict[str, str]) -> str:
    """A git repository at `path` with `files` committed; its HEAD."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "init")
    return git(path, "rev-parse", "HEAD")


def test_evalkit_unpacked_inside_another_checkout_names_no_commit(tmp_path: Path) -> None:
    outer = tmp_path / "monorepo"
    repo_with(outer, {"README": "another project"})
    unpacked = outer / "vendor" / "evalkit-0.1.0" / "evalkit"
    shutil.copytree(ROOT / "evalkit", unpacked, ignore=shutil.ignore_patterns("__pycache__"))
    assert evalkit_commit(unpacked) is None


def test_evalkit_installed_into_a_venv_inside_a_checkout_names_no_commit(tmp_path: Path) -> None:
    outer = tmp_path / "project"
    repo_with(outer, {"main.py": "print()"})
    installed = outer / ".venv" / "lib" / "python3.11" / "site-packages" / "evalkit"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    assert evalkit_commit(installed) is None


def test_a_clone_of_evalkit_names_its_head(tmp_path: Path) -> None:
    head = repo_with(tmp_path / "evalkit-clone", {"evalkit/__init__.py": "", "pyproject.toml": ""})
    assert evalkit_commit(tmp_path / "evalkit-clone" / "evalkit") == head


def test_outside_any_checkout_there_is_no_commit(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "evalkit"
    package.mkdir(parents=True)
    assert evalkit_commit(package) is None
