"""The divergence eval: how far a cell's next-token distributions move from the baseline's.

Accuracy moves only when a change flips an answer; logprobs move first. Each text of a shipped,
versioned reference set (GSM8K train solutions and long passages, evals/prompts/
reference_texts_v1.jsonl) is scored teacher-forced: one prefill per text through the completions
API, asking for the logprob of every text token and the top-k at every position, and nothing
generated (`max_tokens` 1, the one token discarded: current vLLM turns `echo` with `max_tokens` 0
into one sampled token anyway, its `echo_without_generation`, and older vLLM crashed on it,
issue 6521). Two request shapes, the same numbers:

* ``request: echo`` (OpenAI legacy, vLLM, SGLang): ``echo: true, logprobs: k``; the prompt's
  tokens are the first ``usage.prompt_tokens`` of ``choices[0].logprobs``, keyed by token text;
* ``request: prompt_logprobs`` (vLLM): ``prompt_logprobs: k, return_token_ids: true``; keyed by
  token id, so two tokens that decode alike (byte pieces) are never merged.

Positions past `max_tokens` of the server's tokenization are not stored or compared (the whole
text is still prefilled: the shipped texts are at most 4200 characters, about 1000 tokens).

The divergence is measured between two cells (Comparison.PAIRWISE), by `pairwise` from the two
cells' samples files: KL(ref || cell) estimated from the two top-k lists as a lower bound
(divergence_stats.position_kl), top-1 agreement and |Δ logprob| of the text tokens, with their
mean, p99 and max and the worst positions with the text around them. With `repeats`, each text
is scored again on the same server: how far a server moves from itself is the noise floor a
threshold ignores. Texts tokenized differently by the two cells are refused with the text id and
the first differing token.

With `generations: N` a cell also scores long generations of the repetition eval, other cells'
and its own, for `divergence.generation_nll_rise`: how much less likely a cell's outputs are under
the reference's model than the reference's own (evals/divergence_generations.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import Field

from evalkit import fastjson
from evalkit.errors import ConfigError, EvalError
from evalkit.evals import cancel, divergence_generations, divergence_stats, prompts, registry
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
from evalkit.evals.http_client import Bounded, Tries, pooled_client, with_retries
from evalkit.evals.prompts import Prompt, load_prompt_set
from evalkit.evals.units import NATS, NATS_CHANGE, SHARE
from evalkit.store.files import once_per_file_state, read_jsonl, write_jsonl


class DivergenceSettings(EvalSettings):
    """Teacher-forced scoring of the reference texts, compared between cells."""

    texts: str = Field("reference_texts_v1", description="The shipped text set (evals/prompts/<name>.jsonl).")
    count: int | None = Field(None, ge=1, le=64, description="First N texts of the set; default: all.")
    max_tokens: int = Field(1024, ge=2, le=1024, description="Positions scored per text, in the server's tokens.")
    top_k: int = Field(5, ge=1, le=20, description="Logprobs per position (vLLM's --max-logprobs is 20).")
    repeats: int = Field(1, ge=1, le=8, description="Scorings of each text per cell; >1 measures the noise floor.")
    concurrency: int = Field(8, ge=1)
    request: Literal["auto", "echo", "prompt_logprobs"] = Field(
        "auto", description="prompt_logprobs: vLLM's token-id form; auto: it where the engine's profile speaks "
                            "vLLM's token-id extensions, else echo.")
    timeout: float = Field(600.0, gt=0, description="Per-request seconds.")
    generations: int = Field(
        0, ge=0, le=64, description="Long generations (the repetition eval's) per other cell to score under this "
                                    "cell's engine, collapsed ones first, with this cell's own for the same prompts: "
                                    "divergence.generation_nll_rise. 0: off. The plan then runs the baseline last.")


def _body(settings: DivergenceSettings, served_name: str, text: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": served_name, "prompt": text, "max_tokens": 1, "temperature": 0}
    if settings.request == "echo":
        return body | {"echo": True, "logprobs": settings.top_k}
    return body | {"prompt_logprobs": settings.top_k, "return_token_ids": True}


def _prompt_tokens(item: Prompt, answer: Mapping[str, Any], offsets: Sequence[int] | None) -> int:
    """Where the prompt ends in an echoed token list: `usage.prompt_tokens`, else the tokens that
    start inside the text (`text_offset`)."""
    n = (answer.get("usage") or {}).get("prompt_tokens")
    if isinstance(n, int):
        return n
    if offsets:
        return sum(1 for offset in offsets if offset < len(item.prompt))
    raise EvalError(f"divergence: text {item.id}: the server said neither usage.prompt_tokens nor text_offset")


def parse_echo(item: Prompt, answer: Mapping[str, Any]) -> dict[str, Any]:
    """The prompt's tokens, their logprobs and each position's top-k from an `echo` answer."""
    lp = ((answer.get("choices") or [{}])[0]).get("logprobs") or {}
    tokens, logprobs, top = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
    if not tokens or logprobs is None or top is None:
        raise EvalError(f"divergence: text {item.id}: no echoed logprobs in the answer (does the server "
                        "support echo with logprobs? try request: prompt_logprobs)")
    n = _prompt_tokens(item, answer, lp.get("text_offset"))
    if not 0 < n <= min(len(tokens), len(logprobs), len(top)):
        raise EvalError(f"divergence: text {item.id}: {len(tokens)} echoed tokens for a prompt of {n}")
    return {"tokens": tokens[:n], "logprobs": logprobs[:n], "top": top[:n]}


def parse_prompt_logprobs(item: Prompt, answer: Mapping[str, Any]) -> dict[str, Any]:
    """The same from vLLM's `prompt_logprobs` (keyed by token id) and `prompt_token_ids`; each
    token's text (`pieces`, for the report's context) is its entry's `decoded_token`, so the
    first token, which has no entry, shows as ""."""
    choice = (answer.get("choices") or [{}])[0]
    ids, entries = choice.get("prompt_token_ids"), choice.get("prompt_logprobs")
    if not ids or entries is None or len(entries) != len(ids):
        raise EvalError(f"divergence: text {item.id}: the answer has no prompt_logprobs with prompt_token_ids "
                        "(vLLM's return_token_ids); try request: echo")
    tokens = [str(i) for i in ids]
    pieces, logprobs, top = [], [], []
    for token, entry in zip(tokens, entries):
        mine = (entry or {}).get(token) or {}
        pieces.append(mine.get("decoded_token") or "")
        logprobs.append(mine.get("logprob"))
        top.append({k: v["logprob"] for k, v in entry.items()} if entry else None)
    return {"tokens": tokens, "pieces": pieces, "logprobs": logprobs, "top": top}


async def _score(client: httpx.AsyncClient, settings: DivergenceSettings, served_name: str,
                 item: Prompt) -> dict[str, Any]:
    """One prefill of one text; transient failures (connection, 429/5xx) are retried with backoff
    (`with_retries`), and the samples row says how often it was asked (`attempts`).

    Unlike a stream, a non-streamed answer cannot carry an error inside a 200: vLLM 0.34.0 raises
    GenerationError on an `error` finish (entrypoints/openai/completion/serving.py:655) and answers
    it with HTTP 500 (entrypoints/serve/exception_handling/error_response.py:60-67); SGLang 0.5.23
    raises an HTTP error for an aborted non-streamed request (managers/tokenizer_manager.py:1916-1921,
    `_handle_abort_finish_reason`). Both are retried here like any other 5xx."""
    async def ask(tries: Tries) -> tuple[Any, int]:
        response = await client.post("/v1/completions", json=_body(settings, served_name, item.prompt))
        response.raise_for_status()
        return fastjson.loads(response.content), tries.attempt

    answer, attempt = await with_retries(ask, f"divergence: text {item.id}")
    parse = parse_echo if settings.request == "echo" else parse_prompt_logprobs
    scored = {key: values[:settings.max_tokens] for key, values in parse(item, answer).items()}
    return {"id": item.id, "kind": item.kind, "n_tokens": len(scored["tokens"]), "attempts": attempt, **scored}


async def _score_all(settings: DivergenceSettings, server: Server, items: list[Prompt],
                     progress: Callable[[int, int], None], repeats: int | None = None) -> list[list[dict[str, Any]]]:
    """Every text, `repeats` times (default: the settings'; each repeat one prefill per text): rows
    per repeat, in set order."""
    repeats = settings.repeats if repeats is None else repeats
    async with pooled_client(server, settings.concurrency, settings.timeout) as client:

        async def one(item: Prompt) -> dict[str, Any]:
            return await _score(client, settings, server.served_name, item)

        bounded = Bounded(one, settings.concurrency, len(items) * repeats, progress)
        return [await bounded.map(items) for _ in range(repeats)]


def setup_fields(settings: DivergenceSettings, version: str) -> dict[str, Any]:
    """What the divergence depends on besides the engines: the texts, how many positions and
    logprobs, and the request shape. Not in it: `count` (like `--limit`: cells are compared on the
    texts both scored), repeats, concurrency, timeouts."""
    return {"texts": settings.texts, "texts_version": version, "max_tokens": settings.max_tokens,
            "top_k": settings.top_k, "request": settings.request}


@once_per_file_state(maxsize=4)
def _rows(path: Path) -> dict[str, dict[str, Any]]:
    """A samples file by text id, read once per state of the file: the baseline is compared with
    every cell, each cell with the baseline and its twin, so four files stay parsed (tens of MB
    each at 1024 tokens and top-k 20), not the whole run's."""
    return {row["id"]: row for row in read_jsonl(path)}


@once_per_file_state(maxsize=64)
def _between(this: Path, ref: Path) -> dict[str, Any] | str | None:
    """divergence_stats.between of two samples files, once per pair of file states (the four
    metrics each ask); None when either file is absent."""
    try:
        rows, ref_rows = _rows(this), _rows(ref)
    except FileNotFoundError:
        return None
    return divergence_stats.between(rows, ref_rows)


_FACTS = {"kl_mean": ("kl", "worst_kl"), "kl_p99": ("kl", "worst_kl"), "logprob_abs_mean": ("logprob_abs", "worst_logprob"),
          "top1_agreement": (None, None)}
"""Per headline value: the distribution its delta carries, and the worst places it shows."""


SPECS = (
    MetricSpec("divergence.kl_p99", Comparison.PAIRWISE,
               MetricDisplay("KL p99", key="kl_p99", delta_label="KL p99", details=Evidence.WORST),
               higher_is_better=False, noise_floor=floor_of_repeats("kl_p99"), unit=NATS),
    MetricSpec("divergence.kl_mean", Comparison.PAIRWISE, MetricDisplay("KL mean", key="kl_mean"),
               higher_is_better=False, noise_floor=floor_of_repeats("kl_mean"), unit=NATS),
    MetricSpec("divergence.top1_agreement", Comparison.PAIRWISE,
               MetricDisplay("top-1 agreement", key="top1", delta_label="top-1 agree"),
               noise_floor=floor_of_repeats("top1_agreement"), unit=SHARE),
    MetricSpec("divergence.logprob_abs_mean", Comparison.PAIRWISE,
               MetricDisplay("mean |Δ logprob|", key="logprob_abs", details=Evidence.WORST),
               higher_is_better=False, noise_floor=floor_of_repeats("logprob_abs_mean"), unit=NATS),
)
"""The eval's metrics, all measured between two cells (`Divergence.metrics_for` a config naming it)."""
GENERATIONS_SPEC = MetricSpec(
    "divergence.generation_nll_rise", Comparison.PAIRWISE,
    MetricDisplay("generation NLL rise", key="gen_nll", delta_label="gen NLL rise"), higher_is_better=False,
    unit=NATS_CHANGE)
"""With `generations`: nats per token by which a cell's long generations are less likely under the
reference's model than the reference's own (evals/divergence_generations.py)."""


def csv_columns(specs: tuple[MetricSpec, ...]) -> tuple[str, ...]:
    """The per-cell facts, in the CSV of a run that has the eval (like its metrics)."""
    noise = tuple(f"divergence.noise_{spec.name.removeprefix('divergence.')}" for spec in SPECS)
    return ("divergence.n", "divergence.tokens", "divergence.repeats", *noise) if specs else ()


class Divergence(Eval):
    """Teacher-forced logprobs of fixed texts, compared between cells."""

    name = "divergence"
    settings_model = DivergenceSettings
    default_enabled = False
    size = 64
    display = EvalDisplay(title="logprob divergence", csv_columns=csv_columns)

    metrics = ()
    """None unless a config names the eval or a stored cell ran it (`metrics_for`, `metrics_in`),
    so a report of a run without it has no columns of dashes (and a threshold on it needs
    `evals.divergence`)."""

    def metrics_for(self, settings: DivergenceSettings | None) -> tuple[MetricSpec, ...]:
        if settings is None:
            return ()
        return (*SPECS, GENERATIONS_SPEC) if settings.generations else SPECS

    def metrics_in(self, raw: Mapping[str, Any]) -> tuple[MetricSpec, ...]:
        return (*SPECS, GENERATIONS_SPEC) if raw.get("generations") is not None else SPECS

    def runs_baseline_last(self, settings: DivergenceSettings) -> bool:
        return settings.generations > 0

    def check(self, settings: DivergenceSettings) -> None:
        path = resources.files(prompts) / f"{settings.texts}.jsonl"
        if not path.is_file():
            raise ConfigError(f"evals.divergence.texts: no text set {settings.texts!r} ({path})")

    def run(self, ctx: EvalContext, settings: DivergenceSettings) -> EvalResult:
        self.check(settings)
        if settings.request == "auto":  # the profile says whether the server answers in token ids
            vllm_ids = ctx.server.wire.token_ids == "return_tokens_as_token_ids"  # vLLM's token-id extensions
            settings = settings.model_copy(update={"request": "prompt_logprobs" if vllm_ids else "echo"})
        text_set = load_prompt_set(settings.texts)
        count = min(c for c in (settings.count, ctx.limit, len(text_set.prompts)) if c is not None)
        items = list(text_set.prompts[:count])
        scored = cancel.run(_score_all(settings, ctx.server, items, ctx.progress))
        first = scored[0]
        metrics: dict[str, Any] = {"n": len(first), "tokens": sum(row["n_tokens"] for row in first),
                                   "texts": text_set.id, "texts_version": text_set.version,
                                   "top_k": settings.top_k, "request": settings.request, "repeats": None}
        if settings.repeats > 1:
            again = [{row["id"]: row for row in rows} for rows in scored[1:]]
            floors = divergence_stats.noise_floor({row["id"]: row for row in first}, again)
            metrics["repeats"] = {"n": settings.repeats, "noise_floor": floors}
        if settings.generations:
            def score(texts: list[Prompt]) -> list[dict[str, Any]]:
                return cancel.run(_score_all(settings, ctx.server, texts,
                                              ctx.progress.labelled("divergence generations"), 1))[0]

            rows = divergence_generations.score_generations(ctx, settings.generations, score)
            write_jsonl(ctx.cell_dir / divergence_generations.FILE, rows)
            metrics["generations"] = {"texts": len(rows), "cells": sorted({row["cell"] for row in rows})}
        metrics[SETUP_KEY] = setup_fingerprint(setup_fields(settings, text_set.version))
        return EvalResult(metrics, first)

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Facts of one cell that need no reference: texts and positions scored, repeats, and with
        repeats its noise floor, `divergence.noise_<metric>` (the largest change of the metric
        between a repeat and the first scoring; for the agreement, 1 - the lowest agreement). The
        divergence itself is between two cells: `pairwise`."""
        repeats = raw.get("repeats") or {}
        return {"divergence.n": raw["n"], "divergence.tokens": raw["tokens"], "divergence.repeats": repeats.get("n", 1),
                **{f"divergence.noise_{k}": v for k, v in (repeats.get("noise_floor") or {}).items()}}

    def pairwise(self, metric: MetricSpec, this_dir: Path, ref_dir: Path) -> dict[str, Any] | None:
        if metric.name == GENERATIONS_SPEC.name:
            return divergence_generations.rise(this_dir, ref_dir)
        this, ref = this_dir / self.samples_file, ref_dir / self.samples_file
        result = _between(this, ref)
        if result is None:
            return None
        if isinstance(result, str):
            return {"diff": None, "p_value": None, "refused": result}
        short = metric.name.removeprefix("divergence.")
        diff = divergence_stats.changes(result)[short]
        spread, worst = _FACTS[short]
        value = result["top1_agreement"] if short == "top1_agreement" else diff
        found: dict[str, Any] = {"diff": diff, "value": value,
                                 "p_value": None, "texts": result["texts"], "positions": result["positions"]}
        if spread:
            found[spread] = result[spread]
        if worst and metric.display.details is Evidence.WORST:
            found["worst"] = result[worst]
        return found


EVAL = registry.register(Divergence())
