"""The eval protocol: what an eval declares, so the cell lifecycle, store, verdicts, report and history
work for any eval without an edit.

An eval is one module holding one `Eval` object, registered in `evalkit.evals.registry` or named
in a config (`evals.plugins: [module.path:ATTR]`). Its core:

* `name`: its key under `evals:` in a config, the prefix of its metric names (``gsm8k.flexible``),
  the name of its samples file (``gsm8k.samples.jsonl``) and of its timing (``gsm8k_s``);
* `settings_model`: the pydantic model (an `EvalSettings` subclass: `enabled` and the rest) of
  its config section, so a misspelt key is an error naming the file and field; every `settings`
  parameter below is an instance of it;
* `metrics`: `MetricSpec`s, each with its comparison kind (paired 0/1 per question, a count of
  events, a continuous value, a value between two cells) and, in one `MetricDisplay`, what the
  report shows of it; an eval whose metrics depend on its config (one per lm-eval task) derives
  them in `metrics_for(settings)` and `metrics_in(raw)`, pure functions, so which metrics exist
  never depends on what a process validated before;
* `run(ctx, settings) -> EvalResult`: score one running server (`ctx.server`), reporting
  progress through `ctx.progress`;
* `flat(raw) -> {name: value}`: the headline metrics of one cell under their dotted names (the
  summary.json contract);
* `display`: how reports name it, its CSV columns and how a flipped sample reads (`EvalDisplay`).

Whatever else an eval can do is an opt-in capability, a small protocol in
evals/capabilities.py that it implements by defining the method; a consumer asks
``isinstance(ev, Pairwise)``, one way for every capability: a value between two cells
(`Pairwise`), more facts on a comparison (`ExtraDelta`), running a subset of its samples for a
bisect step (`Subsets`), a check before the run and shared files (`Checks`, `Prepares`), figures
the cell lifecycle records rather than a `run` (`LifecycleRecorded`), why a cell lacks a metric
(`Unmeasured`), flags no threshold expresses (`CellFlags`).

The simple-evals shape (an eval fits on a screen) with inspect_ai's separation of the dataset,
the solver and the scorer left to each eval: GSM8K delegates all three to lm-eval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

import httpx
from pydantic import BaseModel, ConfigDict

from evalkit import __version__
from evalkit.evals.unit_kinds import NUMBER, SHARE, Unit
from evalkit.wire import Wire


class Comparison(str, Enum):
    """How a metric of two cells is compared (verdict/deltas.py holds the tests)."""

    PAIRED = "paired"
    """Per-question 0/1 marks, paired on the questions both cells answered: McNemar's exact test."""
    COUNT = "count"
    """k events out of n samples (e.g. collapsed generations): Fisher's exact test."""
    CONTINUOUS = "continuous"
    """A number per cell: the difference, without a test."""
    PAIRWISE = "pairwise"
    """A value measured between two cells' samples by the eval itself (`Pairwise.pairwise`), e.g. a
    divergence of their token distributions: no cell has it alone, so it has no value column and
    `min`/`max` do not apply. Its `diff` is the change from the reference compared with itself (a
    divergence: the value, from 0; an agreement: the value - 1), so `max_rise_*` (or, for a
    higher-is-better one, `max_drop_*`) thresholds read it like any other change; a noise floor
    (`noise_floor`, from the cells' own repeats) is the |diff| re-running one cell produced."""
    NONE = "none"
    """Shown, never compared."""


class Evidence(str, Enum):
    """The kind of examples a report shows of a metric (`MetricDisplay.details`): which rows the
    eval leaves for them and what they are. The evals name it, the report reads and draws it
    (render/details.py's `SHOWN`: one entry per kind, for every format); a str, so summary.json
    records the word."""

    FLIPS = "flips"
    """PAIRED: the questions that flipped against the baseline and the twin."""
    EVENTS = "events"
    """COUNT: the samples where the event happened (`event_field`), e.g. the detector's evidence."""
    PARTED = "parted"
    """COUNT: the same samples, each with identical requests' texts and where they part, as
    evals/consistency.py writes them."""
    WORST = "worst"
    """PAIRWISE: the `worst` places the eval's `pairwise` found, with the text around them."""


