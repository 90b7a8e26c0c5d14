"""GSM8K scored by lm-eval itself, so evalkit's marks are the ones the field trusts.

lm-eval is called in-process (lm_eval_adapter.py) over a task YAML that includes lm-eval's own
`gsm8k.yaml` and only swaps the hub dataset for the copy shipped in evalkit, so the prompt, the
few-shot examples, the stop strings and both filters (`strict-match`, `flexible-extract`) are
lm-eval's. The same YAML is written into the run folder, so the `lm_eval` CLI can be pointed at
it to reproduce a cell's score (tests/test_gsm8k_fidelity.py runs that CLI; docs/gsm8k.md).

Per question, both filters' marks are kept (`gsm8k.samples.jsonl`), so any two cells are
compared on the same questions (McNemar). With `repeats`, the same cell runs GSM8K again: the
questions that flip between runs of one engine are its noise floor.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field

from evalkit.errors import EvalError
from evalkit.evals import registry
from evalkit.evals.base import (
    SETUP_KEY,
    Comparison,
    Eval,
    EvalContext,
    EvalDisplay,
    EvalResult,
    EvalSettings,
    Evidence,
    MetricDisplay,
    MetricSpec,
    Server,
    floor_of_repeats,
    setup_fingerprint,
)
from evalkit.evals.gsm8k_repeats import SHORT, WORST, repeat, repeat_figures
from evalkit.evals.lm_eval_adapter import TASK_DIR, evaluate, lm_eval_version
from evalkit.evals.lm_eval_backends import ResponseMeta, prompt_key
from evalkit.evals.subsets import SubsetRule, pick
from evalkit.store.files import file_hash, write_jsonl


class GSM8KSettings(EvalSettings):
    """GSM8K through lm-eval; lm-eval's own defaults where the config is silent."""

    endpoint: Literal["completions", "chat"] = "completions"
    num_fewshot: int = Field(5, ge=0, description="lm-eval's default; ATOM's CI uses 3, vLLM's 5.")
    max_gen_toks: int = Field(256, ge=1, description="lm-eval's default; too short for reasoning models.")
    until: list[str] | None = Field(None, description="Stop strings; default: the task's own.")
    num_concurrent: int = Field(16, ge=1)
    max_retries: int = Field(3, ge=0)
    timeout: float | None = Field(None, gt=0, description="Per-request seconds; default scales with max_gen_toks.")
    limit: int | None = Field(None, ge=1, description="At most N test questions, chosen by `subset`.")
    subset: SubsetRule = Field("stratified", description=(
        "Which N questions a limit asks (evals/subsets.py): stratified (by solution steps), random, or first "
        "(lm-eval's own prefix); the same in every cell and run, recorded in the setup."))
    subset_seed: int = Field(0, description="Seed of a stratified or random subset.")
    seed: int = 1234
    max_unscorable: float = Field(0.02, ge=0, le=1, description=(
        "Share of questions that may go unscored (the engine erred or timed out after every retry, or a cut "
        "answer where `cut_is_unscorable`); above it the cell is an error, not an accuracy drop."))
    cut_is_unscorable: bool = Field(False, description=(
        "Count an answer cut by max_gen_toks as unscorable rather than scored as it stands. Off by default: "
        "a collapsing engine runs to the limit, and that cut is the bug's own signature."))
    repeats: int = Field(1, ge=1, description=(
        "Runs of GSM8K per cell on its engine: every run, the worst (`gsm8k.flexible_worst`, gated by a `min`) "
        "and the spread are reported; questions flipping between runs are its noise floor."))
    data_dir: str | None = Field(
        None, description="A folder with train.jsonl and test.jsonl in GSM8K's format (relative to the working "
                          "directory) scored by the same lm-eval task and filters; default: the GSM8K copy evalkit ships.")


TASK_NAME = "evalkit_gsm8k"
FILTERS = ("strict-match", "flexible-extract")
GSM8K_TEST_SIZE = 1319
DATA_FILES = ("train.jsonl", "test.jsonl")


def data_dir(settings: GSM8KSettings | None = None) -> Path:
    """The config's `data_dir` (a task in GSM8K's format, e.g. the answers model's own arithmetic
    problems: docs/real-answers.md), else the GSM8K copy shipped in the package (MIT licence beside it)."""
    if settings is not None and settings.data_dir is not None:
        return Path(settings.data_dir).expanduser()
    return Path(str(resources.files("evalkit") / "data" / "gsm8k"))


