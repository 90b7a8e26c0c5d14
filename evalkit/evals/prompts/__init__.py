"""Shipped, versioned prompt sets for the long-generation collapse check.

A prompt set is a JSONL file in this folder, one ``{"id", "kind", "prompt"}`` per line. Its
version is the SHA-256 of the file's bytes, recorded with every result, so two runs are only
compared on the very same prompts: editing a prompt makes a new version, and a set that should
stay comparable with old runs gets a new file (``long_generation_v2.jsonl``) instead.

``long_generation_v1`` asks for long outputs of nine kinds (story, reasoning, explanation, math,
code, essay, howto, dialogue, structured), interleaved so that the first N prompts of the set
are a mix of all kinds. The "structured" prompts ask for tables, JSON, logs, schedules and
lyrics: healthy repetitive text on which a detector must stay quiet.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

from evalkit.errors import ConfigError

DEFAULT_PROMPT_SET = "long_generation_v1"


@dataclass(frozen=True)
class Prompt:
    id: str
    kind: str
    prompt: str


@dataclass(frozen=True)
class PromptSet:
    id: str
    """The set's name, e.g. ``long_generation_v1``."""
    version: str
    """SHA-256 (hex) of the file."""
    prompts: tuple[Prompt, ...]


def load_prompt_set(name: str = DEFAULT_PROMPT_SET) -> PromptSet:
    """Load a shipped prompt set by name, or a set of the same format from a file when `name` ends
    in ``.jsonl`` (a path, relative to the working directory: a model's own prompts, e.g. the
    answers model's arithmetic questions, docs/real-answers.md); a missing or malformed file is a
    ConfigError naming it. Either way the version is the file's SHA-256."""
    path: Traversable = (Path(name).expanduser() if name.endswith(".jsonl")
                         else resources.files(__name__) / f"{name}.jsonl")
    if not path.is_file():
        raise ConfigError(f"evals.repetition.prompt_set: no prompt set {name!r} ({path})")
    raw = path.read_bytes()
    prompts: list[Prompt] = []
    for lineno, line in enumerate(raw.decode("utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt = Prompt(id=row["id"], kind=row["kind"], prompt=row["prompt"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError(f"{path}:{lineno}: not a prompt record ({e})") from e
        if not all(isinstance(v, str) and v.strip() for v in (prompt.id, prompt.kind, prompt.prompt)):
            raise ConfigError(f"{path}:{lineno}: id, kind and prompt must be non-empty strings")
        prompts.append(prompt)
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{path}: duplicate prompt ids")
    return PromptSet(id=name, version=hashlib.sha256(raw).hexdigest(), prompts=tuple(prompts))