@dataclass(frozen=True)
class MetricDisplay:
    """What a report shows of one metric: none of it changes what is measured or compared, so a
    metric's core (`MetricSpec`) reads without it."""

    label: str
    """Words for threshold messages (``GSM8K flexible``)."""
    key: str = ""
    """Short key of its report columns (``flexible``, ``flexible_vs_baseline``); default: its name."""
    column: str | None = None
    """Header of its value column in the matrix table; None: no column."""
    column_when_measured: bool = False
    """Show that column only in a run where some cell has the metric (a figure most engines or
    configs lack, such as speculative decoding's acceptance)."""
    text: Callable[[Mapping[str, Any]], str] | None = None
    """The value as the report shows it, from a cell's flat metrics; default: three decimals."""
    delta_label: str | None = None
    """When set, the table has `Δ <delta_label> vs baseline` and `vs twin` columns (PAIRWISE, a
    value between the two cells rather than a difference: `<delta_label> vs baseline`)."""
    pivot: str | None = None
    """When set, a pivot of this metric by configuration with this title."""
    details: Evidence | None = None
    """What the report's details section shows (`Evidence`); None: nothing."""
    event_words: str | None = None
    """COUNT: what `k of n` counts, in the report's words ("long generations collapsed")."""

    def __post_init__(self) -> None:
        """A plugin may name the kind by its word ("events"): kept as the `Evidence` it names, so
        a misspelt one fails where the eval is defined, not in a report."""
        if self.details is not None:
            object.__setattr__(self, "details", Evidence(self.details))


@dataclass(frozen=True)
class MetricSpec:
    """One metric an eval reports: its flat name, how it is compared, and (`display`) how it is shown."""

    name: str
    """Flat dotted name, the key in summary.json and a threshold's `metric:` (``gsm8k.flexible``)."""
    comparison: Comparison
    display: MetricDisplay
    higher_is_better: bool = True
    mark_field: str | None = None
    """PAIRED: the boolean field of each row of the eval's samples file holding the mark."""
    count_metric: str | None = None
    n_metric: str | None = None
    """COUNT: the flat metrics holding k and n."""
    event_field: str | None = None
    """COUNT: the boolean field of a samples row marking the event (the report's "events" or
    "parted", a bisect step's excerpt)."""
    noise_floor: Callable[[Mapping[str, Any]], float | None] | None = None
    """From the eval's raw cell metrics: the largest change re-running the same cell produced
    (PAIRED, PAIRWISE): a change within it breaks no threshold."""
    unit: Unit = NUMBER
    """What its values are, their range and how a change reads (evals/units.py): a threshold
    outside the range is bad input at config load. PAIRED and COUNT metrics are shares by
    construction: left at the default, `SHARE`; any other unit declared for them is an error."""

    def __post_init__(self) -> None:
        """A per-question mark or a k-of-n count is a share whatever the eval forgot to say; one
        declared in tokens/s is a mistake in the eval, raised where it is defined."""
        if self.comparison in (Comparison.PAIRED, Comparison.COUNT):
            if self.unit is NUMBER:
                object.__setattr__(self, "unit", SHARE)
            elif self.unit != SHARE:
                raise ValueError(f"{self.name}: a {self.comparison.value} metric is a share, not {self.unit.name}")

    @property
    def short(self) -> str:
        """The key of its report columns: `display.key`, else its name."""
        return self.display.key or self.name

    def show(self, flat: Mapping[str, Any]) -> str:
        """Its value in a cell's flat metrics as the report shows it."""
        if self.display.text is not None:
            return self.display.text(flat)
        value = flat.get(self.name)
        return "-" if value is None else f"{value:.3f}"


def floor_of_repeats(short: str, field: str | None = None) -> Callable[[Mapping[str, Any]], float | None]:
    """A `MetricSpec.noise_floor` for an eval that re-runs a cell and stores what the repeats moved
    as ``raw["repeats"]["noise_floor"][short]``: the value itself (divergence) or, with `field`,
    that field of it (GSM8K's `stats.NoiseFloor` record, ``max_pairwise_diff``); None without repeats."""

    def floor(raw: Mapping[str, Any]) -> float | None:
        found = ((raw.get("repeats") or {}).get("noise_floor") or {}).get(short)
        return found[field] if field is not None and found is not None else found

    return floor


