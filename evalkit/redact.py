"""Keep secrets out of everything evalkit writes or prints.

Results folders get pasted into PRs. Any environment variable whose name looks secret, and any
name the config lists in `secret_env`, is shown as `***` in run.json, cell.json, plan output,
reports and the history database; so is the value after an argv flag that carries a key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

REDACTED = "***"
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
SECRET_FLAG = re.compile(r"^--?(?:[\w]+[-_])*(?:token|key|secret|password|passwd|credentials?)(?:[-_][\w-]*)?$",
                         re.IGNORECASE)
"""A flag whose name has a secret's word as one of its words (``--api-key``, ``--hf-token``,
``--admin-api-key``), not inside a longer word: ``--max-num-batched-tokens 8192`` (vLLM),
``--max-prefill-tokens`` (SGLang) and ``--sim-tokens-per-second`` are serving settings a reader of
run.json needs, and a boolean flag wrongly taken for one would hide the flag after it."""


def is_secret(name: str, extra: Iterable[str] = ()) -> bool:
    return bool(SECRET_NAME.search(name)) or name in set(extra)


def redact_env(env: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    extra = set(extra)
    return {k: (REDACTED if is_secret(k, extra) else v) for k, v in env.items()}


def redact_argv(argv: Iterable[str]) -> list[str]:
    """`--api-key X` -> `--api-key ***`; `--api-key=X` -> `--api-key=***`."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if SECRET_FLAG.match(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def secret_values(env: Mapping[str, str], extra: Iterable[str] = ()) -> list[str]:
    """Values to scrub from free text (logs): the secret-looking variables' values, longest first."""
    extra = set(extra)
    return sorted((v for k, v in env.items() if is_secret(k, extra) and len(v) >= 4), key=len, reverse=True)


def scrub(text: str, values: Iterable[str]) -> str:
    for value in values:
        text = text.replace(value, REDACTED)
    return text


def scrub_file(path: Path, values: list[str]) -> None:
    """Replace secret values in a log the engine wrote itself (engines print their env and args)."""
    if not values or not path.is_file():
        return
    data = path.read_bytes()
    cleaned = data
    for value in values:
        cleaned = cleaned.replace(value.encode(), REDACTED.encode())
    if cleaned != data:
        tmp = path.with_name(f".{path.name}.scrub.tmp")
        tmp.write_bytes(cleaned)
        os.replace(tmp, path)


def strip_userinfo(url: str) -> str:
    """`https://user:token@host/x` -> `https://host/x`: a clone URL may carry a credential."""
    return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", url, flags=re.IGNORECASE)
