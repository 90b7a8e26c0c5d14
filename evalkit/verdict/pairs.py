"""A matrix's compared pairs, each fix-off cell with its fix-on twin and each cell with the baseline:
what the config declares between the two, and what differs beyond it.

The config declares how a pair's cells differ: their axis values (args, env, engine settings,
source tree), which `engine.launch.build_launch` turns into two launches. Whatever else differs
between what the two ran (an engine CI catalog's flags read at another ref, another engine
version from the same tree, other devices) is a change the pair's checks do not test for: their
comparability keys (store/comparability.py) name it, `evalkit plan` says it before any engine
starts (`pair_lines`), and the verdict makes the pair's checks NOT_CHECKED with it
(verdict/deltas.py, through `Pairs.beyond`). A pair whose topologies differ (a PD cell and its
aggregated twin, config/topology.py) declares the front's whole argv and env between them.

Eval set-ups and question sets are left to the comparison itself: a set-up that differs refuses
that eval's metrics alone (`setup_differs`), and the tests pair on the questions both scored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evalkit.config import MatrixConfig
from evalkit.config.cells import Cell, expand, twin_axes
from evalkit.engine.launch import PORT_PLACEHOLDER, CellLaunch, build_launch
from evalkit.errors import EvalkitError
from evalkit.redact import redact_argv
from evalkit.store.comparability import ComparabilityKey, compare_keys, differences, key_of, launch_key
from evalkit.store.records import CellRecord, RunRecord

LEFT_TO_THE_COMPARISON = ("setup", "questions")
"""Parts of a key a pair's comparison handles itself (see the module docstring)."""
UNPLANNED = ("argv", "env", "build")
"""What a pair may differ in when its launches cannot be planned again (a stored run whose
profile no longer loads): the parts an axis can change, so only the rest is checked."""
TOPOLOGY_DECLARES = ("argv", "env")
"""What a pair of cells with different topologies (a PD cell and its aggregated twin) declares
between them: the front's whole command line and environment (a router's against an engine's);
the model, engine, source tree and the rest of the key are still checked."""


def planned_key(config: MatrixConfig, launch: CellLaunch) -> ComparabilityKey:
    """The key of a planned launch (no engine started): the config's model and profile, the argv and
    env evalkit would launch (secrets as hashes), the source tree by repo and ref."""
    source = launch.cell.source
    return launch_key(model=config.model, engine=config.engine.profile, argv=redact_argv(launch.argv),
                      env=launch.env, source=f"{source.repo}@{source.ref}" if source is not None else None,
                      host=launch.host, port=launch.port, secret_env=config.secret_env)


def _declared_key(config: MatrixConfig, cell: Cell) -> ComparabilityKey:
    """A cell's key from its config alone: its axis values applied, nothing read at its ref."""
    return planned_key(config, build_launch(config, cell, config.engine.port or PORT_PLACEHOLDER))


class Pairs:
    """The pairs of one run's matrix, each pair's declared differences planned once."""

    def __init__(self, config: MatrixConfig, run: RunRecord) -> None:
        self.config, self.run = config, run
        self._cells = {_axes(cell.axes): cell for cell in expand(config)}
        self._keys: dict[str, ComparabilityKey | None] = {}

    def _declared(self, cell: Mapping[str, str]) -> ComparabilityKey | None:
        found = self._cells.get(_axes(cell))
        if found is None:
            return None
        if found.id not in self._keys:
            try:
                self._keys[found.id] = _declared_key(self.config, found)
            except EvalkitError:  # the run's profile or a path it names is gone: plan nothing
                self._keys[found.id] = None
        return self._keys[found.id]

    def beyond(self, cell: CellRecord, ref: CellRecord) -> list[str]:
        """What differs between what `cell` and its reference `ref` ran beyond what the config
        declares between them, in words ([]: the pair may be compared)."""
        mine, theirs = self._declared(cell.axes), self._declared(ref.axes)
        declared = ({d.name for d in compare_keys(mine, theirs)} if mine is not None and theirs is not None
                    else set(UNPLANNED))
        if _topologies_differ(self._cells.get(_axes(cell.axes)), self._cells.get(_axes(ref.axes))):
            declared |= set(TOPOLOGY_DECLARES)
        stored = [key_of(self.run, cell), key_of(self.run, ref)]
        if mine is not None and theirs is not None and mine.source is None and theirs.source is None:
            # the config runs the installed engine: its reported version is the build's evidence
            stored = [key.model_copy(update={"source": None}) for key in stored]
        return differences(*stored, allow={*declared, *LEFT_TO_THE_COMPARISON}, sides=(cell.id, ref.id))


def _axes(axes: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(axes.items()))


def _topologies_differ(cell: Cell | None, ref: Cell | None) -> bool:
    return cell is not None and ref is not None and cell.topology_spec != ref.topology_spec


def pair_lines(config: MatrixConfig, cells: Sequence[Cell], launches: Mapping[str, CellLaunch]) -> list[str]:
    """`evalkit plan`'s word on the pairs it will compare: each twin pair and each cell against the
    baseline whose planned launches (`launches`, by cell id, as the plan shows them) differ beyond
    their declared axes, with what differs; or one line saying none does."""
    baseline = next((c for c in cells if config.baseline and c.axes == config.baseline), None)
    by_axes = {_axes(c.axes): c for c in cells}
    found: list[str] = []
    pairs = 0
    for cell in cells:
        wanted = twin_axes(cell.axes, config)
        twin = by_axes.get(_axes(wanted)) if wanted else None
        for ref, words in ((twin, f"its fix-on twin {twin.id if twin else ''}"),
                           (baseline if baseline not in (cell, twin) else None, "the baseline")):
            if ref is None or cell.id not in launches or ref.id not in launches:
                continue
            pairs += 1
            declared = {d.name for d in compare_keys(_declared_key(config, cell), _declared_key(config, ref))}
            if _topologies_differ(cell, ref):
                declared |= set(TOPOLOGY_DECLARES)
            beyond = differences(planned_key(config, launches[cell.id]), planned_key(config, launches[ref.id]),
                                 allow=declared, sides=(cell.id, ref.id))
            if beyond:
                found.append(f"#   {cell.id} vs {words}: {'; '.join(beyond)}")
    if not pairs:
        return []
    if not found:
        return [f"# compared pairs: all {pairs} differ only in their declared axes"]
    return [f"# compared pairs: {len(found)} of {pairs} differ beyond their declared axes; their checks "
            "will be NOT_CHECKED", *found]