class EvalSettings(BaseModel):
    """Base of every eval's config section: unknown keys are errors, values immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True


@dataclass(frozen=True)
class Server:
    """The server an eval asks: where, which model, in which dialect. One value, so the functions
    between an eval's `run` and its requests pass one thing, not three."""

    base_url: str
    """Server root, e.g. ``http://127.0.0.1:8000`` (no ``/v1``)."""
    served_name: str
    """The model name the server serves (the `model` of every request)."""
    wire: Wire = field(default_factory=Wire)
    """The engine's dialect, per its profile: how it names finish reasons (evals judge the
    canonical one, `wire.finish(raw)`) and how, if at all, it returns exact token ids."""
    transport: httpx.AsyncBaseTransport | None = field(default=None, compare=False, repr=False)
    """How the HTTP evals reach it; None: over the network at `base_url`. An ASGI application in
    this process (`httpx.ASGITransport(app)`, the simulator's Starlette app) answers the same
    requests with no process and no port: how evalkit's own tests drive the evals."""


@dataclass(frozen=True)
class EvalProgress:
    """One eval's line in the live view, bound once to its cell by the lifecycle: calling it with
    the samples done (and of how many) shows ``gsm8k 120/1319``. Evals pass it down as it is."""

    show: Callable[[str, str], None] = lambda state, detail: None
    """The cell's line: (state, detail)."""
    label: str = ""
    """What the line says is running: the eval's name, or a part of it (``lm_eval mmlu``)."""

    def __call__(self, done: int, total: int | None = None) -> None:
        self.show(self.label, str(done) if total is None else f"{done}/{total}")

    def labelled(self, label: str) -> EvalProgress:
        """The same line for a part of the eval (a task, a repeat)."""
        return EvalProgress(self.show, label)


StopWhen = Callable[[Sequence[Mapping[str, Any]]], "str | None"]
"""A cell's stopping rule: given the samples judged so far, in the order they were submitted,
why to stop the rest now, or None (run/stopping.py builds it, an eval that can stop asks it)."""


@dataclass(frozen=True)
class EvalContext:
    """What one eval gets to run against one cell's server."""

    server: Server
    cell_dir: Path
    """The cell's folder: samples, logs and extra files of the eval go here."""
    run_dir: Path
    """The run's folder: files shared by every cell (written by `Prepares.prepare`)."""
    limit: int | None = None
    """`--limit`: at most this many questions or prompts."""
    progress: EvalProgress = field(default_factory=EvalProgress)
    """The live view's line of this eval (a no-op by default)."""
    earlier: Mapping[str, EvalResult] = field(default_factory=dict)
    """Results of the evals that ran before this one on the same server, by eval name."""
    only: tuple[str, ...] | None = None
    """Run just these samples: their `id`s as the eval's samples file holds them (GSM8K
    ``test-12``, a prompt id of the repetition set); None: all of them (up to `limit`). Only
    an eval with `Subsets` is given it; an id it does not know is an EvalError."""
    stop_when: StopWhen | None = None
    """The cell's stopping rule (run/stopping.py), for an eval that judges its samples in the
    order it submitted them: given that prefix, why to stop the rest now, or None. An eval that
    stops records `stopped` in its metrics and the prefix as its samples."""


@dataclass
class EvalResult:
    """One eval's outcome on one cell."""

    metrics: dict[str, Any]
    """Raw metrics, stored under ``cell.json`` ``metrics.<eval name>``; `Eval.flat` reads them.
    ``metrics["setup"]`` (see `fingerprint`) says what the score depends on."""
    samples: list[dict[str, Any]]
    """Per-sample records, written to ``<eval name>.samples.jsonl``; each has an ``id``."""
    texts: list[tuple[str, str | None]] = field(default_factory=list)
    """Generated texts and finish reasons, for later evals to scan (the collapse detector does)."""


SETUP_KEY = "setup"
"""Where an eval's result stores its setup fingerprint: ``cell.json`` ``metrics.<eval>.setup``."""


def fingerprint(fields: Mapping[str, Any]) -> dict[str, Any]:
    """An eval setup as stored: its fields plus a short hash of them (canonical JSON).

    Two cells' scores are comparable only when their setups are equal: everything that changes
    a score (task version and config, endpoint, chat template, n-shot, generation settings, data,
    lm-eval and evalkit versions, tokenizer) belongs in the fields.
    """
    import hashlib
    import json

    canonical = json.dumps(fields, sort_keys=True, default=str, separators=(",", ":"))
    return {"hash": hashlib.sha256(canonical.encode()).hexdigest()[:16], "fields": dict(fields)}


