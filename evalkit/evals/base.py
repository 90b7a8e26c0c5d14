"""The eval protocol: what an eval declares, so the cell lifecycle, store, verdicts, report and history
work for any eval without an edit.

An eval is one module holding one `Eval` object, registered in `evalkit.evals.registry`. It
declares:

* `name`: its key under `evals:` in a config, the prefix of its metric names (``gsm8k.flexible``),
  the name of its samples file (``gsm8k.samples.jsonl``) and of its timing (``gsm8k_s``);
* `settings`: a pydantic model of its config section (`EvalSettings` subclass: `enabled` and the
  rest), so a misspelt key is an error naming the file and field;
* `metrics`: `MetricSpec`s, each with its comparison kind (paired 0/1 per question, a count of
  events, a continuous value) and what the report shows of it; an eval whose metrics depend on
  its config (one per lm-eval task) derives them in `metrics_for(settings)` and
  `metrics_in(raw)`, pure functions, so which metrics exist never depends on what a process
  validated before;
* `run(ctx, settings) -> EvalResult`: score one running server;
* `flat(raw) -> {name: value}`: the headline metrics of one cell under their dotted names (the
  summary.json contract);
* `pairwise(metric, this_dir, ref_dir)` (optional): a PAIRWISE metric, a value measured between
  two cells' samples (a divergence of their token distributions), which no cell has alone;
* `runs` (default True): False for a pseudo-eval whose figures the cell lifecycle records instead
  of a `run` (the engine's own report, evals/engine_figures.py); it then reads them with `raw`,
  says with `absent` why a cell has none of a metric (a threshold on it is "not checked" rather
  than passed), and may raise `cell_flags` that no threshold expresses;
* `subsets` (optional): it runs just the samples named in `EvalContext.only` and `combine`s the
  results of several such runs into one. A bisect step runs an eval in batches this way and stops
  as soon as its verdict is decided; an eval without it is skipped by a step, with a note.

The simple-evals shape (an eval fits on a screen) with inspect_ai's separation of the dataset,
the solver and the scorer left to each eval: GSM8K delegates all three to lm-eval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from evalkit.wire import Wire


class Comparison(str, Enum):
    """How a metric of two cells is compared (verdicts.py holds the tests)."""

    PAIRED = "paired"
    """Per-question 0/1 marks, paired on the questions both cells answered: McNemar's exact test."""
    COUNT = "count"
    """k events out of n samples (e.g. collapsed generations): Fisher's exact test."""
    CONTINUOUS = "continuous"
    """A number per cell: the difference, without a test."""
    PAIRWISE = "pairwise"
    """A value measured between two cells' samples by the eval itself (`Eval.pairwise`), e.g. a
    divergence of their token distributions: no cell has it alone, so it has no value column and
    `min`/`max` do not apply. Its `diff` is the change from the reference compared with itself (a
    divergence: the value, from 0; an agreement: the value - 1), so `max_rise_*` (or, for a
    higher-is-better one, `max_drop_*`) thresholds read it like any other change; a noise floor
    (`noise_floor`, from the cells' own repeats) is the |diff| re-running one cell produced."""
    NONE = "none"
    """Shown, never compared."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric an eval reports: its flat name, how it is compared, and how it is shown."""

    name: str
    """Flat dotted name, the key in summary.json and a threshold's `metric:` (``gsm8k.flexible``)."""
    label: str
    """Words for threshold messages (``GSM8K flexible``)."""
    comparison: Comparison
    higher_is_better: bool = True
    mark_field: str | None = None
    """PAIRED: the boolean field of each row of the eval's samples file holding the mark."""
    count_metric: str | None = None
    n_metric: str | None = None
    """COUNT: the flat metrics holding k and n."""
    key: str = ""
    """Short key of its report columns (``flexible``, ``flexible_vs_baseline``); default: `name`."""
    column: str | None = None
    """Header of its value column in the matrix table; None: no column."""
    text: Callable[[Mapping[str, Any]], str] | None = None
    """The value as the report shows it, from a cell's flat metrics; default: three decimals."""
    delta_label: str | None = None
    """When set, the table has `Δ <delta_label> vs baseline` and `vs twin` columns (PAIRWISE, a
    value between the two cells rather than a difference: `<delta_label> vs baseline`)."""
    pivot: str | None = None
    """When set, a pivot of this metric by configuration with this title."""
    details: str | None = None
    """What the report's details section shows: "flips" (PAIRED: the questions that flipped),
    "events" (COUNT: the samples where the event happened, e.g. the detector's evidence) or
    "worst" (PAIRWISE: the `worst` places the eval's `pairwise` found, with the text around them)."""
    event_field: str | None = None
    """COUNT with details "events": the boolean field of a samples row marking the event."""
    event_words: str | None = None
    """COUNT: what `k of n` counts, in the report's words ("long generations collapsed")."""
    noise_floor: Callable[[Mapping[str, Any]], float | None] | None = None
    """From the eval's raw cell metrics: the largest change re-running the same cell produced
    (PAIRED, PAIRWISE): a change within it breaks no threshold."""

    @property
    def short(self) -> str:
        return self.key or self.name

    def show(self, flat: Mapping[str, Any]) -> str:
        if self.text is not None:
            return self.text(flat)
        value = flat.get(self.name)
        return "-" if value is None else f"{value:.3f}"


