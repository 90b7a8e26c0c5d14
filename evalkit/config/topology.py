"""A cell is a topology of parts: one engine (the default), prefill and decode workers behind a
router (disaggregated serving), or the ranks of one engine across nodes.

Two halves, both typed:

- what a config declares, `TopologySpec` (an axis value's or the engine's `topology:`), as
  overrides of the cell's own launch per role: `topology: 1p1d`, `{pd: {prefill: {settings:
  {tensor_parallel: 2}}}}`, `{ranks: 2}`;
- what runs, `Topology`: the cell's `Part`s, each with its role, its settings, args, env, devices
  and node index, and the order they start in. `topology_of(cell)` builds it from a cell; a cell
  without a declaration is a topology of one part, `engine`, so every cell takes the same path
  through launch (engine/topology.py), run (run/cell.py), plan and the record.

Why overrides rather than whole launches: the twin of a PD cell is its aggregated cell (the same
axes, `disagg: off`), and a PD-only accuracy loss is a delta between the two only when both run
the same model with the same settings except what the topology changes. Each part's argv is the
cell's argv with the role's settings merged over the cell's and its args appended: what differs
between the pair is exactly what the topology declares.

The profile says how its engine spells each role (profiles/topology.py); this module knows no
engine. Nodes are indices 0..nodes-1 of the cell's allocation: locally every node is this
machine; under Slurm each is one node of the cell's allocation (run/slurm*.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from evalkit.config.base import StrictModel
from evalkit.config.settings import EngineSettings
from evalkit.errors import ConfigError

Role = Literal["engine", "prefill", "decode", "router", "rank"]
"""`engine`: the one process of an ordinary cell; `prefill`/`decode`: PD workers; `router`: the
PD front end; `rank`: one node's share of one engine (rank 0 serves, the others join it)."""
SHORTHAND = re.compile(r"^(?:(?P<off>off|single)|(?P<p>[1-9]\d*)p(?P<d>[1-9]\d*)d)$")
"""`off`/`single`: one engine; `NpMd`: N prefill and M decode workers behind a router."""


class RoleSpec(StrictModel):
    """One PD role's overrides of the cell's launch (each of its `count` workers gets them)."""

    settings: EngineSettings = Field(default_factory=EngineSettings, description=(
        "Engine settings merged over the cell's for this role (tensor_parallel, graph_mode, ...)."))
    args: list[str] = Field(default_factory=list, description="Engine arguments appended for this role.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment added for this role.")
    count: int = Field(1, ge=1, description="Workers of this role.")
    node: int | None = Field(None, ge=0, description=(
        "Node index of this role's workers (default: prefill on node 0, decode on the last node)."))


class RouterSpec(StrictModel):
    """The PD router: the profile's (ATOM's atomesh, sglang_router, the simulator's), or a command."""

    args: list[str] = Field(default_factory=list, description="Router arguments appended to the profile's.")
    env: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = Field(None, description=(
        "The router's whole argv, for an engine that ships none (vLLM): placeholders {python} {host} "
        "{port} {prefill} {decode} (each URL list repeats the flag before it: ['--prefill', '{prefill}'])."))
    node: int = Field(0, ge=0, description="Node index the router runs on.")


class PDSpec(StrictModel):
    """Prefill and decode workers joined by a KV transfer, behind one router."""

    prefill: RoleSpec = Field(default_factory=RoleSpec)
    decode: RoleSpec = Field(default_factory=RoleSpec)
    router: RouterSpec = Field(default_factory=RouterSpec)
    nodes: int = Field(1, ge=1, description="Nodes the cell's parts are spread over.")

    @model_validator(mode="after")
    def _nodes_exist(self) -> PDSpec:
        for where, node in (("prefill.node", self.prefill.node), ("decode.node", self.decode.node),
                            ("router.node", self.router.node)):
            if node is not None and node >= self.nodes:
                raise ValueError(f"{where}: node {node} is not one of the {self.nodes} node(s) 0..{self.nodes - 1}")
        return self


class TopologySpec(StrictModel):
    """A cell's topology as declared: nothing (one engine), `pd`, or `ranks`. A string is a
    shorthand: `off` or `single` (one engine), `NpMd` (N prefill and M decode workers)."""

    pd: PDSpec | None = None
    ranks: int | None = Field(None, ge=2, description="One engine across this many nodes, one rank per node.")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        found = SHORTHAND.match(value)
        if found is None:
            raise ValueError(f"{value!r} is not a topology: off, single, NpMd (1p1d, 2p1d), or a mapping")
        if found.group("off"):
            return {}
        return {"pd": {"prefill": {"count": int(found.group("p"))}, "decode": {"count": int(found.group("d"))}}}

    @model_validator(mode="after")
    def _one_kind(self) -> TopologySpec:
        if self.pd is not None and self.ranks is not None:
            raise ValueError("pd and ranks cannot be combined: a PD worker across nodes is not supported")
        return self

    @property
    def kind(self) -> TopologyKind:
        return "pd" if self.pd is not None else "ranks" if self.ranks is not None else "single"


