"""The README and the reference under docs/ show only what exists (issue 27 item 9).

`mkdocs build --strict` (.ci/run) fails on a broken link or anchor between the pages under docs/;
what it cannot see is checked here: README.md's links (it is outside the site), and that every
`evalkit` command the pages show names a real command, options that command takes, choices it
accepts and a config `--model` can find, and that every repository file they name is there. A
command is read where a reader would copy it: fenced and indented code and inline code spans."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import markdown
import pytest
from markdown_it import MarkdownIt

from evalkit.cli import main
from evalkit.config.lookup import find_config
from evalkit.errors import ConfigError
from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Folders whose paths the pages name as repository files: the top-level ones, and evalkit's
# packages, whose files the pages name from inside evalkit/ ("run/gpus.py"; "sim/deepseek-v4" is
# a model name).
TOP = ("evalkit", "tests", "benchmarks", "scripts", "configs", "examples", "docs", ".ci")
PACKAGES = tuple(p.name for p in (ROOT / "evalkit").iterdir() if (p / "__init__.py").is_file())
SHELL_BREAK = {";", "&&", "||", "|", ">", ">>", "<", "(", ")", "&"}


def code_of(page: Path) -> Iterator[str]:
    """Every piece of code in a page: fenced and indented blocks, and inline spans."""
    for token in MarkdownIt("commonmark").enable("table").parse(page.read_text(encoding="utf-8")):
        if token.type in ("fence", "code_block"):
            yield from token.content.splitlines()
        for child in token.children or ():
            if child.type == "code_inline":
                yield child.content


def commands_in(code: str) -> Iterator[list[str]]:
    """`evalkit ...` invocations in one line of code, each up to the shell's next operator."""
    lexer = shlex.shlex(code.replace("[", " ").replace("]", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # prose in a span ("evalkit's"): an unbalanced quote, no command
        return
    for i, word in enumerate(words):
        if word == "evalkit" and (i == 0 or words[i - 1] in SHELL_BREAK) and i + 1 < len(words):
            rest = words[i + 1:]
            end = next((j for j, w in enumerate(rest) if w in SHELL_BREAK), len(rest))
            yield rest[:end]


def placeholder(value: str) -> bool:
    """NAME, RUN_A, FILE..., configs/NAME.yaml, "${MODEL:-demo}": a value the reader chooses."""
    return "$" in value or "<" in value or any(word.isupper() for word in re.split(r"[^A-Za-z_]+", value))


def test_every_evalkit_command_the_pages_show_parses() -> None:
    assert isinstance(main, click.Group)
    shown = [(page.name, words) for page in PAGES for code in code_of(page) for words in commands_in(code)]
    assert len({page for page, _ in shown}) >= 10, "commands not found: the reader of code spans broke"
    for page, words in shown:
        where = f"{page}: evalkit {' '.join(words)}"
        name, args = ("evalkit", words) if words[0].startswith("-") else (words[0], words[1:])
        command = main if name == "evalkit" else main.commands.get(name)
        assert command is not None, f"{where}: no command {name!r}"
        while isinstance(command, click.Group) and args and args[0] in command.commands:  # `history judge`
            command, args = command.commands[args[0]], args[1:]
        options = {opt: param for param in command.params if isinstance(param, click.Option)
                   for opt in (*param.opts, *param.secondary_opts)} | {"--help": None}
        for i, arg in enumerate(args):
            if not arg.startswith("-") or arg == "-":
                continue
            flag, _, inline = arg.partition("=")
            assert flag in options, f"{where}: {name} takes no {flag}"
            param = options[flag]
            value = inline or (args[i + 1] if i + 1 < len(args) and param is not None and not param.is_flag else "")
            if not value or placeholder(value):
                continue
            if isinstance(param.type, click.Choice):
                assert value in param.type.choices, f"{where}: {flag} {value!r} is not one of {param.type.choices}"
            if flag == "--model":
                try:
                    find_config(value, ROOT)
                except ConfigError as err:
                    pytest.fail(f"{where}: {err}")


def test_every_repository_file_the_pages_name_exists() -> None:
    named = {(page.name, path) for page in PAGES for code in code_of(page)
             for path in re.findall(r"(?<![\w./<-])((?:\.ci|[\w-]+)/[\w./-]*\w)", code)}
    ours = [(page, path) for page, path in named if not placeholder(path) and (
        path.split("/")[0] in TOP or (path.split("/")[0] in PACKAGES and re.search(r"\.\w+$", path)))]
    assert len(ours) > 50, "file names not found: the reader of code spans broke"
    missing = [f"{page}: {path}" for page, path in ours
               if not any((base / path).exists() for base in (ROOT, ROOT / "evalkit"))]
    assert missing == []


def anchors(page: Path) -> set[str]:
    """The ids mkdocs gives a page's headings (Python-Markdown's toc); GitHub's agree for ASCII."""
    md = markdown.Markdown(extensions=["toc"])
    md.convert(page.read_text(encoding="utf-8"))

    def ids(tokens: list[dict]) -> Iterator[str]:
        for token in tokens:
            yield token["id"]
            yield from ids(token["children"])

    return set(ids(md.toc_tokens))


def test_readme_links_reach_pages_and_headings_that_exist() -> None:
    readme = ROOT / "README.md"
    links = re.findall(r"\]\(([^)\s]+)\)", readme.read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"\w+://", link)]
    assert any(link.startswith("docs/") for link in local), "README.md links no docs/ page"
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else readme
        assert target.is_file(), f"README.md links {link}: no {path}"
        assert not anchor or anchor in anchors(target), f"README.md links {link}: no heading #{anchor} in {path or 'README.md'}"


def test_the_readme_has_two_set_up_commands_and_ci_runs_the_second() -> None:
    """A new user's two commands (issue 38 item 10): a venv, evalkit installed in it and the demo
    run; then the test suite, the very command `.ci/run` runs first."""
    set_up = (ROOT / "README.md").read_text(encoding="utf-8").split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)\n```", set_up, flags=re.S)
    assert len(commands) == 2, commands
    assert "python3 -m venv .venv" in commands[0] and commands[0].endswith("evalkit matrix --model demo")
    assert commands[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
