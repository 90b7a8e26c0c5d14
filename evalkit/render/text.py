"""Text from a model or a log, made safe for where a report puts it.

A PR comment is read by people who did not write it, so every renderer escapes for its target:

* markdown table cells (`md_cell`): control sequences dropped, newlines folded, HTML escaped,
  `|` and the inline-markup characters backslash-escaped, so no output can add a column or a
  tag, and `@name` defused so a report pings nobody;
* `<details>` bodies (`html_pre`): model text only inside `<pre>` with every `<`, `>`, `&` and
  quote escaped, so neither `</pre>` nor `</details>` nor `<script>` can appear in it;
* code spans and fences (`md_code`, `md_fence`): opened with more backticks than the content
  holds, so the content cannot close them;
* the terminal (`term_text`): rich markup escaped and control sequences dropped;
* CSV (`csv_safe`): text a spreadsheet would run as a formula gets a leading quote;
* a local absolute path (`no_local_paths`: an engine's argv, where its package imported from,
  the command that made the run) keeps its last two parts, `…/evalkit/__init__.py`: a report is
  pasted where other people read it, and `/home/alice/...` is neither theirs nor telling.
"""

from __future__ import annotations

import html
import re
from typing import Any

from rich.markup import escape as rich_escape

from evalkit.clean import clean, clean_block

MAX_CELL_CHARS = 300
"""Longest text in one table cell (error messages): the whole message is in cell.json."""
MAX_EXCERPT_CHARS = 600
"""Longest model output in one `<pre>` block."""


_LOCAL_PATH = re.compile(r"(?<![\w.:/~-])/(?:[^\s/'\"`<>|;,()]+/)*[^\s/'\"`<>|;,()]+")
"""An absolute path: a `/` that starts a token (not a URL's, not a ratio's like 21/64), then parts."""


def no_local_paths(text: str) -> str:
    """`text` with every absolute path cut to its last two parts behind `…/` (`/tmp` alone stays)."""
    def short(match: re.Match[str]) -> str:
        parts = match.group(0).strip("/").split("/")
        return match.group(0) if len(parts) < 2 else "…/" + "/".join(parts[-2:])
    return _LOCAL_PATH.sub(short, text)


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", **{c: "\\" + c for c in "\\`*_[]|~"}}


def md_cell(text: Any, limit: int = MAX_CELL_CHARS) -> str:
    """Escape text for a GitHub markdown table cell (or any one-line markdown position).

    An `@name` gets a word joiner after the `@`: GitHub would otherwise notify that user.
    """
    escaped = "".join(_MD_ESCAPES.get(c, c) for c in truncate(clean(text), limit))
    return re.sub(r"@(?=\w)", "@\u2060", escaped)


def md_code(text: Any) -> str:
    """An inline code span the content cannot close (longer backtick fence than any inside).

    Not for table cells: GFM splits cells on `|` before it sees code spans (use md_cell).
    """
    body = clean(text)
    fence = "`" * (max((len(m) for m in re.findall(r"`+", body)), default=0) + 1)
    pad = " " if body.startswith(("`", " ")) or body.endswith(("`", " ")) else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def md_fence(text: str, info: str = "") -> str:
    """A fenced code block whose fence is longer than any backtick run in `text`."""
    body = clean_block(text)
    fence = "`" * max(3, max((len(m) for m in re.findall(r"`+", body)), default=0) + 1)
    return f"{fence}{info}\n{body}\n{fence}"


def html_text(text: Any) -> str:
    """One line of text for inside an HTML tag such as <summary>."""
    return html.escape(clean(text), quote=True)


def html_pre(text: Any, limit: int = MAX_EXCERPT_CHARS) -> str:
    """Model output as an HTML <pre> block: nothing in it can close the block or open a tag.

    The newline after <pre> is the one HTML drops, so a leading newline of the text survives.
    """
    return "<pre>\n" + html.escape(truncate(clean_block(text), limit), quote=True) + "</pre>"


def term_text(text: Any) -> str:
    """One line for rich's console: no control sequence reaches the terminal, no markup is run."""
    return rich_escape(clean(text))


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """Text a spreadsheet would run as a formula gets a leading quote (OWASP CSV injection)."""
    if isinstance(value, str):
        value = clean(value)
        return "'" + value if value.startswith(_FORMULA_START) else value
    return value
