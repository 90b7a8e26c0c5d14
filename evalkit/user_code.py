"""Objects a config names as `module.path:ATTR`: a user's engine profile (`engine.profile`), an
eval outside evalkit (`evals.plugins`). One loader, so both are named, imported and refused alike.

Loading imports the module and reads one attribute; it registers nothing anywhere, so validating
a config that names user code changes nothing a later validation or report sees.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import TypeVar

from evalkit.errors import ConfigError

T = TypeVar("T")


def load(spec: str, where: str, kind: type[T], expected: str = "module.path:ATTR") -> T:
    """ATTR of the importable module `module.path` for `module.path:ATTR`: a `kind`, or a
    zero-argument callable returning one. Any failure (user code may raise anything while it is
    imported or called) is a one-line ConfigError starting ``<where>: '<spec>': ``; `expected` says
    what a malformed `spec` should look like."""
    module_name, _, attr = spec.partition(":")
    where = f"{where}: {spec!r}"
    if not module_name or not attr:
        raise ConfigError(f"{where}: expected {expected}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # user code: any failure to import is bad input, said in one line
        raise ConfigError(f"{where}: cannot import {module_name!r}: {one_line(error)}") from error
    try:
        value = getattr(module, attr)
    except AttributeError as error:
        raise ConfigError(f"{where}: module {module_name!r} has no attribute {attr!r}") from error
    if isinstance(value, kind):
        return value
    what = ("an " if kind.__name__[0] in "AEIOU" else "a ") + kind.__name__
    if not (callable(value) and _takes_no_arguments(value)):
        raise ConfigError(f"{where}: {attr} is a {type(value).__name__}, not {what} "
                          "or a zero-argument callable returning one")
    try:
        made = value()
    except Exception as error:  # user code, as above
        raise ConfigError(f"{where}: {attr}() failed: {one_line(error)}") from error
    if not isinstance(made, kind):
        raise ConfigError(f"{where}: {attr}() returned a {type(made).__name__}, not {what}")
    return made


def _takes_no_arguments(value: Callable[..., object]) -> bool:
    try:
        inspect.signature(value).bind()
    except (TypeError, ValueError):  # ValueError: no signature can be read (some builtins)
        return False
    return True


def one_line(error: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
