"""Where a finished run's verdict goes besides summary.json and table.md, each asked for in the
`MatrixRequest` (so a script gets what `evalkit matrix` does): a JUnit XML file, the GitHub
Actions step summary and annotations, and a notify hook.

None of them changes a verdict or an exit code. A step summary that cannot be written or a hook
that fails is a warning handed back, not an exception: the run is done and reported either way.
What the caller prints (the annotations, the warnings) is returned, never printed here: the CLI
decides the stream (annotations go to stderr when stdout carries a document such as `--json`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from evalkit.render import render
from evalkit.render.github import step_summary, workflow_commands
from evalkit.store import atomic_write_text
from evalkit.verdict.summary import RunSummary

NOTIFY_TIMEOUT_S = 300
"""How long the notify hook may take before it is given up (a warning)."""


def in_github_actions() -> bool:
    """Running as a GitHub Actions step: the runner sets `GITHUB_ACTIONS=true`."""
    return os.environ.get("GITHUB_ACTIONS") == "true"


def write_junit(summary: RunSummary, run_path: Path, path: Path) -> None:
    """The run as JUnit XML (render/junit.py), written whole to `path`."""
    text = render(summary, "junit", run_path)
    assert text is not None, "junit is a document format"
    atomic_write_text(path, text)


def append_step_summary(markdown: str, whole_report: str) -> list[str]:
    """`markdown` appended to `$GITHUB_STEP_SUMMARY` (nothing when it is unset), cut at GitHub's
    1 MiB with `whole_report` named as where the rest is; the warnings to show."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return []
    path = Path(target)
    try:
        used = path.stat().st_size if path.exists() else 0
        text = step_summary(markdown, whole_report, used)
        with path.open("a", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") or not text else text + "\n")
    except OSError as e:
        return [f"warning: GITHUB_STEP_SUMMARY {target}: {e}"]
    if text != markdown:
        return [f"warning: the step summary holds at most 1 MiB: the report was cut there; whole report: {whole_report}"]
    return []


def notify(command: str, markdown_path: Path, exit_code: int) -> list[str]:
    """Run the notify hook: argv from `command` (split as a shell would, run without one) plus the
    report's path, `EVALKIT_EXIT_CODE` in its environment; its failure is a warning, not fatal."""
    argv = [*shlex.split(command), str(markdown_path.resolve())]
    try:
        done = subprocess.run(argv, env={**os.environ, "EVALKIT_EXIT_CODE": str(exit_code)},
                              timeout=NOTIFY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"warning: --notify {argv[0]}: {e}"]
    return [f"warning: --notify {argv[0]} exited with {done.returncode}"] if done.returncode else []


def publish(run_path: Path, summary: RunSummary, junit: Path | None, github: bool,
            notify_command: str | None) -> tuple[list[str], list[str]]:
    """Each delivery the request asked for, in this order: the JUnit file, then (with `github`)
    the annotations and table.md into the step summary, then the notify hook with table.md.
    Returns (annotations, warnings) for the caller to print."""
    if junit is not None:
        write_junit(summary, run_path, junit)
    annotations: list[str] = []
    warnings: list[str] = []
    table = run_path / "table.md"
    if github and table.is_file():
        annotations = workflow_commands(summary)
        warnings += append_step_summary(table.read_text(encoding="utf-8"), str(table))
    if notify_command:
        warnings += notify(notify_command, table, summary.exit_code)
    return annotations, warnings
