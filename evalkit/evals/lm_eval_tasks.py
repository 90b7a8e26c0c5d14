"""Any task lm-eval ships (`evals.lm_eval: {tasks: [...]}`), scored by lm-eval over the same
local-completions/chat path as GSM8K (lm_eval_adapter.py), offline.

Per task, a YAML in the run folder includes lm-eval's own task YAML (prompt, few-shot examples,
filters, metrics are lm-eval's) and swaps its hub dataset for local data: the GSM8K family
(every task reading `openai/gsm8k`: gsm8k_cot, gsm8k_cot_zeroshot, ...) reads the GSM8K copy
evalkit ships; any other task reads the `data_files` or `dataset_path` its config entry names.
A task without local data is refused before any engine starts (`check`). Sampling is greedy
(temperature 0), so a cell answers the same question the same way and cells pair per question.

Metrics depend on the config: one per task, metric and filter (``lm_eval.gsm8k_cot.exact_match.
flexible-extract``; the filter only when the task has several): `metrics_for` a config's section,
`metrics_in` a stored cell, both pure, so report, compare and thresholds of a stored run know
them whatever config the process read. A metric lm-eval scores 0/1 per question is PAIRED (McNemar on the
questions two cells share, flips in the report); any other is CONTINUOUS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
    fingerprint,
    setup_fingerprint,
)
from evalkit.evals.lm_eval_adapter import TASK_DIR
from evalkit.evals.lm_eval_catalogue import TaskInfo, resolve, unknown_task
from evalkit.evals.lm_eval_records import collect, data_hash, files_hash

GSM8K_DATASETS = ("openai/gsm8k", "gsm8k")
"""Hub datasets evalkit ships a copy of (evalkit/data/gsm8k, MIT)."""
BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
DEFAULT_MAX_GEN_TOKS = 256
"""lm-eval's own default when neither the task nor the config sets max_gen_toks."""


