"""Typed matrix configs: the YAML a user writes, validated before anything starts.

A config is the whole identity of a matrix: which engine, how to launch it, which axes to vary,
which cell is the reference, which evals to run and which thresholds fail a nightly job. Every
model forbids unknown keys, because a misspelt key silently ignored is a matrix that tests
something other than what its author believes.

loader.py reads YAML into these models; errors come out as one line: ``FILE: field.path: what
was expected``.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from evalkit.config.base import StrictModel
from evalkit.config.catalog import Catalog
from evalkit.config.log_assertion import LogAssertion
from evalkit.config.settings import EngineSettings
from evalkit.config.thresholds import METRICS_CONTEXT, Threshold
from evalkit.config.topology import TopologySpec

if TYPE_CHECKING:
    from evalkit.evals.base import Eval, EvalSettings
    from evalkit.evals.evalset import EvalSet

DEFAULT_HOST = "127.0.0.1"
DEFAULT_STARTUP_TIMEOUT_S = 45 * 60  # ATOM's CI waits 45 x 60 s for a large model
DEFAULT_STOP_GRACE_S = 30.0
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.]*$"
"""Axis and value names: cell ids join them with '-', so they hold no '-' and are filesystem-safe."""
CONFIG_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"

class Source(StrictModel):
    """An engine source tree: a git repository (path or URL) and a ref to check out."""

    repo: str = Field(min_length=1, description="Local path or clonable URL of the engine repo.")
    ref: str = Field(min_length=1, description="Commit, tag or branch; resolved to a SHA.")
    setup: list[str] | None = Field(
        default=None, min_length=1,
        description="argv run once per worktree, in it, before its first engine start (a build: vLLM's compiled "
                    "extensions, SGLang's kernels); placeholders {python} {worktree}. See engine/setup.py.")

    subdir: str | None = Field(
        default=None, description="Where the engine's package lives inside the checkout (SGLang: `python`); this "
                          "directory goes on PYTHONPATH. Default: the profile's; \"\" is the checkout's root.")

    @field_validator("subdir")
    @classmethod
    def _inside_checkout(cls, subdir: str | None) -> str | None:
        """A subdirectory must stay inside the checkout: the import proof compares against it."""
        if subdir is not None and (subdir.startswith(("/", "~")) or ".." in subdir.replace("\\", "/").split("/")):
            raise ValueError("must be a path inside the checkout (relative, no '..')")
        return subdir


class AxisValue(StrictModel):
    """One named value of an axis: the overrides it applies to the base engine launch."""

    args: list[str] = Field(default_factory=list, description="Extra engine arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    settings: EngineSettings = Field(default_factory=EngineSettings)
    source: Source | None = None
    log: list[LogAssertion] = Field(default_factory=list, description="Assertions on the engine log of its cells.")
    topology: TopologySpec | None = Field(None, description=(
        "The cell's parts: `off` (one engine), `1p1d` or `{pd: ...}` (prefill and decode behind a router), "
        "`{ranks: N}` (one engine across N nodes); config/topology.py."))

    @model_validator(mode="after")
    def _names_something(self) -> AxisValue:
        if not (self.args or self.env or self.source or self.topology or self.settings.model_dump(exclude_none=True)):
            raise ValueError("an axis value must set at least one of args, env, settings, source, topology")
        return self


class EngineConfig(StrictModel):
    """How to launch the engine, before any axis applies its overrides."""

    profile: str = Field(description="Engine profile: a built-in (atom, sim, vllm, sglang, command) or a user "
                                     "profile as `module.path:ATTR` (a Profile, or a zero-argument callable returning one).")
    python: str | None = Field(None, description="Interpreter for `python -m` entry points; default: evalkit's own.")
    host: str = Field(DEFAULT_HOST, description="Address the engine binds; loopback unless you need otherwise.")
    port: int | None = Field(None, ge=1, le=65535, description="Fixed HTTP port; default: a free one per cell.")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    settings: EngineSettings = Field(default_factory=EngineSettings)
    source: Source | None = None
    command: list[str] | None = Field(
        None, description="argv template for the `command` profile: {python} {host} {port} {model} {served_name}."
    )
    health_path: str | None = Field(None, description="Override the profile's health endpoint.")
    metrics_path: str | None = Field(None, description="Override the profile's Prometheus endpoint (scraped around each eval).")
    fatal_patterns: list[str] = Field(default_factory=list, description="Extra log regexes that fail a cell at once.")
    cache: Literal["fresh", "keyed", "engine"] | None = Field(
        None, description="The engine's compile caches (engine/caches.py): keyed (default where the profile names a "
                          "variable that moves them) reuses a folder named by evalkit's key of what decides their "
                          "contents; fresh gives each launch empty ones; engine leaves the engine's own.")
    cache_dir: str | None = Field(
        None, description="Where keyed caches live; default .evalkit-cache/engine-caches beside the results folder.")
    cache_max_gib: float = Field(100.0, gt=0, description="Keyed caches' size bound: least recently used evicted.")
    log: list[LogAssertion] = Field(default_factory=list, description="Assertions on every cell's engine log.")
    catalog: Catalog | None = Field(
        None, description="Take the model's launch from the engine's CI catalog in each cell's source tree "
                          "(every cell needs a `source`); see engine/catalog.py.")
    package: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The engine's top-level package, whose import path proves which tree runs (default: the "
                    "profile's; the `command` profile has none unless given here).")
    topology: TopologySpec | None = Field(None, description="Every cell's parts unless an axis sets them (config/topology.py).")
    plugin: bool = Field(
        False, description="The axes' source trees hold a plugin the engine loads (`package` names it), not the "
                           "engine: only its import path witnesses the tree, no build is expected (docs/real-answers.md).")


class Evals(StrictModel):
    """Each eval's settings under its name (`evals.gsm8k`, `evals.repetition`, ...).

    The fields come from the eval registry (evalkit/evals/registry.py): `config_model()` builds
    the config model with one field per registered eval and per eval `plugins` names, so adding
    an eval adds its section here with no edit to this file, and a misspelt section is still an
    unknown key. The section resolves the config's evals once (`evalset`): the run, its verdict
    and its report take them from here.
    """

    plugins: list[str] = Field(default_factory=list, description=(
        "Evals outside evalkit as module.path:ATTR (an Eval, or a zero-argument callable returning one); "
        "each runs with its section evals.<its name> (defaults where omitted)."))

    @functools.cached_property
    def evalset(self) -> EvalSet:
        """This config's evals: the registered ones, then those `plugins` names (`registry.resolve`)."""
        from evalkit.evals import registry

        return registry.resolve(self)

    def enabled(self) -> list[tuple[Eval, EvalSettings]]:
        """The evals a cell runs, in order, with their settings (`EvalSet.enabled`)."""
        return self.evalset.enabled(self)

    @model_validator(mode="after")
    def _known_metrics(self, info: ValidationInfo) -> Evals:
        """Hand the metrics this section's evals report (`EvalSet.metrics`, a pure function of it)
        to `thresholds`, validated after `evals` in the same call (`parse_config` passes a
        context): nothing outside this validation learns them."""
        if isinstance(info.context, dict):
            info.context[METRICS_CONTEXT] = self.evalset.metrics(self)
        return self