def check_data(directory: Path | None = None) -> dict[str, Path]:
    """Every data file exists and parses as GSM8K records; else an EvalError naming the file."""
    directory = directory or data_dir()
    files = {}
    for name in DATA_FILES:
        path = directory / name
        if not path.is_file():
            raise EvalError(f"{path}: GSM8K data file is missing")
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                    ok = isinstance(row.get("question"), str) and "####" in row.get("answer", "")
                except (json.JSONDecodeError, AttributeError):
                    ok = False
                if not ok:
                    raise EvalError(f"{path}:{lineno}: not a GSM8K record (question, answer ending '#### N')")
        files[name.removesuffix(".jsonl")] = path
    return files


def write_task_yaml(directory: Path, settings: GSM8KSettings) -> Path:
    """lm-eval's gsm8k task over the shipped data, with the config's generation settings."""
    spec = importlib.util.find_spec("lm_eval")  # located, not imported: the import takes ~1 s
    if spec is None or not spec.submodule_search_locations:
        raise EvalError("gsm8k: lm-eval is not installed (pip install -e . installs it)")
    upstream = Path(next(iter(spec.submodule_search_locations))) / "tasks" / "gsm8k" / "gsm8k.yaml"
    with upstream.open(encoding="utf-8") as f:
        upstream_until = yaml.load(f, Loader=_IgnoreTagsLoader)["generation_kwargs"]["until"]
    files = check_data(data_dir(settings))
    task: dict[str, Any] = {
        "include": str(upstream),
        "task": TASK_NAME,
        "tag": [],
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {"train": str(files["train"]), "test": str(files["test"])}},
        "num_fewshot": settings.num_fewshot,
        "generation_kwargs": {
            "until": settings.until if settings.until is not None else upstream_until,
            "do_sample": False,
            "temperature": 0.0,
            "max_gen_toks": settings.max_gen_toks,
        },
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{TASK_NAME}.yaml"
    path.write_text(yaml.safe_dump(task, sort_keys=False), encoding="utf-8")
    return path


class _IgnoreTagsLoader(yaml.SafeLoader):
    """lm-eval YAMLs may hold `!function` tags; reading plain fields must not execute them."""


_IgnoreTagsLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def check_endpoint(settings: GSM8KSettings, server: Server) -> None:
    """Refuse, before any question, a server that does not serve the configured endpoint.

    Pointing lm-eval's completions backend at a chat route (or the reverse) fails every request
    with 404/422 (lm-eval #3125); one probe turns that into a single clear error.
    """
    import httpx

    body: dict[str, Any]
    if settings.endpoint == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}
    else:
        path, body = "/v1/completions", {"prompt": "hi"}
    try:
        r = httpx.post(server.base_url.rstrip("/") + path,
                       json={"model": server.served_name, "max_tokens": 1, "temperature": 0, **body},
                       timeout=60)
    except httpx.HTTPError as e:
        raise EvalError(f"gsm8k: {path} unreachable: {e}") from e
    if r.status_code in (400, 404, 405, 422):
        raise EvalError(f"gsm8k: evals.gsm8k.endpoint is {settings.endpoint!r} but the server answers {path} "
                        f"with HTTP {r.status_code}: {r.text[:200]}")


def doc_ids(ids: Sequence[str]) -> list[int]:
    """Sample ids (``test-12``) -> lm-eval document indices; an id of another form is an EvalError."""
    out = []
    for qid in ids:
        head, _, tail = qid.partition("-")
        if head != "test" or not tail.isdigit():
            raise EvalError(f"gsm8k: {qid!r} is not a GSM8K test question id (test-N)")
        out.append(int(tail))
    return out


@functools.lru_cache(maxsize=4)
def solution_steps(directory: Path) -> tuple[int, ...]:
    """Per test question of the data in `directory`, the lines of its reference solution before
    ``####``: the stratum of a stratified subset (more steps, harder question; the first 200
    questions have fewer)."""
    with check_data(directory)["test"].open(encoding="utf-8") as f:
        return tuple(json.loads(line)["answer"].split("####")[0].strip().count("\n") + 1 for line in f)


def questions(settings: GSM8KSettings, limit: int | None) -> list[int] | None:
    """The test questions a run capped at `limit` asks, by `settings.subset` (evals/subsets.py);
    None where lm-eval's own `limit` does it: no limit, one covering the split, or the `first` N."""
    steps = solution_steps(data_dir(settings))
    if limit is None or limit >= len(steps) or settings.subset == "first":
        return None
    return pick(steps, limit, settings.subset, settings.subset_seed)


