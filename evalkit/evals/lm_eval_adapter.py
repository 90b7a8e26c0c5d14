"""lm-eval, called in-process, for any lm-eval task over an OpenAI-compatible server.

What this module adds to `lm_eval.evaluator.simple_evaluate`, for every task:

* backends `evalkit-completions` / `evalkit-chat-completions` (lm_eval_backends.py): lm-eval's
  own clients plus a record, per prompt, of the server's `finish_reason`, token counts and
  request attempts (lm-eval keeps text only; answers cut by `max_gen_toks` and hidden retries
  are what silently changes scores);
* a Task built once per process and deep-copied per cell (`task_for_cell`);
* lm-eval's log sent to the cell's own log file, one file per thread (cells run side by side);
* lm-eval's Jinja templates compiled once (`compile_template`);
* a subset of the documents (`samples`, lm-eval's own `simple_evaluate(samples=...)`) asked
  with the very prompts a full run asks them with (`_pin_fewshot`).

Importing this module changes nothing: no environment variable, no lm-eval global. The first
`evaluate` call sets up the process once (`_setup_process`): offline Hugging Face flags before
`datasets` is imported, tqdm's class lock, and the lm-eval globals listed there.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from evalkit.errors import EvalError
from evalkit.evals.base import EvalContext, Server
from evalkit.evals.lm_eval_backends import _META, ResponseMeta, _register_backends

BACKENDS = {"completions": "evalkit-completions", "chat": "evalkit-chat-completions"}
TASK_DIR = "lm_eval_tasks"
"""The run's folder for the task YAMLs (GSM8K's and `evals.lm_eval`'s), shared by every cell
(and by the `lm_eval` CLI)."""


class ClientSettings(Protocol):
    """The lm-eval client settings GSM8K and `evals.lm_eval` share by name; `evals.lm_eval` fills
    `max_gen_toks` from each task before asking for the backend arguments."""

    @property
    def endpoint(self) -> str: ...
    @property
    def num_concurrent(self) -> int: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def max_gen_toks(self) -> int | None: ...
    @property
    def seed(self) -> int: ...


def request_timeout(settings: ClientSettings) -> float:
    """lm-eval's 300 s default, growing with `max_gen_toks` for long reasoning answers."""
    return settings.timeout or max(300.0, (settings.max_gen_toks or 0) * 0.1)


def model_args(settings: ClientSettings, server: Server) -> dict[str, Any]:
    """The backend arguments; the equality test passes the same ones to the `lm_eval` CLI."""
    path = "/v1/completions" if settings.endpoint == "completions" else "/v1/chat/completions"
    return {
        "base_url": server.base_url.rstrip("/") + path,
        "model": server.served_name,
        "num_concurrent": settings.num_concurrent,
        "max_retries": settings.max_retries,
        "timeout": request_timeout(settings),
        "tokenized_requests": False,
        "tokenizer_backend": None,
        "max_gen_toks": settings.max_gen_toks,
        "seed": settings.seed,
    }


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm-eval")


class _ThisThread(logging.Filter):
    """Cells run side by side in threads: each cell's log file gets only its own thread's lines."""

    def __init__(self) -> None:
        super().__init__()
        self.ident = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread == self.ident


@contextlib.contextmanager
def _log_to(path: Path) -> Iterator[None]:
    """lm-eval's log (retries, failed requests, null answers) goes to the cell's log file.

    Left alone it would print every retry of every request to the terminal; a cell's log is
    where a reader looks when the cell's numbers look wrong.
    """
    loggers = [logging.getLogger(name) for name in ("lm_eval", "asyncio")]
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
    parts = tuple((n.data, None) if isinstance(n, nodes.TemplateData) else ("", n.name) for n in body[0].nodes
                  if isinstance(n, (nodes.TemplateData, nodes.Name)))  # all are (above); narrows the type

    def render(doc: dict[str, Any]) -> str:
        try:
            return "".join([text if field is None else str(doc[field]) for text, field in parts])
        except KeyError:
            return str(compiled.render(**doc))  # Jinja's own error (StrictUndefined) or a global

    return render


_SETUP_LOCK = threading.Lock()
_set_up = False