class Timeouts(StrictModel):
    startup: float = Field(DEFAULT_STARTUP_TIMEOUT_S, gt=0, description="Seconds until the engine must be ready.")
    stop_grace: float = Field(DEFAULT_STOP_GRACE_S, gt=0, description="SIGTERM -> SIGKILL grace seconds.")
    warmup: float = Field(300.0, gt=0, description="Seconds of warm-up retries after /health is OK.")
    hang: float = Field(300.0, gt=0, description="Seconds without a /health answer while evals run = a hang.")
    cell: float | None = Field(None, gt=0, description="Budget of one cell; over it the cell is stopped and fails.")
    run: float | None = Field(None, gt=0, description="Budget of the run; cells not started in time are skipped.")
    gpu_release: float = Field(120.0, gt=0, description="Seconds after an engine stops for its GPUs' memory to come back.")
    gpus_busy: float = Field(0.0, ge=0, description="Seconds to wait for GPUs used by other processes before the "
                             "first cell (0: refuse at once); `--wait-for-gpus` overrides.")


class Devices(StrictModel):
    """The box's devices: cells run side by side on disjoint device sets.

    `kind: cpu` is for engines that compute on the CPU (vLLM's CPU build): each device is one
    logical CPU of this machine, and a cell's engine, with every process it starts, runs only on
    the CPUs it was given (engine/_deathsig.py sets the affinity before the exec, children inherit
    it). Why not a variable like the GPUs' `CUDA_VISIBLE_DEVICES`: an engine's server, scheduler
    and tokenizer processes compute too, and only the affinity confines them all."""

    count: int = Field(ge=1, description="Devices on the box, numbered 0..count-1 (kind cpu: logical CPU ids).")
    kind: Literal["gpu", "cpu"] = Field(
        "gpu", description="gpu: accelerators, restricted through visibility_env; cpu: logical CPUs, each cell's "
                           "engine pinned to its own (sched_setaffinity), for CPU engines side by side.")
    visibility_env: list[str] | None = Field(
        None, description="Variables that restrict an engine to its devices; default: the profile's (kind gpu), "
                          "none (kind cpu)."
    )


