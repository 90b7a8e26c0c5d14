"""Engine profiles: how one engine's command line, readiness and log lines look.

A profile is data plus one small function (`flags`) that turns a cell's logical settings into that
engine's flags. Adding an engine is one short module that builds a `Profile`: either a line in
`PROFILES` (a built-in) or, with no edit to evalkit, `engine.profile: my_pkg.module:ATTR` in a
config. Both load through `get_profile`, the same way. What the rest of evalkit needs to know about
an engine (does it need the device lock, is it simulated, can it return token ids) is a field of
its profile, so nothing outside this package checks a profile by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evalkit.config import EngineSettings
from evalkit.errors import ConfigError
from evalkit.profiles.isolation import Isolation
from evalkit.profiles.ran import LogReader
from evalkit.profiles.topology import TopologySpelling
from evalkit.user_code import load
from evalkit.wire import OPENAI_FINISH_REASONS, FinishMap, TokenIdsRequest, Wire

PROFILES: dict[str, str] = {
    "atom": "evalkit.profiles.atom",
    "command": "evalkit.profiles.command",
    "sglang": "evalkit.profiles.sglang",
    "sim": "evalkit.profiles.sim",
    "sim-atom": "evalkit.profiles.sim_atom",
    "vllm": "evalkit.profiles.vllm",
}
"""Built-in profile name -> the module whose `PROFILE` it is (imported only when asked for)."""
PROFILE_ATTR = "PROFILE"


@dataclass(frozen=True)
class Launch:
    """What every profile needs to know to build an argv, besides the cell's settings."""

    python: str
    model: str
    served_name: str
    host: str
    port: int | str
    """An int at run time; a placeholder such as `<port>` when only planning."""
    template: tuple[str, ...] = ()
    """The config's argv template (`engine.command`): the whole command line of the `command`
    profile; profiles with their own entry point have no use for it."""


@dataclass(frozen=True)
class MetricNames:
    """Where an engine's Prometheus `/metrics` keeps what evalkit reads (sample names, summed
    over their labels: every DP engine and finish reason). None: the engine has no such figure."""

    generation_tokens: str
    """Counter of output tokens generated."""
    tpot: str | None = None
    """Histogram of per-request time per output token, in seconds (its `_sum` and `_count`)."""
    requests: str | None = None
    """Counter of requests finished."""
    spec_drafts: str | None = None
    spec_draft_tokens: str | None = None
    spec_accepted_tokens: str | None = None
    """Speculative decoding counters: drafts (verify steps), draft tokens proposed, accepted."""


@dataclass(frozen=True)
class SpecCounts:
    """Speculative decoding as an engine's log counts it over a stretch of log (ATOM serves no
    `/metrics` at the refs evalkit tests, so its scheduler's log lines are the only witness)."""

    drafts: int
    """Verify steps (one per sequence per decode step)."""
    draft_tokens: int
    accepted_tokens: int
    lines: int
    """How many log lines the counts were summed from."""


SpecLogReader = Callable[[str], SpecCounts | None]
"""A profile's reader of speculative decoding counts: log text -> the counts it logs; None: none logged."""