class EvalSettings(BaseModel):
    """Base of every eval's config section: unknown keys are errors, values immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True


@dataclass(frozen=True)
class EvalContext:
    """What one eval gets to run against one cell's server."""

    base_url: str
    """Server root, e.g. ``http://127.0.0.1:8000`` (no ``/v1``)."""
    served_name: str
    """The model name the server serves (the `model` of every request)."""
    cell_dir: Path
    """The cell's folder: samples, logs and extra files of the eval go here."""
    run_dir: Path
    """The run's folder: files shared by every cell (written by `Eval.prepare`)."""
    limit: int | None = None
    """`--limit`: at most this many questions or prompts."""
    wire: Wire = field(default_factory=Wire)
    """The engine's dialect, per its profile: how it names finish reasons (evals judge the
    canonical one, `wire.finish(raw)`) and how, if at all, it returns exact token ids."""
    status: Callable[[str, str], None] = lambda state, detail: None
    """Report progress to the live view: (state, detail), e.g. ("gsm8k", "120/1319")."""
    earlier: Mapping[str, EvalResult] = field(default_factory=dict)
    """Results of the evals that ran before this one on the same server, by eval name."""
    only: tuple[str, ...] | None = None
    """Run just these samples: their `id`s as the eval's samples file holds them (GSM8K
    ``test-12``, a prompt id of the repetition set); None: all of them (up to `limit`). Only
    an eval with `subsets` is given it; an id it does not know is an EvalError."""


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


def setup_differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """Names of the setup fields that differ between two fingerprints ([] when equal or when
    either is unknown: runs stored before fingerprints existed are compared as before)."""
    if not a or not b or a.get("hash") == b.get("hash"):
        return []
    fa, fb = a.get("fields") or {}, b.get("fields") or {}
    return sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k)) or ["hash"]


