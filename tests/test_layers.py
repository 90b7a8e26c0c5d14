"""evalkit's imports flow one way (issue 27 item 4): the layer order README.md's layout section
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
    ("foundation", ("evalkit.errors", "evalkit.stats", "evalkit.wire", "evalkit.redact", "evalkit.clean",
                    "evalkit.gitinfo", "evalkit.multiplicity", "evalkit.power", "evalkit.sequential",
                    "evalkit.store.files", "evalkit.store.__init__", "evalkit.user_code")),
    ("evals", ("evalkit.evals",)),
    ("config", ("evalkit.config",)),
    ("cells", ("evalkit.cells",)),
    ("engine", ("evalkit.profiles", "evalkit.engine", "evalkit.devices")),
    ("run", ("evalkit.run",)),
    ("store", ("evalkit.store.history",)),
    ("verdicts", ("evalkit.checks", "evalkit.verdicts", "evalkit.summary", "evalkit.comparison",
                  "evalkit.power_plan")),
    ("render", ("evalkit.render",)),
    ("commands", ("evalkit.run.api", "evalkit.bisect", "evalkit.calibrate", "evalkit.cli", "evalkit.sim",
                  "evalkit.__init__")),
]
"""Lowest first; a module belongs to the layer of its longest matching prefix. `run.api` (run a
matrix, then write its verdict and report) and the commands sit on top of everything they drive."""

PACKAGE_ROOT = "evalkit"
"""`import evalkit` / `from evalkit import __version__`: the version, allowed anywhere."""


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def layer_of(module: str) -> int:
    """Index in LAYERS of the longest prefix naming `module` (a package's modules share it)."""
    best, found = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            owns = module == prefix or module.startswith(prefix + ".") or module == prefix.removesuffix(".__init__")
            if owns and len(prefix) > best:
                best, found = len(prefix), index
    assert found >= 0, f"{module}: in no layer of tests/test_layers.py LAYERS (add it where it belongs)"
    return found


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every evalkit import in the file, wherever it stands."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from evalkit.store import history` imports the module evalkit.store.history
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
    assert layer_of("evalkit.verdicts") > layer_of("evalkit.store.history") > layer_of("evalkit.store.files")
    assert layer_of("evalkit.run.api") > layer_of("evalkit.render") > layer_of("evalkit.run.progress")
    assert layer_of("evalkit.evals.gsm8k") < layer_of("evalkit.config.schema")


def test_every_module_has_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        layer_of(module_name(path))


def test_the_readme_draws_the_same_order() -> None:
    """README.md's layout section states the layers in this order, one `->` chain."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    chain = re.search(r"Imports flow one way, lowest first: (.+?)\.\n", readme, re.S)
    assert chain, "README.md: the layout section's 'Imports flow one way, lowest first: ...' line"
    assert [name.strip() for name in chain[1].replace("\n", " ").split("->")] == [name for name, _ in LAYERS]