@dataclass(frozen=True)
class Profile:
    """One engine's launch and readiness conventions."""

    name: str
    entrypoint: tuple[str, ...]
    """argv prefix; `{python}` is replaced by the configured interpreter."""
    flags: Callable[[EngineSettings, Launch], list[str]]
    health_path: str = "/health"
    fatal_patterns: tuple[str, ...] = ()
    """Log regexes that mean the engine is broken even if the process lives (fail the cell at once)."""
    read_log: LogReader | None = None
    """Reads the engine's log of one launch into what it really ran (graph mode, parallel layout;
    engines rewrite what they are asked, see profiles/ran.py); None: evalkit cannot read its log."""
    supports_token_ids: bool = False
    """Whether completions accept vLLM's `return_tokens_as_token_ids` (exact ids for the detector)
    and its other token-id extensions (`prompt_logprobs` keyed by id, for the divergence eval)."""
    return_token_ids: bool = False
    """Whether streamed completions carry each chunk's exact ids in `choices[i].token_ids` for
    `return_token_ids: true` (SGLang's extension): the detector's ids where `supports_token_ids`
    is False."""
    finish_reasons: FinishMap = field(default_factory=lambda: OPENAI_FINISH_REASONS)
    """The engine's raw finish reasons (regexes, matched whole) -> evalkit's canonical ones
    (evalkit/wire.py); evals judge the canonical one and keep the raw one in their samples."""
    settings_supported: frozenset[str] = field(default_factory=frozenset)
    """EngineSettings fields the flag map understands; any other one set is a config error."""
    visibility_env: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)
    """Variables that restrict the engine to the devices evalkit gives a cell."""
    uses_devices: bool = True
    """Whether the engine occupies the machine's accelerators, so a local run takes the
    machine-wide device lock even when the config declares no devices. Only the simulator, which
    runs on the CPU, says no; an unknown server (`command`) may be anything, so it says yes."""
    simulated: bool = False
    """Whether the engine is evalkit's simulator rather than a real model: run.json records it and
    reports label such runs, so simulated numbers are never read as a real engine's."""
    version_path: str | None = None
    """GET after readiness: JSON whose `version` is the engine's version (its commit, for a source
    tree, is checked against the checkout); None: the engine serves no version known to evalkit."""
    metrics_path: str | None = None
    """The engine's Prometheus endpoint, scraped before and after each eval; None: it has none."""
    metric_names: MetricNames | None = None
    """What to read from `metrics_path`."""
    catalog_flags: Callable[[list[str]], tuple[EngineSettings, list[str]]] | None = None
    """Splits flags from the engine's CI catalog (engine/catalog.py) into the logical settings they
    set and the rest, so a cell's axes override the catalog's settings instead of being overridden
    by flags later on the command line; None: every catalog flag stays an argument."""
    spec_log: SpecLogReader | None = None
    """Reads the speculative decoding counts the engine logs, from the log lines of one eval's
    window (run/engine_report.py): for an engine without `/metrics` counters (ATOM); None: none."""
    scrape_external: bool = False
    """Scrape a server evalkit did not start (`--base-url`) too. False for real engines: a shared
    server's counters also count other clients' requests, so its deltas would not be this eval's."""
    isolation: Isolation = field(default_factory=Isolation)
    """The engine's caches and internal ports, which each launch gets its own of
    (profiles/isolation.py, engine/isolation.py)."""
    builds_from_source: bool = False
    """Whether a git tree of the engine lacks build outputs it needs to run (compiled extensions,
    a generated version file), so a `source` without `setup` is warned about in `evalkit plan`."""

    def wire(self, *, token_ids: bool = True) -> Wire:
        """The engine's dialect as the evals get it; `token_ids=False` for a server evalkit did not
        start (`--base-url`), which may not be the engine the profile describes."""
        request: TokenIdsRequest | None = None
        if token_ids and self.supports_token_ids:
            request = "return_tokens_as_token_ids"
        elif token_ids and self.return_token_ids:
            request = "return_token_ids"
        return Wire(finish_reasons=self.finish_reasons, token_ids=request)
    package: str | None = None
    """The engine's top-level package (`atom`, `vllm`, `sglang`): before the engine starts, its own
    interpreter is asked where this package imports from, and for a cell with a source tree the
    answer must lie inside the tree (evalkit/engine/imports.py). None: nothing to prove."""
    source_subdir: str = ""
    """Where `package` lives inside a checkout of the engine's repository ("" its root; SGLang's
    `python`): that directory goes on PYTHONPATH. A config's `source.subdir` overrides it."""
    startup_file_pattern: str | None = None
    """Log regex with a `path` group: a line the engine writes at start-up naming one of its own
    files (a warning's `file:line:`); for a source tree the first such path must lie inside it."""
    topology: TopologySpelling | None = None
    """How the engine spells a prefill/decode worker, a router and a rank across nodes
    (profiles/topology.py); None: it has none evalkit knows, and a cell declaring one is refused."""
    safe_path: bool = True
    """Start the engine with PYTHONSAFEPATH=1, so that `python -m` does not put the working
    directory first on sys.path. False for a template that runs a script (`python serve.py`),
    which the variable would stop from importing the modules beside it."""

    def argv(self, settings: EngineSettings, launch: Launch, extra_args: list[str] | tuple[str, ...]) -> list[str]:
        """The full argv: entry point, the profile's flags, then the config's own args."""
        unsupported = set(settings.model_dump(exclude_none=True)) - self.settings_supported - {"devices"}
        if unsupported:
            raise ConfigError(
                f"profile {self.name}: does not support setting(s) {', '.join(sorted(unsupported))} "
                f"(supported: {', '.join(sorted(self.settings_supported)) or 'none'}; use args instead)"
            )
        head = [part.replace("{python}", launch.python) for part in self.entrypoint]
        return head + self.flags(settings, launch) + list(extra_args)


def get_profile(name: str) -> Profile:
    """The profile that `engine.profile: name` means: a built-in by name (see `PROFILES`), or the
    attribute ATTR of an importable module for `module.path:ATTR`."""
    if ":" not in name:
        if name not in PROFILES:
            raise ConfigError(f"engine.profile: unknown profile {name!r} (known: {', '.join(sorted(PROFILES))})")
        return _load(f"{PROFILES[name]}:{PROFILE_ATTR}")
    return _load(name)


def _load(spec: str) -> Profile:
    """Import `module.path:ATTR` and take ATTR: a `Profile`, or a zero-argument callable returning one."""
    return load(spec, "engine.profile", Profile, expected="a built-in name or module.path:ATTR")
