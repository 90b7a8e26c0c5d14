"""A model's launch from the engine's own CI catalog, read inside the tree each cell runs.

ATOM's CI launches every model from one entry of `.github/benchmark/models_accuracy.json`: its
`extraArgs` (parsed by bash, .github/workflows/atom-test.yaml:533-535 at HEAD ffdf3bb5), its
`env_vars` (KEY=VALUE lines, .github/actions/setup-gpu-container/action.yml:106), and its gates
(`accuracy_threshold`, `mtp_accept_threshold`, `accuracy_baseline`). A copy of an entry in a config
drifts: at HEAD "DeepSeek-V4-Pro" passes `--index_cache_dtype fp4`, which neither side of PR
#1596's A/B (0e9804c21, ccc861dc5) knows. So `engine.catalog: {entry: NAME}` reads the entry in each
cell's source tree, at that cell's own ref; the engine's and the axes' settings, args and env are
applied on top (the profile's `catalog_flags` turns the entry's `-tp`, `--cudagraph-mode`, ... into
settings, which axes then override). When two refs of a matrix hold different entries, the A/B
tests more than its change: `differences` says what, for `evalkit plan` and every report.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalkit.config import EngineSettings, MatrixConfig, Source
from evalkit.config.cells import Cell
from evalkit.engine.sources import ResolvedSource, peek_file
from evalkit.errors import ConfigError
from evalkit.profiles import get_profile

FIELDS = ("model_path", "extraArgs", "env_vars", "accuracy_threshold", "mtp_accept_threshold", "accuracy_baseline")
"""What of an entry evalkit takes, records and compares between refs (the rest is CI plumbing:
runner, test_level, notes)."""


@dataclass(frozen=True)
class CatalogEntry:
    """One entry as read at one commit, and what it adds to a cell's launch."""

    entry: str
    path: str
    ref: str
    sha: str | None
    fields: dict[str, Any]
    """The entry's `FIELDS` it has, as read."""
    settings: EngineSettings
    args: tuple[str, ...]
    env: dict[str, str]

    def record(self) -> dict[str, Any]:
        """As cell.json stores it (`catalog`)."""
        return {"entry": self.entry, "path": self.path, "ref": self.ref, "sha": self.sha, "fields": self.fields,
                "settings": self.settings.model_dump(exclude_none=True), "args": list(self.args), "env": self.env}

    def apply(self, cell: Cell) -> Cell:
        """`cell` with the entry underneath: its settings overridden by the cell's, its args and env first."""
        return dataclasses.replace(cell, settings=self.settings.merged(cell.settings), args=(*self.args, *cell.args),
                                   env={**self.env, **cell.env})


def parse_entry(config: MatrixConfig, text: str, where: str, ref: str, sha: str | None) -> CatalogEntry:
    """The config's entry in catalog `text` (read at `where`), or ConfigError in one line."""
    catalog = config.engine.catalog
    assert catalog is not None
    try:
        entries = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"engine.catalog: {where} is not JSON ({e})") from e
    names = [e.get("model_name") for e in entries if isinstance(e, dict)] if isinstance(entries, list) else None
    if names is None:
        raise ConfigError(f"engine.catalog: {where} is not a list of entries")
    if catalog.entry not in names:
        raise ConfigError(f"engine.catalog: {where} has no entry {catalog.entry!r} (entries: {', '.join(map(str, names))})")
    found = next(e for e in entries if isinstance(e, dict) and e.get("model_name") == catalog.entry)
    fields = {key: found[key] for key in FIELDS if key in found}
    try:
        flags = shlex.split(str(fields.get("extraArgs") or ""))
        split = get_profile(config.engine.profile).catalog_flags
        settings, args = split(flags) if split else (EngineSettings(), flags)
    except (ValueError, ValidationError) as e:
        raise ConfigError(f"engine.catalog: {where}: entry {catalog.entry!r}: extraArgs: {e}".splitlines()[0]) from e
    env = dict(line.strip().split("=", 1) for line in str(fields.get("env_vars") or "").splitlines() if "=" in line)
    return CatalogEntry(catalog.entry, catalog.path, ref, sha, fields, settings, tuple(args), env)


def entry_in_tree(config: MatrixConfig, cell: Cell, tree: ResolvedSource | None) -> CatalogEntry | None:
    """The entry in the cell's checked-out tree (a run); None when the config reads no catalog."""
    if config.engine.catalog is None:
        return None
    source = _source(config, cell)
    if tree is None:
        raise ConfigError(f"engine.catalog: cell {cell.id}: its source {source.repo}@{source.ref} is not checked out")
    sha, path = tree.sha, tree.worktree / config.engine.catalog.path
    if not path.is_file():
        raise ConfigError(f"engine.catalog: {source.repo}@{source.ref} has no {config.engine.catalog.path}")
    return parse_entry(config, path.read_text(encoding="utf-8"), f"{config.engine.catalog.path} at {source.ref}",
                       source.ref, sha)


