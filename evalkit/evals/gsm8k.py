"""GSM8K scored by lm-eval itself, so evalkit's marks are the ones the field trusts.

lm-eval is called in-process (`simple_evaluate`) over a task YAML that includes lm-eval's own
`gsm8k.yaml` and only swaps the hub dataset for the copy shipped in evalkit, so the prompt, the
few-shot examples, the stop strings and both filters (`strict-match`, `flexible-extract`) are
lm-eval's. The same YAML is written into the run folder, so the `lm_eval` CLI can be pointed at
it to reproduce a cell's score (the README shows the command).

lm-eval's client returns text only; a thin subclass of its backends also records, per prompt,
`finish_reason`, token counts and how many attempts the request took, since answers cut by
`max_gen_toks` and hidden retries are exactly what silently changes scores.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import hashlib
import importlib.util
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import tqdm
import yaml

from evalkit.config import GSM8KSettings
from evalkit.errors import EvalError

os.environ.setdefault("TQDM_DISABLE", "1")  # lm-eval's progress bars would drown evalkit's own
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# tqdm's `ensure_lock` (used by datasets' thread_map) deletes the class lock after use when it
# created it; with cells in threads another thread's bar then fails with "tqdm has no attribute
# _lock". A lock made once up front is never deleted.
tqdm.tqdm.get_lock()

TASK_NAME = "evalkit_gsm8k"
FILTERS = ("strict-match", "flexible-extract")
GSM8K_TEST_SIZE = 1319
DATA_FILES = ("train.jsonl", "test.jsonl")


def data_dir() -> Path:
    """The GSM8K copy shipped in the package (MIT licence beside it)."""
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


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm-eval")


def write_task_yaml(directory: Path, settings: GSM8KSettings) -> Path:
    """lm-eval's gsm8k task over the shipped data, with the config's generation settings."""
    spec = importlib.util.find_spec("lm_eval")  # located, not imported: the import takes ~1 s
    if spec is None or not spec.submodule_search_locations:
        raise EvalError("gsm8k: lm-eval is not installed (pip install -e . installs it)")
    upstream = Path(next(iter(spec.submodule_search_locations))) / "tasks" / "gsm8k" / "gsm8k.yaml"
    with upstream.open(encoding="utf-8") as f:
        upstream_until = yaml.load(f, Loader=_IgnoreTagsLoader)["generation_kwargs"]["until"]
    files = check_data()
    task = {
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


def request_timeout(settings: GSM8KSettings) -> float:
    """lm-eval's 300 s default, growing with `max_gen_toks` for long reasoning answers."""
    return settings.timeout or max(300.0, settings.max_gen_toks * 0.1)


@dataclass
class ResponseMeta:
    """What lm-eval's client drops: per prompt, the server's finish reason, usage and attempts."""

    by_prompt: dict[str, dict[str, Any]] = field(default_factory=dict)
    on_answer: Callable[[int], None] | None = None
    """Called with the number of answers received so far (the live view's `gsm8k n/N`)."""
    answered: int = 0
    first_request: float | None = None
    last_answer: float | None = None
    """monotonic() of the first request and the last answer: the request phase, for timings."""

    def record(self, prompt: str, choice: dict[str, Any], usage: dict[str, Any] | None) -> None:
        entry = self.by_prompt.setdefault(prompt, {"attempts": 0})
        entry["completion_tokens"] = (usage or {}).get("completion_tokens")
        entry["prompt_tokens"] = (usage or {}).get("prompt_tokens")
        if "finish_reason" not in entry:  # first answer for this prompt (a retry answers again)
            self.answered += 1
        entry["finish_reason"] = choice.get("finish_reason")
        self.last_answer = time.monotonic()
        if self.on_answer is not None:
            self.on_answer(self.answered)

    def attempt(self, prompt: str) -> None:
        if self.first_request is None:
            self.first_request = time.monotonic()
        self.by_prompt.setdefault(prompt, {"attempts": 0})["attempts"] += 1


