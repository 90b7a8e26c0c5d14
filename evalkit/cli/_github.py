"""What `matrix` and `compare` add when they run as a GitHub Actions step (`GITHUB_ACTIONS=true`,
which the runner sets): the markdown report appended to `$GITHUB_STEP_SUMMARY` and, for a run,
one annotation per broken threshold or failed cell. Nothing here changes a verdict or an exit code;
a summary file that cannot be written is a warning."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def publish(markdown: str, whole_report: str, summary: Mapping[str, Any] | None = None,
            stdout_is_data: bool = False) -> None:
    """Annotations for `summary` (on stdout, where the runner reads workflow commands; on stderr
    when stdout carries a document such as `--json`), then `markdown` into the step summary."""
    from evalkit.render.github import step_summary, workflow_commands
    from evalkit.verdict.summary import RunSummary

    if not in_github_actions():
        return
    for line in workflow_commands(RunSummary.model_validate(summary)) if summary else []:
        click.echo(line, err=stdout_is_data)
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    path = Path(target)
    try:
        used = path.stat().st_size if path.exists() else 0
        text = step_summary(markdown, whole_report, used)
        with path.open("a", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") or not text else text + "\n")
    except OSError as e:
        click.echo(f"warning: GITHUB_STEP_SUMMARY {target}: {e}", err=True)
        return
    if text != markdown:
        click.echo(f"warning: the step summary holds at most 1 MiB: the report was cut there; whole report: "
                   f"{whole_report}", err=True)
