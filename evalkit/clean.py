"""Control sequences out of text from a model, a log or a commit: safe to print on one line.

Shared by the reports (render/text.py builds its escaping for each target on these) and the live
progress (run/progress.py), which sits below the reports and must not import them.
"""

from __future__ import annotations

import re
from typing import Any

CONTROL = re.compile(
    r"\x1b\[[0-9;?<=>!]*[ -/]*[@-~]"  # CSI: colours, cursor moves (before the bare ESC below)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[@-_]?"  # other escapes and a lone ESC
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"  # C0/C1 controls except \t \n \r
    r"|[\u202a-\u202e\u2066-\u2069]"  # bidi overrides (text that reads differently than it is)
)
"""ANSI CSI and OSC sequences, other escapes, C0/C1 controls and bidi overrides."""


def clean(text: Any) -> str:
    """Drop control sequences and fold line breaks: safe on one line anywhere."""
    text = CONTROL.sub("", str(text))
    return re.sub(r"[\r\n\t\u2028\u2029]", " ", text)


def clean_block(text: Any) -> str:
    """Drop control sequences but keep the lines: for `<pre>` blocks."""
    text = str(text).replace("\r\n", "\n").replace("\r", "\n")
    return CONTROL.sub("", text)
