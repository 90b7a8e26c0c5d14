"""Axes -> cells: the cartesian product of a config's axes, minus its exclusions.

A cell is frozen: its axis values are the keys of every metric and every report row, and its id
(`tp8-piecewise-fixoff`) is stable across runs so history and `--resume` can match cells.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from evalkit.config import EngineSettings, MatrixConfig, Source
from evalkit.config.topology import Topology, TopologySpec, build_topology
from evalkit.errors import ConfigError


@dataclass(frozen=True)
class Cell:
    """One serving configuration: the base engine launch with one value of every axis applied."""

    id: str
    axes: dict[str, str] = field(hash=False)
    settings: EngineSettings
    args: tuple[str, ...]
    env: dict[str, str] = field(hash=False)
    source: Source | None
    topology_spec: TopologySpec | None = field(default=None, hash=False)
    """The declared topology (an axis value's or the engine's); None: one engine."""

    @property
    def topology(self) -> Topology:
        """The cell's parts (config/topology.py): one `engine` part unless it declares more."""
        try:
            return build_topology(self.topology_spec, self.settings, self.args, self.env)
        except ConfigError as e:
            raise ConfigError(f"cell {self.id}: {e}") from e

    def matches(self, selection: dict[str, set[str]]) -> bool:
        """Whether every axis named in `selection` has one of the selected values."""
        return all(self.axes.get(axis) in values for axis, values in selection.items())


def _excluded(axes: dict[str, str], rules: list[dict[str, str | list[str]]]) -> bool:
    for rule in rules:
        if all(axes[a] in ([v] if isinstance(v, str) else v) for a, v in rule.items()):
            return True
    return False


def expand(config: MatrixConfig) -> list[Cell]:
    """Every cell of the matrix, in axis order (first axis varies slowest)."""
    names = list(config.axes)
    cells: list[Cell] = []
    seen: dict[str, dict[str, str]] = {}
    for combo in itertools.product(*(config.axes[a].items() for a in names)):
        axes = {a: value_name for a, (value_name, _) in zip(names, combo)}
        if _excluded(axes, config.exclude):
            continue
        settings = config.engine.settings
        args = list(config.engine.args)
        env = dict(config.engine.env)
        source = config.engine.source
        source_axis: str | None = None
        topology, topology_axis = config.engine.topology, None
        for axis, (value_name, value) in zip(names, combo):
            settings = settings.merged(value.settings)
            args += value.args
            env.update(value.env)
            if value.topology is not None:
                if topology_axis is not None:
                    raise ConfigError(f"axes.{axis}.{value_name}.topology: axis {topology_axis} also sets the topology")
                topology, topology_axis = value.topology, axis
            if value.source is not None:
                if source_axis is not None:
                    raise ConfigError(
                        f"axes.{axis}.{value_name}.source: axis {source_axis} also sets the engine source"
                    )
                source, source_axis = value.source, axis
        cell_id = "-".join(axes.values()) or "default"
        if cell_id in seen:
            raise ConfigError(f"axes: cells {seen[cell_id]} and {axes} both get the id {cell_id!r}")
        seen[cell_id] = axes
        cells.append(Cell(cell_id, axes, settings, tuple(args), env, source,
                          topology if topology is not None and topology.kind != "single" else None))
    if not cells:
        raise ConfigError("exclude: every cell of the matrix is excluded")
    return cells


def parse_selection(spec: str, config: MatrixConfig) -> dict[str, set[str]]:
    """`graph=piecewise,fix=fixoff` (AND across keys; `a|b` for either value) -> selection."""
    selection: dict[str, set[str]] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, values = part.partition("=")
        if not sep or not values:
            raise ConfigError(f"--only {spec!r}: expected KEY=VALUE[,KEY=VALUE...], got {part!r}")
        if key not in config.axes:
            raise ConfigError(f"--only {spec!r}: {key!r} is not an axis (axes: {', '.join(config.axes)})")
        wanted = set(values.split("|"))
        unknown = wanted - set(config.axes[key])
        if unknown:
            raise ConfigError(
                f"--only {spec!r}: {key}={'|'.join(sorted(unknown))} is not a value of {key} "
                f"({', '.join(config.axes[key])})"
            )
        selection.setdefault(key, set()).update(wanted)
    return selection


def select(cells: list[Cell], specs: tuple[str, ...], config: MatrixConfig) -> list[Cell]:
    """Cells matching any of the `--only` specs (all cells when there are none)."""
    if not specs:
        return cells
    selections = [parse_selection(s, config) for s in specs]
    chosen = [c for c in cells if any(c.matches(s) for s in selections)]
    if not chosen:
        raise ConfigError(f"--only {' '.join(specs)}: matches no cell of the matrix")
    return chosen


def baseline_cell(cells: list[Cell], config: MatrixConfig) -> Cell | None:
    """The reference cell named by `baseline`, or None when the config names none."""
    if config.baseline is None:
        return None
    for cell in cells:
        if cell.axes == config.baseline:
            return cell
    raise ConfigError(f"baseline: {config.baseline} is not a cell of the matrix (is it excluded?)")


def twin_axes(axes: dict[str, str], config: MatrixConfig) -> dict[str, str] | None:
    """The axes of a cell's twin: a fix-off cell's fix-on cell (the same other axes); else a
    disaggregated cell's aggregated cell (`disagg: off`, `topology_axis`); None for other cells."""
    if config.ab is not None and axes.get(config.ab.axis) == config.ab.off:
        return {**axes, config.ab.axis: config.ab.on}
    found = topology_axis(config)
    if found is not None and axes.get(found[0]) not in (None, found[1]):
        return {**axes, found[0]: found[1]}
    return None


def twin_rule(config: MatrixConfig) -> dict[str, str] | None:
    """summary.json's `ab`: the A/B axis, else the topology axis as `{axis, on}` (a PD cell's twin
    is the cell with `on`, its aggregated value; there is no one `off`), so reports say what
    `twin` means; None when cells have no twin."""
    if config.ab is not None:
        return config.ab.model_dump()
    found = topology_axis(config)
    return {"axis": found[0], "on": found[1]} if found else None


def twin_word(axes: dict[str, str], config: MatrixConfig) -> str:
    """How a cell's twin is named in words: `fix-on twin`, or `aggregated twin` for a PD cell's."""
    if config.ab is not None and axes.get(config.ab.axis) == config.ab.off:
        return "fix-on twin"
    return "aggregated twin" if topology_axis(config) is not None else "twin"


def topology_axis(config: MatrixConfig) -> tuple[str, str] | None:
    """The axis whose values change the topology and the one value of it that is a single
    engine (`disagg: [off, 1p1d]` -> ("disagg", "off")): a topology cell's twin is that value's
    cell. None when no axis sets a topology, or none or several of its values are one engine."""
    for axis, values in config.axes.items():
        kinds = {name: value.topology.kind if value.topology is not None else None for name, value in values.items()}
        if any(k not in (None, "single") for k in kinds.values()):
            single = [name for name, k in kinds.items() if k in (None, "single")]
            return (axis, single[0]) if len(single) == 1 else None
    return None


def ab_twin(cell: Cell, cells: list[Cell], config: MatrixConfig) -> Cell | None:
    """The fix-on cell for a fix-off cell, or None."""
    wanted = twin_axes(cell.axes, config)
    return next((c for c in cells if c.axes == wanted), None) if wanted else None