class SlurmSettings(StrictModel):
    """Where and how each cell's job is submitted (`executor.kind: slurm`)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time_limit: str | None = Field(None, description="sbatch --time, e.g. 02:00:00.")
    cpus_per_task: int | None = Field(None, ge=1)
    mem: str | None = Field(None, description="sbatch --mem, e.g. 64G.")
    nodes: int = Field(1, ge=1)
    gpus: bool = Field(True, description="Ask for the cell's device need as --gpus (off on CPU-only clusters).")
    extra_args: list[str] = Field(default_factory=list, description="More sbatch options, as argv.")
    retries: int = Field(0, ge=0, description="Resubmit a job Slurm killed (time limit, node failure, preemption).")
    poll_s: float = Field(5.0, gt=0, description="Seconds between squeue polls.")


class Executor(StrictModel):
    kind: Literal["local", "slurm"] = "local"
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)


class RunPlan(StrictModel):
    """How each cell runs its evals on its one engine (run/wave.py; docs/config.md#run)."""

    evals: Literal["wave", "apart"] = Field(
        "wave", description="wave: a cell's evals at once, the long generations first; apart: one after another "
                            "(an engine is not batch-invariant: concurrency is itself an accuracy axis).")
    concurrency: int | None = Field(
        None, ge=1, description="Requests a wave keeps in flight in all, split across its evals in proportion to "
                                "what each asks alone; default: the cell's max_num_seqs, else no limit.")
    stop_early: bool = Field(
        True, description="Stop a cell's long generations once their collapses FAIL every collapse threshold, "
                          "judged in their seeded submission order (run/stopping.py); healthy cells run in full.")
    stop_alpha: float = Field(
        0.001, gt=0, lt=0.5, description="Level of the anytime-valid test a stop also needs: a healthy cell is "
                                         "stopped with chance at most about this.")


class ABAxis(StrictModel):
    """The A/B axis (the fix): which axis, and which of its values is `on` and `off`."""

    axis: str
    on: str
    off: str


class MatrixConfig(StrictModel):
    """A whole matrix: engine, axes, reference cells, evals, thresholds."""

    description: str = ""
    model: str = Field(min_length=1, description="Model path or id passed to the engine.")
    served_name: str | None = Field(None, description="Name the server lists in /v1/models; default: model.")
    engine: EngineConfig
    axes: dict[str, dict[str, AxisValue]] = Field(default_factory=dict)
    exclude: list[dict[str, str | list[str]]] = Field(default_factory=list)
    baseline: dict[str, str] | None = None
    ab: ABAxis | None = None
    evals: Evals = Field(default_factory=Evals)
    thresholds: list[Threshold] = Field(default_factory=list)
    multiplicity: Literal["holm", "bh", "none"] = Field(
        "holm", description="How each threshold's p-values are adjusted across the cells it is checked on "
                            "(evalkit/stats/multiplicity.py): holm (any false alarm <= alpha), bh (false discovery rate), none.")
    timeouts: Timeouts = Field(default_factory=Timeouts)
    secret_env: list[str] = Field(default_factory=list, description="Extra env names to redact.")
    devices: Devices | None = Field(None, description="Declare the box's devices to run cells in parallel.")
    executor: Executor = Field(default_factory=Executor)
    run: RunPlan = Field(default_factory=RunPlan)

    @field_validator("axes", mode="before")
    @classmethod
    def _topology_lists(cls, axes: Any) -> Any:
        """`disagg: [off, 1p1d]`: an axis given as a list of topology shorthands, each value
        named after itself (config/topology.py)."""
        if not isinstance(axes, dict):
            return axes
        return {axis: {str(v): {"topology": v} for v in values} if isinstance(values, list) else values
                for axis, values in axes.items()}

    @field_validator("axes")
    @classmethod
    def _axis_names(cls, axes: dict[str, dict[str, AxisValue]]) -> dict[str, dict[str, AxisValue]]:
        for axis, values in axes.items():
            if not re.match(NAME_PATTERN, axis):
                raise ValueError(f"axis name {axis!r} must match {NAME_PATTERN}")
            if not values:
                raise ValueError(f"axis {axis!r} has no values")
            for value in values:
                if not re.match(NAME_PATTERN, value):
                    raise ValueError(f"value name {axis}.{value!r} must match {NAME_PATTERN}")
        return axes

    @model_validator(mode="after")
    def _references_exist(self) -> MatrixConfig:
        def check_choice(where: str, axis: str, value: str) -> None:
            if axis not in self.axes:
                raise ValueError(f"{where}: {axis!r} is not an axis (axes: {', '.join(self.axes) or 'none'})")
            if value not in self.axes[axis]:
                raise ValueError(f"{where}: {axis}={value!r} is not a value of {axis} ({', '.join(self.axes[axis])})")

        for i, rule in enumerate(self.exclude):
            for axis, values in rule.items():
                for value in [values] if isinstance(values, str) else values:
                    check_choice(f"exclude[{i}]", axis, value)
        for where, assertion in self._log_assertions():
            for axis, values in assertion.when.items():
                for value in [values] if isinstance(values, str) else values:
                    check_choice(f"{where}.when", axis, value)
        if self.baseline is not None:
            for axis, value in self.baseline.items():
                check_choice("baseline", axis, value)
            missing = [a for a in self.axes if a not in self.baseline]
            if missing:
                raise ValueError(f"baseline: names no value for axis {', '.join(missing)}")
        if self.ab is not None:
            check_choice("ab.on", self.ab.axis, self.ab.on)
            check_choice("ab.off", self.ab.axis, self.ab.off)
        if self.devices is not None and self.devices.kind == "cpu" and self.executor.kind == "slurm":
            raise ValueError("devices.kind: cpu pins engines to this machine's CPUs; under executor.kind slurm "
                             "Slurm places a job's CPUs (executor.slurm.cpus_per_task)")
        return self

    def _log_assertions(self) -> list[tuple[str, LogAssertion]]:
        """Every log assertion with the config path that states it (for error messages)."""
        found = [(f"engine.log[{i}]", a) for i, a in enumerate(self.engine.log)]
        for axis, values in self.axes.items():
            for name, value in values.items():
                found += [(f"axes.{axis}.{name}.log[{i}]", a) for i, a in enumerate(value.log)]
        return found

    @property
    def served(self) -> str:
        return self.served_name or self.model


_MODELS: dict[tuple[int, tuple[Eval, ...]], type[MatrixConfig]] = {}


def config_model(plugins: tuple[Eval, ...] = ()) -> type[MatrixConfig]:
    """MatrixConfig with an `evals` section per registered eval and per eval of `plugins` (what a
    config's `evals.plugins` names), cached per registry state and plugins.

    Built-in evals (`default_enabled`) are present with their defaults when a config omits them,
    and so are the plugins (naming one runs it); others are None unless configured.
    """
    from evalkit.evals import registry

    key = (registry.generation(), plugins)
    model = _MODELS.get(key)
    if model is None:
        fields: dict[str, Any] = {
            ev.name: (ev.settings_model, Field(default_factory=ev.settings_model)) if ev.default_enabled
            else (ev.settings_model | None, None)
            for ev in registry.registered()
        }
        fields |= {ev.name: (ev.settings_model, Field(default_factory=ev.settings_model)) for ev in plugins}
        evals = create_model("Evals", __base__=Evals, __module__=__name__, **fields)
        model = create_model("MatrixConfig", __base__=MatrixConfig, __module__=__name__,
                             evals=(evals, Field(default_factory=evals)))
        if any(generation != key[0] for generation, _ in _MODELS):
            _MODELS.clear()
        _MODELS[key] = model
    return model
