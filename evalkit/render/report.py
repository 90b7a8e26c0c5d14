"""TEMPORARY, deleted before the split lands: the old names over the new renderers, so the CLI
(evalkit/cli/*), store/history.py, render/trend.py and run/progress.py keep working until they
import evalkit.render (render, render_compare) and evalkit.render.text (clean, strip_userinfo)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from evalkit.render import FORMATS
from evalkit.render.details import Details, load_details
from evalkit.render.text import clean, strip_userinfo


def _print(out: Any, console: Console) -> None:
    for renderable in out:
        console.print(renderable)


def markdown(summary: dict[str, Any], details: Details | None = None) -> str:
    return FORMATS["markdown"].report(summary, details or Details())


def terminal(summary: dict[str, Any], console: Console, details: Details | None = None) -> None:
    _print(FORMATS["terminal"].report(summary, details or Details()), console)


def csv(summary: dict[str, Any]) -> str:
    return FORMATS["csv"].report(summary, Details())


def compare_markdown(result: dict[str, Any]) -> str:
    return FORMATS["markdown"].compare(result)


def compare_csv(result: dict[str, Any]) -> str:
    return FORMATS["csv"].compare(result)


def compare_terminal(result: dict[str, Any], console: Console) -> None:
    _print(FORMATS["terminal"].compare(result), console)


__all__ = ["clean", "compare_csv", "compare_markdown", "compare_terminal", "csv", "load_details", "markdown",
           "strip_userinfo", "terminal"]