def setup_fingerprint(fields: Mapping[str, Any]) -> dict[str, Any]:
    """What an eval's result stores under `SETUP_KEY`: the `fingerprint` of its setup fields and of
    evalkit's version, which every setup depends on (added here, once, rather than by each eval)."""
    return fingerprint({**fields, "evalkit_version": __version__})


def setup_differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """Names of the setup fields that differ between two fingerprints ([] when equal or when
    either is unknown: runs stored before fingerprints existed are compared as before)."""
    if not a or not b or a.get("hash") == b.get("hash"):
        return []
    fa, fb = a.get("fields") or {}, b.get("fields") or {}
    return sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k)) or ["hash"]


def describe_sample(sample: Mapping[str, Any]) -> dict[str, Any]:
    """A flipped question as the report shows it: `target`, `answer`, `finish`, `text` (the
    default of `EvalDisplay.describe_sample`)."""
    return {"target": sample.get("target"), "answer": sample.get("answer"),
            "finish": sample.get("finish_reason"), "text": sample.get("response") or sample.get("text", "")}


@dataclass(frozen=True)
class EvalDisplay:
    """How reports show an eval: none of it changes what is measured."""

    title: str = ""
    """How reports name the eval ("GSM8K"); default: its name."""
    csv_fields: tuple[str, ...] = ()
    """Flat metrics in the CSV report, besides the compared ones (a `_ci95` pair is split in two)."""
    csv_columns: Callable[[tuple[MetricSpec, ...]], tuple[str, ...]] | None = None
    """Where the CSV's columns depend on the run's metrics (one per lm-eval task): them, from the
    eval's share of the summary's recorded metrics; None: `csv_fields`."""
    describe_sample: Callable[[Mapping[str, Any]], dict[str, Any]] = describe_sample
    """A flipped question as the report shows it: `target`, `answer`, `finish`, `text`."""

    def csv(self, specs: tuple[MetricSpec, ...]) -> tuple[str, ...]:
        """The CSV's flat metrics of this eval when a report has `specs` of it."""
        return self.csv_columns(specs) if self.csv_columns is not None else self.csv_fields


class Eval:
    """Base of every eval; subclasses set the class attributes and implement `run` and `flat`, and
    whichever capabilities of evals/capabilities.py they have."""

    name: ClassVar[str]
    settings_model: ClassVar[type[EvalSettings]]
    """The model of its config section; every `settings` argument is an instance of it."""
    metrics: ClassVar[tuple[MetricSpec, ...]]
    display: ClassVar[EvalDisplay] = EvalDisplay()
    default_enabled: ClassVar[bool] = True
    """Runs when a config does not mention it (the built-ins); otherwise only when configured."""
    size: ClassVar[int | None] = None
    """Questions of a full run (GSM8K: 1319), where fixed: what `--limit` is a part of."""
    wave_first: ClassVar[bool] = False
    """Started first when a cell runs its evals in one wave (run/wave.py): the long generations,
    which finish last."""

    def metrics_for(self, settings: Any | None) -> tuple[MetricSpec, ...]:
        """The metrics a config's section of this eval reports (`settings`; None where the config
        leaves the eval out): a pure function of the section, so validating a config changes
        nothing. Default: the fixed `metrics`; an eval whose metrics depend on its config (lm_eval:
        one per configured task) derives them here."""
        return self.metrics

    def metrics_in(self, raw: Mapping[str, Any]) -> tuple[MetricSpec, ...]:
        """The metrics one stored cell's raw results (as `flat` gets them) report, so a stored run's
        report, compare and thresholds know them whatever config this process read. Default: `metrics`."""
        return self.metrics

    def known_spec(self, name: str) -> MetricSpec | None:
        """The spec called `name` among all this eval may report, with what JSON cannot hold (its
        `text`, `noise_floor`): a stored run's recorded specs get them back here
        (evals/recorded.py). Default: among the fixed `metrics`."""
        return next((spec for spec in self.metrics if spec.name == name), None)

    @property
    def samples_file(self) -> str:
        return f"{self.name}.samples.jsonl"

    def run(self, ctx: EvalContext, settings: Any) -> EvalResult:
        raise NotImplementedError(f"{self.name} is not run against a server")

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Headline metrics under dotted names, from `EvalResult.metrics` as stored."""
        raise NotImplementedError