def run_gsm8k(settings: GSM8KSettings, ctx: EvalContext) -> EvalResult:
    """Score GSM8K on `ctx.server` (up to `ctx.limit`, else `settings.limit`, questions, picked by
    `settings.subset`) over the run's task YAML; per-question records keep both filters' marks and the finish reason,
    canonical through the engine's map (`server.wire`) and raw: ATOM answers a cut with
    `max_tokens` (atom/model_engine/scheduler.py at 0e9804c21), which `cut_by_max_gen_toks` counts.

    `ctx.only`: just these questions (ids ``test-N``), through lm-eval's `samples=` and with the
    prompts a full run asks them with, so their marks pair with a full run's.
    """
    check_endpoint(settings, ctx.server)
    limit = ctx.limit or settings.limit
    docs = doc_ids(ctx.only) if ctx.only is not None else questions(settings, limit)
    out, meta = evaluate(ctx, TASK_NAME, settings, label="gsm8k", log="gsm8k.log",
                         limit=None if docs is not None else limit, samples=docs, max_unscorable=settings.max_unscorable)
    result = _collect(out, meta, settings.cut_is_unscorable)
    _refuse_unscorable(result, settings, ctx.cell_dir)
    result.metrics["endpoint"] = settings.endpoint
    result.metrics["chat_template"] = (
        "the server's own (lm-eval apply_chat_template, few-shot as multi-turn)" if settings.endpoint == "chat" else None
    )
    if meta.requests_s is not None:
        result.metrics["requests_s"] = meta.requests_s
    result.metrics[SETUP_KEY] = setup_fingerprint(setup_fields(settings, ctx.run_dir / TASK_DIR, result.metrics))
    return result


