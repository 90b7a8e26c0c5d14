"""Every example in a command's `--help` runs (issue 38: `detect --help` named a path that never
exists). Each example is parsed by its command's own parser (its options, choices and types);
those that need only this repository and a stored run run for real, cheaply: `matrix` with
`--dry-run` appended (it prints the plan, starting nothing), the others against copies of the
session's real demo runs (tests/test_report_cli.py), with the example's run ids given to copies
of them and its shell globs expanded as a shell would. The rest need what a test machine lacks
(a running server, an engine's repository, engine-hours) and are parsed only: `NOT_RUN` says why."""

from __future__ import annotations

import glob
import shlex
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.errors import EXIT_INCONCLUSIVE

NOT_RUN = {
    "evalkit matrix --resume latest": "resumes an interrupted run",
    "evalkit matrix --config my.yaml --base-url": "needs a running server",
    "evalkit prepare --model vllm-deepseek": "clones and builds vLLM",
    "evalkit calibrate": "runs a cell's engine five times",
    "evalkit bisect": "needs ATOM's repository and engine-hours",
    "evalkit cell --run": "runs one engine",
}
"""Example prefix -> why it is parsed, not run."""


def examples() -> list[tuple[str, list[str]]]:
    """(command line as written, its argv after `evalkit`) of every example of every command."""
    found = []
    for name, command in [("", main), *sorted(main.commands.items())]:
        ctx = click.Context(command, info_name=f"evalkit {name}".strip())
        inside = False
        for line in command.get_help(ctx).splitlines():
            text = line.strip().split("  #", 1)[0].strip()
            inside = text.startswith("Example") or (inside and bool(text))
            if inside and text.startswith("evalkit "):
                words = shlex.split(text)[1:]
                cut = next((i for i, w in enumerate(words) if w in (">", ">>")), len(words))
                found.append((text, words[:cut]))
    return found


def test_every_command_has_examples() -> None:
    named = {argv[0] for _, argv in examples()}
    assert named == set(main.commands), set(main.commands) - named


@pytest.fixture(scope="module")
def workdir(demo_runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the examples' inputs exist: `results/` holding copies of the real demo runs
    (made from copies of configs/demo.yaml under other names, so their run.json names it), one
    more copy under each run id an example names, the history of them all, and transcript.txt."""
    root = tmp_path_factory.mktemp("examples")
    results = root / "results"
    shutil.copytree(demo_runs["results"], results)
    ids = {w for _, argv in examples() for i, w in enumerate(argv) if w[:8].isdigit() and argv[i - 1] != "--cell"}
    for run_id in sorted(ids):
        shutil.copytree(demo_runs["a"], results / run_id)
    for run in results.glob("*/run.json"):
        run.write_text(run.read_text().replace('"config_path": "', '"config_path": "configs/demo.yaml", "was": "'))
    (root / "transcript.txt").write_text("the model said this once and then stopped\n")
    # a real dashboard export (ATOM's, trimmed: tests/data/atom-dashboard.md) for `history --import data.js`
    shutil.copy(Path(__file__).parent / "data" / "atom-dashboard.js", root / "data.js")
    CliRunner().invoke(main, ["history", "--import", "all", "--results-dir", str(results)], catch_exceptions=False)
    return root


@pytest.mark.parametrize(("text", "argv"), examples(), ids=[text for text, _ in examples()])
def test_the_help_example_runs(text: str, argv: list[str], workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    command = main.commands[argv[0]]
    command.make_context(argv[0], list(argv[1:]))  # parses: options, choices and types exist
    if any(text.startswith(prefix) for prefix in NOT_RUN):
        return
    monkeypatch.chdir(workdir)
    args = [match for word in argv for match in (sorted(glob.glob(word)) if "*" in word else [word])]
    if argv[0] == "matrix":
        args.append("--dry-run")
    done = CliRunner().invoke(main, args, catch_exceptions=False)
    # detect exits 1 when it finds a collapse, report and compare when a threshold broke, and
    # compare --strict 5 when a check is INCONCLUSIVE (the demo runs score 30 and 40 questions)
    allowed = (0, 1, EXIT_INCONCLUSIVE) if "--strict" in argv else (0, 1)
    assert done.exit_code in allowed, f"{text}: exit {done.exit_code}\n{done.output[-2000:]}"
    assert done.output.strip(), text