_META: contextvars.ContextVar[ResponseMeta | None] = contextvars.ContextVar("evalkit_meta", default=None)
_PROMPT: contextvars.ContextVar[str | None] = contextvars.ContextVar("evalkit_prompt", default=None)


def _prompt_key(messages: Any) -> str:
    if isinstance(messages, list) and len(messages) == 1:
        messages = messages[0]
    return messages if isinstance(messages, str) else json.dumps(messages, sort_keys=True, default=str)


def _register_backends() -> None:
    """`evalkit-completions` / `evalkit-chat-completions`: lm-eval's backends plus metadata capture."""
    from lm_eval.api.registry import MODEL_REGISTRY, register_model
    from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI

    if "evalkit-completions" in MODEL_REGISTRY:
        return

    class _Recording:
        async def amodel_call(self, session: Any, sem: Any, messages: Any, **kwargs: Any) -> Any:  # noqa: D401
            key = _prompt_key(messages)
            meta = _META.get()
            if meta is not None:
                meta.attempt(key)
            token = _PROMPT.set(key)
            try:
                return await super().amodel_call(session, sem, messages, **kwargs)  # type: ignore[misc]
            finally:
                _PROMPT.reset(token)

        def parse_generations(self, outputs: Any, **kwargs: Any) -> list[str]:
            meta, key = _META.get(), _PROMPT.get()
            if meta is not None and key is not None and isinstance(outputs, dict):
                for choice in outputs.get("choices") or []:
                    meta.record(key, choice, outputs.get("usage"))
            return super().parse_generations(outputs, **kwargs)  # type: ignore[misc]

    register_model("evalkit-completions")(type("EvalkitCompletions", (_Recording, LocalCompletionsAPI), {}))
    register_model("evalkit-chat-completions")(type("EvalkitChatCompletions", (_Recording, LocalChatCompletion), {}))


def model_args(settings: GSM8KSettings, base_url: str, served_name: str) -> dict[str, Any]:
    """The backend arguments; the equality test passes the same ones to the `lm_eval` CLI."""
    path = "/v1/completions" if settings.endpoint == "completions" else "/v1/chat/completions"
    return {
        "base_url": base_url.rstrip("/") + path,
        "model": served_name,
        "num_concurrent": settings.num_concurrent,
        "max_retries": settings.max_retries,
        "timeout": request_timeout(settings),
        "tokenized_requests": False,
        "tokenizer_backend": None,
        "max_gen_toks": settings.max_gen_toks,
        "seed": settings.seed,
    }


class _ThisThread(logging.Filter):
    """Cells run side by side in threads: each cell's log file gets only its own thread's lines."""

    def __init__(self) -> None:
        super().__init__()
        self.ident = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread == self.ident


@contextlib.contextmanager
def _log_to(path: Path | None) -> Iterator[None]:
    """lm-eval's log (retries, failed requests, null answers) goes to the cell's gsm8k.log.

    Left alone it would print every retry of every request to the terminal; a cell's log is
    where a reader looks when the cell's numbers look wrong.
    """
    loggers = [logging.getLogger(name) for name in ("lm_eval", "asyncio")]
    if path is None:
        yield
        return
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_ThisThread())
    for logger in loggers:
        logger.propagate = False
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        handler.close()


@dataclass
class GSM8KResult:
    metrics: dict[str, Any]
    samples: list[dict[str, Any]]


def _cache_templates() -> None:
    """Compile each of lm-eval's Jinja prompt templates once instead of once per document.

    lm-eval's `utils.apply_template` calls `env.from_string` for every render: ~5 s of the ~6 s
    lm-eval spends per cell outside its requests, for 1319 questions x (shots + 1) x 2 renders.
    The same environment renders the same template, so prompts are byte-identical (the
    equality test against the `lm_eval` CLI, which runs unpatched, checks it).
    """
    import lm_eval.utils as lm_utils

    if getattr(lm_utils.apply_template, "evalkit_cached", False):
        return

    def apply_template(template: str, doc: dict[str, Any]) -> str:
        return compile_template(template)(doc)

    apply_template.evalkit_cached = True  # type: ignore[attr-defined]
    lm_utils.apply_template = apply_template