def entry_at_ref(config: MatrixConfig, cell: Cell, cache: Path) -> CatalogEntry | str | None:
    """The entry at the cell's ref without a checkout (`evalkit plan`), or why it cannot be read
    offline yet; None when the config reads no catalog."""
    if config.engine.catalog is None:
        return None
    source = _source(config, cell)
    found = peek_file(source, cache, config.engine.catalog.path)
    if found is None:
        return f"{source.repo} not fetched yet: read when the matrix runs"
    sha, text = found
    if text is None:
        raise ConfigError(f"engine.catalog: {source.repo}@{source.ref} has no {config.engine.catalog.path}")
    return parse_entry(config, text, f"{config.engine.catalog.path} at {source.ref}", source.ref, sha)


def _source(config: MatrixConfig, cell: Cell) -> Source:
    if cell.source is None:
        raise ConfigError(f"engine.catalog: cell {cell.id} has no source tree to read "
                          f"{config.engine.catalog.path if config.engine.catalog else 'the catalog'} from")
    return cell.source


def differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """How two recorded entries (`CatalogEntry.record`) differ, one phrase per field, `mine` against
    `theirs`: flags and variables added or dropped, other fields as `theirs -> mine`."""
    out = []
    if mine.get("entry") != theirs.get("entry"):
        out.append(f"entry {theirs.get('entry')!r} -> {mine.get('entry')!r}")
    a, b = mine.get("fields", {}), theirs.get("fields", {})
    for key in FIELDS:
        if a.get(key) == b.get(key):
            continue
        if key in ("extraArgs", "env_vars"):
            split = shlex.split if key == "extraArgs" else str.split
            there, here = split(str(b.get(key) or "")), split(str(a.get(key) or ""))
            said = []
            for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=there, b=here, autojunk=False).get_opcodes():
                if op in ("delete", "replace"):
                    said.append(f"- {shlex.join(there[i1:i2])}")
                if op in ("insert", "replace"):
                    said.append(f"+ {shlex.join(here[j1:j2])}")
            out.append(f"{key}: {'; '.join(said)}")
        else:
            out.append(f"{key} {b.get(key)} -> {a.get(key)}")
    return out


def describe_entry(entry: CatalogEntry) -> str:
    """One line for `evalkit plan`: which entry at which commit, and what it adds."""
    sha = f" ({entry.sha[:12]})" if entry.sha else ""
    gates = ", ".join(f"{key} {entry.fields[key]}" for key in FIELDS[3:] if key in entry.fields)
    settings = ", ".join(f"{key}={value}" for key, value in entry.settings.model_dump(exclude_none=True).items())
    env = " ".join(f"{key}={shlex.quote(value)}" for key, value in entry.env.items())
    return (f"{entry.entry!r} in {entry.path} at {entry.ref}{sha}: settings {settings or 'none'}; "
            f"args {shlex.join(entry.args) or 'none'}; env {env or 'none'}" + (f"; gates {gates}" if gates else ""))


def catalog_lines(config: MatrixConfig, cells: list[Cell], entries: dict[str, CatalogEntry]) -> list[str]:
    """What `evalkit plan` says when cells read different entries: each cell against its fix-on twin
    (else the baseline), once per pair of refs; nothing when they agree."""
    by_axes = {tuple(sorted(c.axes.items())): c for c in cells}
    said: dict[tuple[str, str], list[str]] = {}
    for cell in cells:
        ref = _reference(config, cell, by_axes)
        if ref is None or cell.id not in entries or ref.id not in entries:
            continue
        mine, theirs = entries[cell.id], entries[ref.id]
        differ = differences(mine.record(), theirs.record())
        if differ and (theirs.ref, mine.ref) not in said:
            said[(theirs.ref, mine.ref)] = [f"{cell.id} (at {mine.ref}) vs {ref.id} (at {theirs.ref}): {'; '.join(differ)}"]
    if not said:
        return []
    head = ("\n# catalog: the sides read different entries of the engine's catalog, so the comparison "
            "tests more than its change")
    return [head, *(line for lines in said.values() for line in lines)]


def _reference(config: MatrixConfig, cell: Cell, by_axes: dict[tuple[tuple[str, str], ...], Cell]) -> Cell | None:
    """The cell's fix-on twin, else the baseline cell (itself excepted)."""
    if config.ab is not None and cell.axes.get(config.ab.axis) == config.ab.off:
        twin = by_axes.get(tuple(sorted({**cell.axes, config.ab.axis: config.ab.on}.items())))
        if twin is not None:
            return twin
    base = by_axes.get(tuple(sorted((config.baseline or {}).items())))
    return base if base is not None and base.id != cell.id else None
