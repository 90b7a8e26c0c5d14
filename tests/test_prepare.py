"""`evalkit prepare` (cli/prepare.py, run/build.py): every source tree of a matrix checked out and
built once, no engine started, in this process (real git and the toy engine's real build step,
tests/toy_engine.py, as tests/test_setup.py runs setups).

A commit whose build fails is that tree's error (exit 3, its log named) and the others still
build; a second prepare reuses what the first built. That a matrix then runs the built trees is
tests/test_build_matrix.py's, whose cells start engines (`e2e`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import evalkit_cli
from tests.test_build_matrix import config_text
from tests.toy_engine import make_toy_repo


@pytest.fixture
def toy(tmp_path: Path) -> tuple[Path, list[str]]:
    """A config whose three cells run three commits of the toy engine, the third one's build broken."""
    repo, shas = make_toy_repo(tmp_path)
    config = tmp_path / "toy.yaml"
    config.write_text(config_text(repo, shas))
    return config, shas


def test_prepare_builds_every_tree_names_the_broken_one_and_starts_no_engine(toy: tuple[Path, list[str]],
                                                                             tmp_path: Path) -> None:
    config, shas = toy
    cache = tmp_path / "cache"
    done = evalkit_cli("prepare", "--config", str(config), "--cache-dir", str(cache), cwd=tmp_path)
    assert done.returncode == 3, done.stderr  # one tree's build failed
    lines = done.stdout.splitlines()
    assert lines[0] == f"# {config}: 3 source trees"
    one, two, broken = (next(line for line in lines if line.startswith(sha[:12])) for sha in shas)
    assert "[one]: setup built (log " in one and "[two]: setup built (log " in two
    assert broken.endswith("setup exited with 1; log "
                           f"{cache.resolve() / 'worktrees' / shas[2]}.setup-{broken.split('.setup-')[1]}")
    assert f"  worktree: {cache.resolve() / 'worktrees' / shas[0]}" in lines
    for sha in shas[:2]:
        assert (cache.resolve() / "worktrees" / sha / "toyengine" / "_built.py").is_file()
    assert not (tmp_path / "results").exists()


def test_a_second_prepare_reuses_the_built_tree(toy: tuple[Path, list[str]], tmp_path: Path) -> None:
    config, shas = toy
    cache = tmp_path / "cache"
    first = evalkit_cli("prepare", "--config", str(config), "--cache-dir", str(cache), "--only", "tree=one", cwd=tmp_path)
    assert first.returncode == 0 and "[one]: setup built" in first.stdout, first.stdout + first.stderr
    again = evalkit_cli("prepare", "--config", str(config), "--cache-dir", str(cache), "--only", "tree=one", cwd=tmp_path)
    assert again.returncode == 0 and "[one]: setup reused" in again.stdout, again.stdout + again.stderr
    assert again.stdout.startswith(f"# {config}: 1 source trees\n{shas[0][:12]} ")