@functools.lru_cache(maxsize=1024)
def compile_template(template: str) -> Callable[[dict[str, Any]], str]:
    """A render function for one of lm-eval's templates, in lm-eval's own Jinja environment.

    Templates made only of text and bare ``{{ field }}`` (GSM8K's "Question: {{question}}\nAnswer:"
    and "{{answer}}") are rendered by joining the text with ``str(doc[field])``, which is what
    Jinja's compiled code does for them without filters or autoescape: Jinja sets up a new
    context per render, which cost ~20 us x 21,000 renders per cell. Anything else, and a
    field the document lacks, goes through Jinja.
    """
    import lm_eval.utils as lm_utils
    from jinja2 import nodes

    compiled = lm_utils.env.from_string(template)
    body = lm_utils.env.parse(template).body
    if not (len(body) == 1 and isinstance(body[0], nodes.Output)
            and all(isinstance(n, (nodes.TemplateData, nodes.Name)) for n in body[0].nodes)):
        return lambda doc: compiled.render(**doc)
    parts = tuple((n.data, None) if isinstance(n, nodes.TemplateData) else ("", n.name) for n in body[0].nodes)

    def render(doc: dict[str, Any]) -> str:
        try:
            return "".join([text if field is None else str(doc[field]) for text, field in parts])
        except KeyError:
            return compiled.render(**doc)  # Jinja's own error (StrictUndefined) or a global

    return render


_TASKS: dict[str, Any] = {}
_TASKS_LOCK = threading.Lock()


def task_for_cell(task_dir: Path) -> Any:
    """lm-eval's Task for the task file in ``task_dir``: built once per process, copied per cell.

    Building it reads the YAML and the dataset, and lm-eval turns the 7,473 training rows into
    Python dicts for its few-shot sampler: ~0.4 s per cell for the same object every time. The
    cached task keeps its splits as lists of dicts (the rows lm-eval reads from the Arrow table,
    in the same order), which each cell's deep copy shares: simple_evaluate sets the seed,
    config and requests on its own copy, so cells side by side never touch each other's.
    """
    from lm_eval.tasks import TaskManager

    key = (task_dir / f"{TASK_NAME}.yaml").read_text(encoding="utf-8")
    with _TASKS_LOCK:
        task = _TASKS.get(key)
        if task is None:
            task = TaskManager(include_path=str(task_dir), include_defaults=False).load([TASK_NAME])["tasks"][TASK_NAME]
            task.dataset = {split: list(docs) for split, docs in task.dataset.items()}
            _TASKS[key] = task
    shared = {id(docs): docs for docs in (*task.dataset.values(), task.sampler.df)}
    return copy.deepcopy(task, memo=shared)


def check_endpoint(settings: GSM8KSettings, base_url: str, served_name: str) -> None:
    """Refuse, before any question, a server that does not serve the configured endpoint.

    Pointing lm-eval's completions backend at a chat route (or the reverse) fails every request
    with 404/422 (lm-eval #3125); one probe turns that into a single clear error.
    """
    import httpx

    if settings.endpoint == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}
    else:
        path, body = "/v1/completions", {"prompt": "hi"}
    try:
        r = httpx.post(base_url.rstrip("/") + path, json={"model": served_name, "max_tokens": 1, "temperature": 0, **body},
                       timeout=60)
    except httpx.HTTPError as e:
        raise EvalError(f"gsm8k: {path} unreachable: {e}") from e
    if r.status_code in (400, 404, 405, 422):
        raise EvalError(f"gsm8k: evals.gsm8k.endpoint is {settings.endpoint!r} but the server answers {path} "
                        f"with HTTP {r.status_code}: {r.text[:200]}")