class TaskEntry(BaseModel):
    """One entry of `evals.lm_eval.tasks`: a task (or group) name and where its data is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="A task or group lm-eval ships, e.g. gsm8k_cot, mmlu_pro, aime24.")
    data_files: dict[str, str] | None = Field(
        None, description="Split -> local file (.jsonl/.json/.csv/.parquet), e.g. {test: /data/aime24.jsonl}.")
    dataset_path: str | None = Field(None, description="A local Hugging Face dataset folder (a clone of the hub repo).")
    num_fewshot: int | None = Field(None, ge=0, description="Default: evals.lm_eval.num_fewshot, else the task's.")
    max_gen_toks: int | None = Field(None, ge=1, description="Default: evals.lm_eval.max_gen_toks, else the task's.")
    limit: int | None = Field(None, ge=1, description="First N questions of this task only.")

    @field_validator("name")
    @classmethod
    def _shipped(cls, name: str) -> str:
        if why := unknown_task(name):
            raise ValueError(why)
        return name

    @model_validator(mode="after")
    def _one_source(self) -> TaskEntry:
        if self.data_files is not None and self.dataset_path is not None:
            raise ValueError("set data_files or dataset_path, not both")
        return self


class LmEvalSettings(EvalSettings):
    """`evals.lm_eval`: the tasks, and the client settings they share (GSM8K's names)."""

    tasks: list[TaskEntry] = Field(min_length=1)
    endpoint: Literal["completions", "chat"] = "completions"
    num_fewshot: int | None = Field(None, ge=0, description="Default: each task's own.")
    max_gen_toks: int | None = Field(None, ge=1, description="Default: each task's own (else 256).")
    num_concurrent: int = Field(16, ge=1)
    max_retries: int = Field(3, ge=0)
    timeout: float | None = Field(None, gt=0, description="Per-request seconds; default scales with max_gen_toks.")
    limit: int | None = Field(None, ge=1, description="First N questions of every task.")
    seed: int = 1234

    @field_validator("tasks", mode="before")
    @classmethod
    def _names(cls, tasks: Any) -> Any:
        """`tasks: [gsm8k_cot, {name: aime24, data_files: ...}]`: a bare name is an entry."""
        return [{"name": t} if isinstance(t, str) else t for t in tasks] if isinstance(tasks, list) else tasks


def planned(settings: LmEvalSettings) -> list[tuple[int, TaskEntry, TaskInfo]]:
    """(entry index, entry, task) per task the section runs, groups expanded, first entry wins."""
    out, seen = [], set()
    for i, entry in enumerate(settings.tasks):
        for info in resolve(entry.name):
            if info.name not in seen:
                seen.add(info.name)
                out.append((i, entry, info))
    return out


def _shots(settings: LmEvalSettings, entry: TaskEntry, info: TaskInfo) -> int:
    return next((n for n in (entry.num_fewshot, settings.num_fewshot) if n is not None), info.num_fewshot)


def _max_gen_toks(settings: LmEvalSettings, entry: TaskEntry, info: TaskInfo) -> int:
    return entry.max_gen_toks or settings.max_gen_toks or info.generation_kwargs.get("max_gen_toks") \
        or DEFAULT_MAX_GEN_TOKS


def data_source(i: int, entry: TaskEntry, info: TaskInfo, shots: int) -> dict[str, Any]:
    """The task YAML fields that point lm-eval at local data; EvalError (one line, naming the task
    and the config field) when there is none or it lacks a split the task reads."""
    from evalkit.evals.gsm8k import check_data

    where = f"evals.lm_eval.tasks[{i}]"
    if entry.data_files is not None:
        files = {split: Path(p).expanduser() for split, p in entry.data_files.items()}
        missing = [s for s in info.splits(shots) if s not in files]
        if missing:
            raise EvalError(f"lm_eval: task {info.name!r} reads split(s) {', '.join(missing)}: "
                            f"{where}.data_files has {', '.join(files) or 'none'}")
        for split, path in files.items():
            if not path.is_file():
                raise EvalError(f"lm_eval: task {info.name!r}: {where}.data_files.{split}: {path} does not exist")
        builders = {BUILDERS.get(p.suffix) for p in files.values()}
        if len(builders) != 1 or None in builders:
            raise EvalError(f"lm_eval: task {info.name!r}: {where}.data_files must all be one of "
                            f"{', '.join(BUILDERS)} files")
        return {"dataset_path": builders.pop(), "dataset_name": None,
                "dataset_kwargs": {"data_files": {s: str(p) for s, p in files.items()}}}
    if entry.dataset_path is not None:
        path = Path(entry.dataset_path).expanduser()
        if not path.is_dir():
            raise EvalError(f"lm_eval: task {info.name!r}: {where}.dataset_path: {path} is not a folder")
        return {"dataset_path": str(path)}
    if info.dataset_path in GSM8K_DATASETS:
        files = check_data()
        return {"dataset_path": "json", "dataset_name": None,
                "dataset_kwargs": {"data_files": {"train": str(files["train"]), "test": str(files["test"])}}}
    if info.dataset_path and Path(info.dataset_path).is_dir():
        return {}
    raise EvalError(f"lm_eval: task {info.name!r} reads {info.dataset_path or 'its data'} from the Hugging Face hub "
                    f"and evalkit runs offline: set {where}.data_files or {where}.dataset_path to a local copy")


def wrapper_name(task: str) -> str:
    return f"evalkit_{task}"


def task_yaml(settings: LmEvalSettings, i: int, entry: TaskEntry, info: TaskInfo) -> dict[str, Any]:
    """lm-eval's task over local data, greedy, with the config's shots and token budget."""
    if info.output_type != "generate_until" or "class" in info.config:
        raise EvalError(f"lm_eval: task {info.name!r} is {info.config.get('class') or info.output_type}: evalkit runs "
                        "generate_until tasks (scored from text; loglikelihood needs the server's tokenizer)")
    if int(info.config.get("repeats") or 1) > 1:
        raise EvalError(f"lm_eval: task {info.name!r} samples {info.config['repeats']} answers per question (repeats): "
                        "evalkit scores one greedy answer per question")
    shots = _shots(settings, entry, info)
    gen = info.generation_kwargs | {"do_sample": False, "temperature": 0.0,
                                    "max_gen_toks": _max_gen_toks(settings, entry, info)}
    return {"include": str(info.yaml), "task": wrapper_name(info.name), "tag": [], **data_source(i, entry, info, shots),
            "num_fewshot": shots, "generation_kwargs": gen}


def setup_fields(info: TaskInfo, task: Mapping[str, Any], raw: Mapping[str, Any], settings: LmEvalSettings) -> dict[str, Any]:
    """What one task's score depends on besides the engine (as GSM8K's, file paths hashed away)."""
    kwargs = task.get("dataset_kwargs") or {}
    data = kwargs.get("data_files") or {}
    return {
        "task": info.name, "task_version": raw.get("version"), "task_yaml": files_hash(info.files),
        "num_fewshot": raw.get("num_fewshot"), "generation_kwargs": task["generation_kwargs"],
        "data": data_hash([Path(p) for p in data.values()] if data else [Path(task.get("dataset_path") or info.dataset_path or "")]),
        "endpoint": settings.endpoint, "seed": settings.seed, "lm_eval_version": raw.get("lm_eval_version"),
        "chat_template": ("the server's own (lm-eval apply_chat_template, few-shot as multi-turn)"
                          if settings.endpoint == "chat" else None),
        "tokenizer": "the server's (text requests, tokenized_requests false)",
    }


def specs(task: str, scores: list[tuple[str, bool, bool]]) -> list[MetricSpec]:
    """The MetricSpecs of one task: (key, paired, higher is better) per score; the first score
    is the task's headline (a column, deltas, a pivot, flips)."""
    out = []
    for n, (key, paired, higher) in enumerate(scores):
        label = f"{task} {key}"
        head = n == 0
        out.append(MetricSpec(
            f"lm_eval.{task}.{key}", Comparison.PAIRED if paired else Comparison.CONTINUOUS,
            MetricDisplay(label, key=f"{task}.{key}", column=label if head else None,
                          delta_label=label if head else None, pivot=f"{label} by configuration" if head else None,
                          details=Evidence.FLIPS if head and paired else None),
            higher_is_better=higher, mark_field=f"{task}.{key}" if paired else None,
        ))
    return out


def _specs_of(info: TaskInfo) -> list[MetricSpec]:
    kinds = {m: (binary, higher) for m, binary, higher in info.metrics()}
    return specs(info.name, [(key, *kinds[metric]) for key, metric, _ in info.keys()])


def csv_columns(specs: tuple[MetricSpec, ...]) -> tuple[str, ...]:
    """Each score with its stderr, then each task's question count (a spec's label starts with
    its task: lm-eval task names have no spaces)."""
    tasks = dict.fromkeys(spec.display.label.split(" ", 1)[0] for spec in specs)
    return (*[n for spec in specs for n in (spec.name, f"{spec.name}_stderr")],
            *(f"lm_eval.{task}.n" for task in tasks))


def describe_sample(sample: Mapping[str, Any]) -> dict[str, Any]:
    """A flipped question: the first filter's extracted answer."""
    extracted = next((v for k, v in sample.items() if k.endswith(".extracted")), "?")
    return {"target": sample.get("target"), "answer": extracted, "finish": sample.get("finish_reason"),
            "text": sample.get("response", "")}


class LmEvalTasks(Eval):
    """Any lm-eval task; its metrics are the configured tasks' (`metrics_for`)."""

    name = "lm_eval"
    settings_model = LmEvalSettings
    default_enabled = False
    display = EvalDisplay(title="lm-eval tasks", csv_columns=csv_columns, describe_sample=describe_sample)

    metrics = ()
    """None without a config naming tasks: `metrics_for` and `metrics_in` derive them."""

    def metrics_for(self, settings: LmEvalSettings | None) -> tuple[MetricSpec, ...]:
        """The configured tasks' scores (groups expanded), each task's first score its headline."""
        tasks = [] if settings is None else [info for _, _, info in planned(settings)]
        return tuple(s for info in tasks for s in _specs_of(info))

    def metrics_in(self, raw: Mapping[str, Any]) -> tuple[MetricSpec, ...]:
        """The scores a stored cell holds (its marks decide which are paired)."""
        return tuple(s for task, r in (raw.get("tasks") or {}).items()
                     for s in specs(task, [(k, bool(r["paired"].get(k)), r["higher_is_better"].get(k, True))
                                           for k in r["scores"]]))

    def check(self, settings: LmEvalSettings) -> None:
        for i, entry, info in planned(settings):
            task_yaml(settings, i, entry, info)

    def prepare(self, run_dir: Path, settings: LmEvalSettings) -> None:
        directory = run_dir / TASK_DIR
        directory.mkdir(parents=True, exist_ok=True)
        for i, entry, info in planned(settings):
            text = yaml.safe_dump(task_yaml(settings, i, entry, info), sort_keys=False)
            (directory / f"{wrapper_name(info.name)}.yaml").write_text(text, encoding="utf-8")

    def run(self, ctx: EvalContext, settings: LmEvalSettings) -> EvalResult:
        from evalkit.evals.lm_eval_adapter import evaluate

        task_dir = ctx.run_dir / TASK_DIR
        raw: dict[str, Any] = {"endpoint": settings.endpoint, "tasks": {}}
        samples: list[dict[str, Any]] = []
        texts: list[tuple[str, str | None]] = []
        for _, entry, info in planned(settings):
            wrapper = wrapper_name(info.name)
            task = yaml.safe_load((task_dir / f"{wrapper}.yaml").read_text(encoding="utf-8"))
            client = settings.model_copy(update={"max_gen_toks": task["generation_kwargs"]["max_gen_toks"]})
            limits = [n for n in (ctx.limit, entry.limit, settings.limit) if n]
            label = f"lm_eval {info.name}"
            out, meta = evaluate(dataclasses.replace(ctx, progress=ctx.progress.labelled(label)), wrapper, client,
                                 label=label, log="lm_eval.log", limit=min(limits) if limits else None)
            result = collect(out, meta, info, wrapper)
            result.metrics[SETUP_KEY] = setup_fingerprint(setup_fields(info, task, result.metrics, settings))
            raw["tasks"][info.name] = result.metrics
            samples += result.samples
            texts += result.texts
        raw[SETUP_KEY] = fingerprint({f"{t}.{k}": v for t, r in raw["tasks"].items()
                                      for k, v in r[SETUP_KEY]["fields"].items()})
        return EvalResult(raw, samples, texts)

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for task, r in (raw.get("tasks") or {}).items():
            out |= {f"lm_eval.{task}.{k}": v for k, v in r["scores"].items()}
            out |= {f"lm_eval.{task}.{k}_stderr": v for k, v in r["stderr"].items()}
            out[f"lm_eval.{task}.n"] = r["n"]
        return out


EVAL = registry.register(LmEvalTasks())