def setup_fields(settings: GSM8KSettings, task_dir: Path, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Everything a GSM8K score depends on besides the engine: compared before any delta.

    In it: the rule and seed that pick a limited run's questions (`subset`), never N itself
    (cells pair on the questions both answered, so a run of 50 pairs with a full one when the
    rule is the same). Not in it: the client's concurrency,
    retries and timeouts (they change how fast, not what is answered), and file paths (the
    same data on another machine is the same setup: the data is hashed instead).
    """
    task_file = task_dir / f"{TASK_NAME}.yaml"
    task = yaml.safe_load(task_file.read_text(encoding="utf-8"))
    return {
        "task": TASK_NAME,
        "task_version": metrics.get("task_version"),
        "task_yaml": file_hash(Path(task["include"])),  # lm-eval's gsm8k.yaml: prompt, filters
        "endpoint": settings.endpoint,
        "chat_template": metrics.get("chat_template"),
        "num_fewshot": metrics.get("num_fewshot"),
        "generation_kwargs": task["generation_kwargs"],
        "seed": settings.seed,
        "subset": {"rule": settings.subset, "seed": settings.subset_seed},
        "data": file_hash(*(data_dir(settings) / name for name in DATA_FILES)),
        "lm_eval_version": metrics.get("lm_eval_version"),
        "tokenizer": "the server's (text requests, tokenized_requests false)",
    }


def _refuse_unscorable(result: EvalResult, settings: GSM8KSettings, cell_dir: Path) -> None:
    """More unscorable questions than `max_unscorable` allows make the cell an error (its samples
    kept beside it): what is left to score is no longer the set the other cells answered."""
    n, lost = result.metrics["n"], result.metrics["unscorable"]
    if lost and lost > settings.max_unscorable * n:
        write_jsonl(cell_dir / "gsm8k.unscorable.samples.jsonl", result.samples)
        why = ", ".join(f"{k} {reason}" for reason, k in result.metrics["unscorable_by"].items())
        raise EvalError(f"gsm8k: {lost} of {n} questions unscorable ({why}), over evals.gsm8k.max_unscorable "
                        f"{settings.max_unscorable:g}: a cell error, not an accuracy drop")


def unscorable_reason(row: Mapping[str, Any], cut_is_unscorable: bool) -> str | None:
    """Why a question's answer cannot be scored (its request failed for good, or it was cut where
    cuts are unscorable), None when it can."""
    if row.get("error"):
        return "timeout" if row["error"] == "timeout" else "engine error"
    if cut_is_unscorable and row.get("finish_reason") == "length":
        return "cut by max_gen_toks"
    return None


def _collect(out: dict[str, Any], meta: ResponseMeta, cut_is_unscorable: bool = False) -> EvalResult:
    scores = out["results"][TASK_NAME]
    by_doc: dict[int, dict[str, Any]] = {}
    for s in out["samples"][TASK_NAME]:
        prompt = s["arguments"][0][0] if isinstance(s["arguments"][0], (list, tuple)) else s["arguments"][0]
        text = getattr(prompt, "prompt", prompt)  # a chat prompt is lm-eval's JsonChatStr: hash its JSON
        row = by_doc.setdefault(
            s["doc_id"],
            {
                "doc_id": s["doc_id"],
                "id": f"test-{s['doc_id']}",
                "prompt_hash": hashlib.sha256(str(text).encode()).hexdigest()[:16],
                "target": s["target"],
                "response": s["resps"][0][0],
                **{k: v for k, v in meta.by_prompt.get(prompt_key(prompt), {}).items()},
            },
        )
        name = s["filter"]
        row[f"{name}.extracted"] = s["filtered_resps"][0]
        row[f"{name}.correct"] = bool(s["exact_match"])
    samples = [by_doc[k] for k in sorted(by_doc)]
    for row in samples:
        if (reason := unscorable_reason(row, cut_is_unscorable)) is not None:
            row["unscorable"] = reason
            row.update({f"{name}.correct": None for name in FILTERS})  # neither right nor wrong: unpaired
    metrics: dict[str, Any] = {
        "strict": float(scores["exact_match,strict-match"]),
        "strict_stderr": scores["exact_match_stderr,strict-match"],
        "flexible": float(scores["exact_match,flexible-extract"]),
        "flexible_stderr": scores["exact_match_stderr,flexible-extract"],
        **_counts(samples),
        "lm_eval_version": lm_eval_version(),
        "task_version": out.get("versions", {}).get(TASK_NAME),
        "num_fewshot": out.get("n-shot", {}).get(TASK_NAME),
    }
    for key in ("strict_stderr", "flexible_stderr"):
        value = metrics[key]
        metrics[key] = None if isinstance(value, str) or value != value else float(value)  # "N/A"/nan at n < 2
    if metrics["unscorable"]:
        metrics |= _rates(samples)  # lm-eval counted the empty answers wrong; they are no answers
    return EvalResult(metrics, samples, texts=[(str(r["response"]), r.get("finish_reason")) for r in samples])


def _rates(samples: list[dict[str, Any]]) -> dict[str, float | None]:
    """Both filters' accuracy and its stderr over the scorable questions, by lm-eval's own
    aggregation of exact_match (`mean`, `mean_stderr`)."""
    from lm_eval.api.metrics import mean, mean_stderr

    out: dict[str, float | None] = {}
    for short, name in SHORT.items():
        marks = [float(row[f"{name}.correct"]) for row in samples if row[f"{name}.correct"] is not None]
        out[short] = mean(marks) if marks else 0.0
        out[f"{short}_stderr"] = float(mean_stderr(marks)) if len(marks) > 1 else None
    return out


def _counts(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """What a cell's GSM8K metrics count over its questions' records: `n` asked, `n_eff` scored."""
    reasons = [row["unscorable"] for row in samples if row.get("unscorable")]
    return {"n": len(samples), "n_eff": len(samples) - len(reasons), "unscorable": len(reasons),
            "unscorable_by": {reason: reasons.count(reason) for reason in sorted(set(reasons))},
            "cut_by_max_gen_toks": sum(1 for r in samples if r.get("finish_reason") == "length"),
            "empty_responses": sum(1 for r in samples if not str(r["response"]).strip()),
            "retries": sum(max(0, r.get("attempts", 1) - 1) for r in samples)}


def combine(parts: list[EvalResult]) -> EvalResult:
    """GSM8K runs on disjoint question subsets as one run over all of them: lm-eval's own
    aggregation of exact_match (the mean, with its stderr `mean_stderr`) over every question's
    mark, the counts over every record, the setup and versions of the first part."""
    samples = sorted((row for part in parts for row in part.samples), key=lambda row: row["doc_id"])
    metrics = {**parts[0].metrics, **_counts(samples), **_rates(samples)}
    metrics.pop("requests_s", None)  # a phase of one part, not of the whole
    metrics["parts"] = [part.metrics["n"] for part in parts]
    return EvalResult(metrics, samples, texts=[text for part in parts for text in part.texts])


def _with_ci(flat: Mapping[str, Any]) -> str:
    value, ci = flat.get("gsm8k.flexible"), flat.get("gsm8k.flexible_ci95")
    if value is None:
        return "-"
    lost = f" n_eff {flat.get('gsm8k.n_eff')}" if flat.get("gsm8k.unscorable") else ""  # of fewer than asked
    return (f"{value:.3f} ({ci[0]:.3f}–{ci[1]:.3f})" if ci else f"{value:.3f}") + lost


def describe_sample(sample: Mapping[str, Any]) -> dict[str, Any]:
    """A flipped question: the number after the target's ``####``, the flexible filter's answer."""
    target = str(sample.get("target") or "")
    return {"target": target.rsplit("####", 1)[-1].strip() if "####" in target else target,
            "answer": sample.get("flexible-extract.extracted", "?"), "finish": sample.get("finish_reason"),
            "text": sample.get("response", "")}


class GSM8K(Eval):
    """GSM8K test (1,319 questions), both lm-eval filters, paired per question; runs subsets
    (`Subsets`), checks its data and writes the run's task YAML (`Checks`, `Prepares`)."""

    name = "gsm8k"
    size = GSM8K_TEST_SIZE
    settings_model = GSM8KSettings
    metrics = (
        MetricSpec("gsm8k.strict", Comparison.PAIRED, MetricDisplay("GSM8K strict", key="strict", column="GSM8K strict"),
                   mark_field="strict-match.correct", noise_floor=floor_of_repeats("strict", "max_pairwise_diff")),
        MetricSpec("gsm8k.flexible", Comparison.PAIRED,
                   MetricDisplay("GSM8K flexible", key="flexible", column="GSM8K flexible (95% CI)", text=_with_ci,
                                 delta_label="flexible", pivot="GSM8K flexible (95% CI) by configuration",
                                 details=Evidence.FLIPS),
                   mark_field="flexible-extract.correct", noise_floor=floor_of_repeats("flexible", "max_pairwise_diff")),
    )
    display = EvalDisplay(
        title="GSM8K", describe_sample=describe_sample,
        csv_fields=("gsm8k.strict", "gsm8k.flexible", "gsm8k.n", "gsm8k.strict_stderr", "gsm8k.flexible_stderr",
                    "gsm8k.strict_ci95", "gsm8k.flexible_ci95", "gsm8k.cut_by_max_gen_toks", "gsm8k.retries", "gsm8k.n_eff", "gsm8k.unscorable"))

    def metrics_for(self, settings: GSM8KSettings | None) -> tuple[MetricSpec, ...]:
        return (*self.metrics, WORST) if settings is not None and settings.repeats > 1 else self.metrics

    def metrics_in(self, raw: Mapping[str, Any]) -> tuple[MetricSpec, ...]:
        return (*self.metrics, WORST) if repeat_figures(raw) else self.metrics

    def known_spec(self, name: str) -> MetricSpec | None:
        return WORST if name == WORST.name else super().known_spec(name)

    def check(self, settings: GSM8KSettings) -> None:
        check_data(data_dir(settings))

    def prepare(self, run_dir: Path, settings: GSM8KSettings) -> None:
        write_task_yaml(run_dir / TASK_DIR, settings)

    def run(self, ctx: EvalContext, settings: GSM8KSettings) -> EvalResult:
        result = run_gsm8k(settings, ctx)
        if settings.repeats > 1 and ctx.only is None:  # a subset is a step's batch: no noise floor of its own
            result.metrics["repeats"] = repeat(lambda again: run_gsm8k(settings, again), settings.repeats, ctx, result)
        return result

    def combine(self, parts: list[EvalResult]) -> EvalResult:
        return combine(parts)

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from evalkit.stats.tests import proportion

        n_eff = raw.get("n_eff", raw["n"])  # runs stored before unscorable questions were counted apart
        out = {"gsm8k.strict": raw["strict"], "gsm8k.flexible": raw["flexible"], "gsm8k.n": raw["n"],
               "gsm8k.n_eff": n_eff, "gsm8k.unscorable": raw.get("unscorable", 0),
               "gsm8k.strict_stderr": raw.get("strict_stderr"), "gsm8k.flexible_stderr": raw.get("flexible_stderr"),
               "gsm8k.cut_by_max_gen_toks": raw.get("cut_by_max_gen_toks"), "gsm8k.retries": raw.get("retries")}
        for short in SHORT:
            p = proportion(round(raw[short] * n_eff), n_eff)
            out[f"gsm8k.{short}_ci95"] = [p.low, p.high]
        return out | repeat_figures(raw)


EVAL = registry.register(GSM8K())