TopologyKind = Literal["single", "pd", "ranks"]


@dataclass(frozen=True)
class Part:
    """One process of a cell: what it is, what it runs with, and where."""

    name: str
    """Unique in the cell: `engine`, `prefill0`, `decode0`, `router`, `rank0`, ...; names its log
    (`engine.log` for the one part of an ordinary cell, `<name>.log` otherwise)."""
    role: Role
    index: int
    """Its number within its role (the node rank of a `rank`)."""
    node: int
    """Node index within the cell's allocation, 0-based."""
    settings: EngineSettings
    """The cell's settings with the role's merged over them (the router's are the cell's, unused)."""
    args: tuple[str, ...]
    env: dict[str, str]
    devices: int
    """Devices this part occupies on its node (0 for the router; a rank its share of the engine's)."""

    @property
    def log_name(self) -> str:
        return "engine.log" if self.role == "engine" else f"{self.name}.log"


@dataclass(frozen=True)
class Topology:
    """A cell's parts, the one that serves the evals, and the order they start in."""

    kind: TopologyKind
    parts: tuple[Part, ...]
    nodes: int
    router: RouterSpec | None = None
    """The PD router's declaration (its `command` for an engine that ships no router)."""

    @property
    def front(self) -> Part:
        """The part the evals talk to: the router, rank 0, or the one engine."""
        wanted = {"pd": "router", "ranks": "rank", "single": "engine"}[self.kind]
        return next(p for p in self.parts if p.role == wanted and p.index == 0)

    @property
    def waves(self) -> tuple[tuple[Part, ...], ...]:
        """Start order: each wave starts together and every part of it must be ready before the
        next starts. PD: the workers, then the router (whose readiness is seeing them); ranks: all
        at once (rank 0 waits for the others to join, so none can be ready alone)."""
        if self.kind == "pd":
            return (tuple(p for p in self.parts if p.role != "router"),
                    tuple(p for p in self.parts if p.role == "router"))
        return (self.parts,)

    def by_role(self, role: Role) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.role == role)

    def devices_on(self, node: int) -> int:
        """Devices the cell's parts occupy on node `node`."""
        return sum(p.devices for p in self.parts if p.node == node)

    @property
    def devices(self) -> int:
        """Devices the whole cell occupies, on every node together."""
        return sum(p.devices for p in self.parts)


def part_devices(settings: EngineSettings) -> int:
    """Devices one engine process occupies: explicit, else tensor x data parallel."""
    if settings.devices is not None:
        return settings.devices
    return (settings.tensor_parallel or 1) * (settings.data_parallel or 1)


def build_topology(spec: TopologySpec | None, settings: EngineSettings, args: tuple[str, ...],
                   env: dict[str, str]) -> Topology:
    """The parts of a cell whose own launch is `settings`, `args`, `env` under `spec` (None: one engine)."""
    if spec is None or spec.kind == "single":
        return Topology("single", (Part("engine", "engine", 0, 0, settings, args, dict(env), part_devices(settings)),), 1)
    if spec.ranks is not None:
        world = part_devices(settings)
        if world % spec.ranks:  # vLLM's own check (engine/arg_utils.py:2365 at 0.32.0); each rank holds its share
            raise ConfigError(f"topology.ranks: {spec.ranks} nodes do not evenly divide the engine's {world} devices "
                              "(tensor_parallel x data_parallel)")
        return Topology("ranks", tuple(
            Part(f"rank{i}", "rank", i, i, settings, args, dict(env), world // spec.ranks) for i in range(spec.ranks)
        ), spec.ranks)
    pd = spec.pd
    assert pd is not None
    parts: list[Part] = []
    roles: tuple[tuple[Role, RoleSpec, int], ...] = (("prefill", pd.prefill, 0), ("decode", pd.decode, pd.nodes - 1))
    for role, role_spec, default_node in roles:
        merged = settings.merged(role_spec.settings)
        for i in range(role_spec.count):
            parts.append(Part(f"{role}{i}", role, i, default_node if role_spec.node is None else role_spec.node,
                              merged, (*args, *role_spec.args), {**env, **role_spec.env}, part_devices(merged)))
    parts.append(Part("router", "router", 0, pd.router.node, settings, tuple(pd.router.args), dict(pd.router.env), 0))
    return Topology("pd", tuple(parts), pd.nodes, pd.router)
