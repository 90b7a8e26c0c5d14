"""YAML -> MatrixConfig, with every failure listed, one line each naming the file and the field.

PyYAML is strict-ened on two points that silently change a matrix: duplicate keys (PyYAML keeps
the last) and YAML 1.1 booleans (`on`/`off`/`yes`/`no` would turn axis values into True/False).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from evalkit.config.schema import MatrixConfig, config_model
from evalkit.errors import ConfigError
from evalkit.evals.base import Eval


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that rejects duplicate keys (PyYAML keeps the last one silently)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# YAML 1.2 booleans: only true/false. YAML 1.1 also reads on/off/yes/no as booleans, which
# would turn `ab: {on: fixon, off: fixoff}` or an axis value named `on` into True/False.
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _format_location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif "[" not in str(item) and "function-" not in str(item):
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(top level)"


SHOWN_INPUT = 60
"""Longest repr of a bad value quoted in an error: a model-level error's input is the whole config
(issue 38: a bad `baseline:` printed ~1,900 characters); its message names the field instead."""


def format_validation_error(path: Path | str, error: ValidationError) -> str:
    """Every error, one line each: the file, the failing field path and what was expected (a
    field that a model-level check names in its message is not prefixed `(top level)`)."""
    lines, found_all = [], error.errors()
    if any(found["loc"][:1] == ("evals",) for found in found_all):
        # a bad evals section leaves its metrics unknown: the thresholds naming them are not at fault
        found_all = [f for f in found_all if not f["msg"].startswith("Value error, unknown metric")]
    for found in found_all:
        where = _format_location(found["loc"])
        message = found["msg"].removeprefix("Value error, ")
        if found["type"] == "extra_forbidden":
            message = "unknown key (not a field of this section)"
        elif ("input" in found and found["type"] not in ("missing", "model_type") and found["loc"]
              and not isinstance(found["input"], dict)):  # a section's own check names its fields itself
            shown = repr(found["input"])
            message += f" (got {shown})" if len(shown) <= SHOWN_INPUT else ""
        line = f"{path}: {message}" if where == "(top level)" and ": " in message else f"{path}: {where}: {message}"
        lines.append("".join(c if c.isprintable() else repr(c)[1:-1] for c in line))  # a key "\r" stays on its line
    return "\n".join(lines)


def parse_config(data: Any, path: Path | str) -> MatrixConfig:
    """Validate already-loaded YAML data; `path` only names the source in errors."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        model = config_model(_plugins(data))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
    try:
        return model.model_validate(data, context={})
    except ValidationError as e:
        raise ConfigError(format_validation_error(path, e)) from e


def _plugins(data: dict[str, Any]) -> tuple[Eval, ...]:
    """The evals `evals.plugins` names, loaded (registered nowhere) before the config is validated:
    their sections are fields of the model that validates it. A `plugins` that is not a list of
    strings loads nothing here; validation then names the field."""
    from evalkit.evals import registry

    evals = data.get("evals")
    refs = evals.get("plugins") if isinstance(evals, dict) else None
    if not isinstance(refs, list) or not all(isinstance(ref, str) for ref in refs):
        return ()
    return registry.plugins(refs)


def load_config(path: Path) -> MatrixConfig:
    """Read and validate one config file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: no such config file") from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: {where}invalid YAML: {problem}") from e
    return parse_config(data, path)