def run_gsm8k(
    settings: GSM8KSettings, base_url: str, served_name: str, task_dir: Path, limit: int | None,
    log_path: Path | None = None, progress: Callable[[int, int], None] | None = None,
) -> GSM8KResult:
    """Score GSM8K on a running server; per-question records keep both filters' marks."""
    import lm_eval.evaluator
    from lm_eval.tasks import TaskManager

    check_endpoint(settings, base_url, served_name)
    _cache_templates()
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    # lm-eval shells out to `git describe` in the cwd for its own report (printing "fatal: not
    # a git repository" outside one); evalkit records the SHAs that matter in run.json itself.
    lm_eval.evaluator.get_git_commit_hash = lambda: None
    # lm-eval's LMEVAL_HASHMM=0 switch, set after import: API backends count as multimodal, so
    # lm-eval deep-copies every logged sample looking for images to hash (~0.2 s per cell);
    # GSM8K samples are text, which that copy leaves unchanged.
    lm_eval.evaluator.LMEVAL_HASHMM = False
    _register_backends()
    backend = "evalkit-completions" if settings.endpoint == "completions" else "evalkit-chat-completions"
    total = min(n for n in (limit, settings.limit, GSM8K_TEST_SIZE) if n)
    meta = ResponseMeta(on_answer=(lambda done: progress(done, total)) if progress else None)
    token = _META.set(meta)
    try:
        with _log_to(log_path):
            out = lm_eval.evaluator.simple_evaluate(
                model=backend,
                model_args=model_args(settings, base_url, served_name),
                tasks=[task_for_cell(task_dir)],
                limit=limit or settings.limit,
                task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
                log_samples=True,
                apply_chat_template=settings.endpoint == "chat",
                fewshot_as_multiturn=settings.endpoint == "chat",
                random_seed=settings.seed,
                numpy_random_seed=settings.seed,
                fewshot_random_seed=settings.seed,
            )
    except Exception as e:  # lm-eval raises bare exceptions (RetryError, ClientError, ...)
        raise EvalError(f"gsm8k: lm-eval failed: {type(e).__name__}: {e}") from e
    finally:
        _META.reset(token)
    if out is None:
        raise EvalError("gsm8k: lm-eval returned no results")
    result = _collect(out, meta)
    result.metrics["endpoint"] = settings.endpoint
    result.metrics["chat_template"] = (
        "the server's own (lm-eval apply_chat_template, few-shot as multi-turn)" if settings.endpoint == "chat" else None
    )
    if meta.first_request is not None and meta.last_answer is not None:
        result.metrics["requests_s"] = round(meta.last_answer - meta.first_request, 3)
    return result


def _collect(out: dict[str, Any], meta: ResponseMeta) -> GSM8KResult:
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
                **{k: v for k, v in meta.by_prompt.get(_prompt_key(prompt), {}).items()},
            },
        )
        name = s["filter"]
        row[f"{name}.extracted"] = s["filtered_resps"][0]
        row[f"{name}.correct"] = bool(s["exact_match"])
    samples = [by_doc[k] for k in sorted(by_doc)]
    n = len(samples)
    metrics: dict[str, Any] = {
        "strict": float(scores["exact_match,strict-match"]),
        "strict_stderr": scores["exact_match_stderr,strict-match"],
        "flexible": float(scores["exact_match,flexible-extract"]),
        "flexible_stderr": scores["exact_match_stderr,flexible-extract"],
        "n": n,
        "cut_by_max_gen_toks": sum(1 for r in samples if r.get("finish_reason") == "length"),
        "empty_responses": sum(1 for r in samples if not str(r["response"]).strip()),
        "retries": sum(max(0, r.get("attempts", 1) - 1) for r in samples),
        "lm_eval_version": lm_eval_version(),
        "task_version": out.get("versions", {}).get(TASK_NAME),
        "num_fewshot": out.get("n-shot", {}).get(TASK_NAME),
    }
    for key in ("strict_stderr", "flexible_stderr"):
        value = metrics[key]
        metrics[key] = None if isinstance(value, str) or value != value else float(value)  # "N/A"/nan at n < 2
    return GSM8KResult(metrics, samples)