class Eval:
    """Base of every eval; subclasses set the class attributes and implement `run` and `flat`."""

    name: ClassVar[str]
    title: ClassVar[str] = ""
    """How reports name the eval ("GSM8K"); default: `name`."""
    settings: ClassVar[type[EvalSettings]]
    metrics: ClassVar[tuple[MetricSpec, ...]]
    default_enabled: ClassVar[bool] = True
    """Runs when a config does not mention it (the built-ins); otherwise only when configured."""
    size: ClassVar[int | None] = None
    """Questions of a full run (GSM8K: 1319), where fixed: what `--limit` is a part of."""
    csv_fields: ClassVar[tuple[str, ...]] = ()
    """Flat metrics in the CSV report, besides the compared ones (a `_ci95` pair is split in two)."""
    runs: ClassVar[bool] = True
    """False: never run against a server (`registry.enabled` leaves it out); its figures come from
    what the cell lifecycle recorded, read by `raw`."""
    subsets: ClassVar[bool] = False
    """`run` honours `EvalContext.only` and `combine` merges such runs: a bisect step can run it
    in batches. False: a step skips it (and says so)."""

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

    def csv_columns(self, specs: tuple[MetricSpec, ...]) -> tuple[str, ...]:
        """The CSV's flat metrics of this eval when a report has `specs` of it (its share of the
        summary's recorded metrics); default: `csv_fields`."""
        return self.csv_fields

    @property
    def samples_file(self) -> str:
        return f"{self.name}.samples.jsonl"

    def check(self, settings: Any) -> None:
        """Before a run starts: raise ConfigError or EvalError for what would fail every cell."""

    def runs_baseline_last(self, settings: Any) -> bool:
        """Whether the plan runs the baseline cell after the others: the eval reads, in a cell,
        what the cells before it generated (divergence with `generations`). Default: False."""
        return False

    def prepare(self, run_dir: Path, settings: Any) -> None:
        """Once per run, after its folder exists and before any cell: shared files (task YAML)."""

    def run(self, ctx: EvalContext, settings: Any) -> EvalResult:
        raise NotImplementedError

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Headline metrics under dotted names, from `EvalResult.metrics` as stored."""
        raise NotImplementedError

    def raw(self, record: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """This eval's raw metrics in a cell record (what `flat` reads); None: the cell has none."""
        return (record.get("metrics") or {}).get(self.name)

    def absent(self, raw: Mapping[str, Any]) -> dict[str, str]:
        """Metric name -> why this cell has no value of it, for metrics a cell can lack although
        the eval ran (an engine without speculative decoding, a failed scrape)."""
        return {}

    def cell_flags(self, record: Mapping[str, Any], row: Mapping[str, Any],
                   baseline: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """Flags on a cell beyond its thresholds (shaped like a threshold's: `metric`, `check`,
        `action`, `message`), from its record and its summary row and the baseline's row."""
        return []

    def combine(self, parts: list[EvalResult]) -> EvalResult:
        """With `subsets`: the runs of disjoint subsets (in run order) as one result, its metrics
        what one run over all their samples would report (so `flat` and the report read it)."""
        raise NotImplementedError(f"{self.name} does not run subsets")

    def extra_delta(self, metric: MetricSpec, cell_dir: Path, ref_dir: Path) -> dict[str, Any]:
        """More facts for the comparison of `metric` between two cells (e.g. new collapses)."""
        return {}

    def pairwise(self, metric: MetricSpec, this_dir: Path, ref_dir: Path) -> dict[str, Any] | None:
        """A PAIRWISE metric between two cells' stored samples (this cell against `ref_dir`'s), or
        None when there is nothing to compare (a cell without the eval's samples).

        Returns at least ``{"diff": change, "value": value, "p_value": None}``: `value` measured
        between the two, `diff` its change from the reference against itself (a divergence: the
        value; an agreement share: value - 1); more facts may follow, among them ``worst``: a list
        of ``{"id", "at", "value", "before", "here", "after"}`` (a sample id, a position in it,
        the value there and the text around it) that the report's details show. A comparison the
        eval cannot make honestly (the two cells tokenized a text differently, say) is
        ``{"diff": None, "p_value": None, "refused": "one line naming the sample and why"}``: the
        report says "not compared" and a threshold on it is flagged, never passed silently."""
        return None

    def describe_sample(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """A flipped question as the report shows it: `target`, `answer`, `finish`, `text`."""
        return {"target": sample.get("target"), "answer": sample.get("answer"),
                "finish": sample.get("finish_reason"), "text": sample.get("response") or sample.get("text", "")}