def _setup_process() -> None:
    """Once per process, at the first evaluation (never at import):

    * HF_HUB_OFFLINE / HF_DATASETS_OFFLINE (unless set): data is local, a hub lookup would hang
      on a box without network; `datasets` reads them when first imported, which is below.
    * tqdm's class lock, made up front: `ensure_lock` (datasets' thread_map) deletes a lock it
      created itself, and another cell's thread then fails with "tqdm has no attribute _lock".
    * lm-eval's `apply_template` -> `compile_template`: the same environment renders the same
      template, so prompts are byte-identical (the equality test with the `lm_eval` CLI, which
      runs unpatched, checks it), ~5 s per cell faster.
    * lm-eval's `get_git_commit_hash` -> None: it shells out to `git describe` in the cwd
      ("fatal: not a git repository" outside one); evalkit records the SHAs that matter itself.
    * lm-eval's `add_env_info` (lm_eval 0.4.13 loggers/utils.py, called by evaluator.py:421 in
      every `simple_evaluate`) -> `_env_info`: where torch is installed it runs torch's
      `collect_env` (6.4 s measured on an H100 box, the first cell of every process) and it
      imports transformers, so a transformers that cannot import fails every GSM8K eval.
      evalkit's results keep none of those fields; the versions are read from package metadata.
    * lm-eval's LMEVAL_HASHMM off: API backends count as multimodal, so lm-eval deep-copies
      every logged sample looking for images to hash (~0.2 s per cell); evalkit's tasks are text.
    """
    global _set_up
    with _SETUP_LOCK:
        if _set_up:
            return
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import lm_eval.evaluator
        import lm_eval.utils as lm_utils
        import tqdm

        tqdm.tqdm.get_lock()  # type: ignore[no-untyped-call]  # types-tqdm leaves it untyped

        def apply_template(template: str, doc: dict[str, Any]) -> str:
            return compile_template(template)(doc)

        lm_utils.apply_template = apply_template
        lm_eval.evaluator.get_git_commit_hash = lambda: None
        lm_eval.evaluator.add_env_info = _env_info
        lm_eval.evaluator.LMEVAL_HASHMM = False
        logging.getLogger("lm_eval").setLevel(logging.WARNING)
        _register_backends()
        _set_up = True


