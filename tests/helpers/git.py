"""A throwaway engine repo for bisect tests and the benchmark: one commit per line of history.

The simulator reads its fix from `simfix.py` on the engine's PYTHONPATH (`--sim-fix-module
simfix`, the source-tree trick of test_matrix_e2e.py): commits before `first_bad` keep the fix
(healthy), commits from `first_bad` on drop it (the DP-attention + PIECEWISE cell collapses and
loses GSM8K). A commit in `broken` has a simfix.py that raises at import: the engine does not
start, the commit is untestable. Every branch forks from one root commit, so one good-end run of
the root serves every bisect (`--good-run`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

HEALTHY = "FORCE_UNREG_COPY_IN = True\n"
BUGGY = "FORCE_UNREG_COPY_IN = False\n"
BROKEN = "raise ImportError('this commit does not build')\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(root: Path) -> tuple[Path, str]:
    """The repo with its root commit (healthy) on `main`; returns it and the root's SHA."""
    repo = root / "engine"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.invalid")
    git(repo, "config", "user.name", "dev")
    _commit(repo, 0, HEALTHY, "change 0: the last release")
    return repo, git(repo, "rev-parse", "HEAD")


def add_branch(repo: Path, name: str, n: int, first_bad: int, broken: frozenset[int] = frozenset()) -> list[str]:
    """Branch `name` from the root commit: n commits in all (index 0 the root), the fix dropped
    from `first_bad` on, `broken` ones that do not start; the full SHAs, oldest first."""
    root = git(repo, "rev-list", "--max-parents=0", "main")
    git(repo, "checkout", "-q", "-b", name, root)
    shas = [root]
    for i in range(1, n):
        text = BROKEN if i in broken else (BUGGY if i >= first_bad else HEALTHY)
        _commit(repo, i, text, f"change {i}: " + ("drop the ca_comm copy-in" if i == first_bad else f"refactor {name}"))
        shas.append(git(repo, "rev-parse", "HEAD"))
    git(repo, "checkout", "-q", "main")
    return shas


def _commit(repo: Path, i: int, simfix: str, subject: str) -> None:
    (repo / "simfix.py").write_text(simfix)
    (repo / "CHANGELOG").write_text(f"change {i}\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", subject, "--date", f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00")


DEFAULT_EVALS = "gsm8k: {num_fewshot: 0, num_concurrent: 32}\n  repetition: {count: 16, max_tokens: 1024, concurrency: 16}"
DEFAULT_THRESHOLDS = ("- {metric: gsm8k.flexible, max_drop_vs_baseline: 0.02, alpha: 0.01}\n"
                      "  - {metric: repetition.collapse_rate, max_rise_vs_baseline: 0.05, alpha: 0.01}")


def config_text(repo: Path, ref: str = "main", *, name: str = "bisect-test", evals: str = DEFAULT_EVALS,
                thresholds: str = DEFAULT_THRESHOLDS, stop_grace: int = 5) -> str:
    """One cell (`head`, the buggy DP-attention + PIECEWISE layout) whose engine source is `repo`
    at `ref`: `evalkit matrix` on it is a good-end run for `--good-run`. `evals` and `thresholds`
    are the YAML bodies of those sections (indented by two spaces after their first line)."""
    return f"""
model: sim/{name}
served_name: {name}
engine:
  profile: sim
  package: simfix
  args: ["--sim-fix-module", "simfix", "--sim-startup-seconds", "0", "--sim-seed", "0"]
  settings: {{tensor_parallel: 8, dp_attention: true, graph_mode: PIECEWISE}}
axes:
  src:
    head: {{source: {{repo: "{repo}", ref: "{ref}"}}}}
evals:
  {evals}
thresholds:
  {thresholds}
timeouts: {{startup: 60, stop_grace: {stop_grace}}}
"""
