"""evalkit's imports flow one way (issue 27 item 4): the layer order docs/layout.md
draws, pinned here. A module may import its own layer or a lower one; an import of a higher layer
(at the top of a module or inside a function: both run) fails with the module, the line and the
two layers, so a new import that bends the data flow is caught in review, not by a cycle later.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "evalkit"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("stats", "store")),
    ("evals", ("evals",)),
    ("config", ("config",)),
    ("engine", ("profiles", "engine", "devices")),
    ("run", ("run",)),
    ("history", ("history",)),
    ("verdict", ("verdict",)),
    ("render", ("render",)),
    ("commands", ("api", "bisect", "cli", "sim")),
]
"""Lowest first, one layer per folder of evalkit/: a module belongs to the layer of its folder.
The loose modules directly under evalkit/ (errors, wire, redact, clean, gitinfo, user_code) are
foundation, and the package itself (`evalkit/__init__.py`, which re-exports the api's entry
points) is commands: those two rules, and no list of modules."""

PACKAGE_ROOT = "evalkit"
"""`import evalkit` / `from evalkit import __version__`: the version, allowed anywhere."""


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def layer_of(module: str) -> int:
    """Index in LAYERS of the folder holding `module` (`evalkit.verdict.checks` -> verdict)."""
    parts = module.split(".")
    assert parts[0] == PACKAGE_ROOT, module
    if parts[1:] in ([], ["__init__"]):
        return len(LAYERS) - 1
    folder = parts[1]
    if not (PACKAGE / folder).is_dir():
        return 0
    found = [index for index, (_, folders) in enumerate(LAYERS) if folder in folders]
    assert found, f"{module}: its folder evalkit/{folder}/ is in no layer of tests/test_layers.py LAYERS (add it where it belongs)"
    return found[0]


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every evalkit import in the file, wherever it stands."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from evalkit.verdict import checks` imports the module evalkit.verdict.checks
            out += [(node.lineno, f"{node.module}.{alias.name}" if (ROOT / Path(*node.module.split("."), f"{alias.name}.py")).is_file()
                     else node.module) for alias in node.names]
    return [(line, name) for line, name in out if name == PACKAGE_ROOT or name.startswith(PACKAGE_ROOT + ".")]


def upward_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        mine = layer_of(me)
        for line, name in imports(path):
            if name == PACKAGE_ROOT:
                continue
            theirs = layer_of(name)
            if theirs > mine:
                found.append(f"{path.relative_to(ROOT)}:{line}: {me} ({LAYERS[mine][0]}) imports {name} "
                             f"({LAYERS[theirs][0]})")
    return found


def test_no_module_imports_a_higher_layer() -> None:
    assert upward_imports() == []


def test_a_higher_import_would_be_caught() -> None:
    """The check itself: the history importing the verdicts (as it did) is reported."""
    assert layer_of("evalkit.verdict.deltas") > layer_of("evalkit.history.db") > layer_of("evalkit.store.files")
    assert layer_of("evalkit.api.matrix") > layer_of("evalkit.render") > layer_of("evalkit.run.progress")
    assert layer_of("evalkit.evals.gsm8k") < layer_of("evalkit.config.schema")


def test_every_module_has_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        layer_of(module_name(path))


def test_the_readme_draws_the_same_order() -> None:
    """docs/layout.md, the contributor's map, states the layers in this order, one `->` chain."""
    layout = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    chain = re.search(r"Imports flow one way, lowest first: (.+?)\.\n", layout, re.S)
    assert chain, "docs/layout.md: the 'Imports flow one way, lowest first: ...' line"
    assert [name.strip() for name in chain[1].replace("\n", " ").split("->")] == [name for name, _ in LAYERS]