def _env_info(storage: dict[str, Any]) -> None:
    """lm-eval's `add_env_info` fields, from installed packages' metadata: nothing imported or run."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "N/A"

    storage.update({"pretty_env_info": "not collected (evalkit)", "transformers_version": installed("transformers"),
                    "lm_eval_version": installed("lm_eval"), "upper_git_hash": None})


_TASKS: dict[tuple[str, str, str], Any] = {}
_TASKS_LOCK = threading.Lock()


def task_for_cell(task_dir: Path, task_name: str) -> Any:
    """lm-eval's Task `task_name` from the task files in `task_dir`: built once per process,
    copied per cell.

    Building it reads the YAML and the dataset, and lm-eval turns GSM8K's 7,473 training rows
    into Python dicts for its few-shot sampler: ~0.4 s per cell for the same object every time.
    The cached task keeps its splits as lists of dicts (the rows lm-eval reads from the Arrow
    table, in the same order), which each cell's deep copy shares: simple_evaluate sets the
    seed, config and requests on its own copy, so cells side by side never touch each other's.
    A task with `process_docs` (mmlu_pro's per-subject filter) keeps its Arrow splits: lm-eval
    hands them to that function, which uses the `datasets` API.
    """
    _setup_process()
    from lm_eval.tasks import TaskManager

    key = (str(task_dir), task_name, (task_dir / f"{task_name}.yaml").read_text(encoding="utf-8"))
    with _TASKS_LOCK:
        task = _TASKS.get(key)
        if task is None:
            task = TaskManager(include_path=str(task_dir), include_defaults=False).load([task_name])["tasks"][task_name]
            if task.config.process_docs is None and getattr(task.fewshot_cfg, "process_docs", None) is None:
                task.dataset = {split: list(docs) for split, docs in task.dataset.items()}
            _TASKS[key] = task
    shared = {id(docs): docs for docs in (*task.dataset.values(), getattr(task.sampler, "df", []))}
    return copy.deepcopy(task, memo=shared)


def _pin_fewshot(task: Any) -> None:
    """Give each document of a subset run the few-shot examples a full run gives it.

    lm-eval's default sampler draws every document's examples from one generator seeded once
    per run, in document order, so under `samples=` the 3rd document asked gets the examples of
    the full run's 3rd document, whatever its id: another prompt, another answer, and marks no
    longer paired with a full run's. The first context built replays the draws of a full run
    (the task's own `fewshot_context` over every document, from the freshly seeded generator)
    and keeps the generator's state before each; each document's context is then built from
    its own state. The prompts are byte-identical to a full run's (the test checks the hashes).
    """
    original = task.fewshot_context
    docs = task.eval_docs
    position = {id(doc): i for i, doc in enumerate(docs)}
    states: list[Any] = []

    def fewshot_context(doc: Any, *args: Any, **kwargs: Any) -> Any:
        rnd = task.sampler.rnd
        if not states:
            for other in docs:
                states.append(rnd.getstate())
                original(other, *args, **kwargs)
        if id(doc) not in position:
            raise EvalError(f"{task.config.task}: a document outside the task's own list was asked (lm-eval changed?)")
        rnd.setstate(states[position[id(doc)]])
        return original(doc, *args, **kwargs)

    task.fewshot_context = fewshot_context


def evaluate(
    ctx: EvalContext, task_name: str, client: ClientSettings, *, label: str, log: str, limit: int | None = None,
    samples: Sequence[int] | None = None, max_unscorable: float = 0.0,
) -> tuple[dict[str, Any], ResponseMeta]:
    """Run one lm-eval task of the run's task folder against `ctx.server`, its progress on
    `ctx.progress`; lm-eval's output dict and the response metadata.

    `client`: the endpoint, seed and backend settings; `log`: the cell's log file lm-eval writes
    to; `samples`: just these documents (indices into the test split; lm-eval's `samples=`,
    which excludes `limit`), asked with the prompts a full run asks them with. Finish reasons
    go through the engine's map (`server.wire`). `max_unscorable`: the share of requests that
    may fail after every retry and come back empty with their `error` recorded (lm-eval itself
    fails the whole run on the first); 0 keeps lm-eval's behaviour.

    Any lm-eval failure becomes an EvalError (lm-eval raises bare exceptions: RetryError,
    ClientError, ...), so a bad server is that cell's error, not a crash of the matrix; `label`
    starts its message. A stop of the run is raised as `Interrupted` (evals/cancel.py).

    No torch seed: lm-eval seeds torch by default (`torch_random_seed=1234`, lm_eval 0.4.13
    evaluator.py:206 -> utils.set_torch_seed), which imports torch wherever it is installed, for
    an API backend that never touches it: 6-8 s on the first eval of every process on a GPU box.
    The seeds that decide evalkit's prompts and requests (Python's, numpy's, the few-shot
    sampler's) are all passed.
    """
    _setup_process()
    import lm_eval.evaluator
    from lm_eval.tasks import TaskManager

    task_dir = ctx.run_dir / TASK_DIR
    task = task_for_cell(task_dir, task_name)
    size = len(task.eval_docs)
    subset = None
    if samples is not None:
        if not samples or (bad := [i for i in samples if not 0 <= i < size]):
            raise EvalError(f"{label}: no document {bad[0] if samples else 'asked'} "
                            f"(the test split has {size})")
        if task.config.num_fewshot:
            _pin_fewshot(task)
        # Sorted: lm-eval maps the k-th document it iterates (in split order) to samples[k].
        limit, subset = None, {task_name: sorted(set(samples))}
    total = len(subset[task_name]) if subset else min(limit or size, size)
    meta = ResponseMeta(progress=lambda done: ctx.progress(done, total), wire=ctx.server.wire,
                        allowed_failures=int(max_unscorable * total))
    token = _META.set(meta)
    try:
        with _log_to(ctx.cell_dir / log):
            out = lm_eval.evaluator.simple_evaluate(
                model=BACKENDS[client.endpoint],
                model_args=model_args(client, ctx.server),
                tasks=[task],
                limit=limit,
                samples=subset,
                task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
                log_samples=True,
                apply_chat_template=client.endpoint == "chat",
                fewshot_as_multiturn=client.endpoint == "chat",
                random_seed=client.seed,
                numpy_random_seed=client.seed,
                torch_random_seed=None,  # see the docstring
                fewshot_random_seed=client.seed,
            )
    except Exception as e:  # noqa: BLE001 - see the docstring
        over = (f" after {meta.failures} of {total} requests failed for good (at most {meta.allowed_failures} may)"
                if meta.allowed_failures else "")
        raise EvalError(f"{label}: lm-eval failed{over}: {type(e).__name__}: {e}") from e
    finally:
        _META.reset(token)
    if out is None:
        raise EvalError(f"{label}: lm-eval returned no results")
    return out, meta
