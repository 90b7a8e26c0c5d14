"""The consistency eval: identical greedy requests, sent together, should give the same text.

A race shows first as outputs that change between identical requests (vLLM #41331: garbled
only under concurrent identical requests with CUDA graphs; #45699: identical requests differ
with prefix caching; sglang #36480: greedy outputs not self-consistent). So each of the first
K prompts of a shipped prompt set (evals/prompts/, `long_generation_v1` by default) is sent N
times with temperature 0 and a short `max_tokens`, all K x N requests in one seeded shuffle, up
to `concurrency` in flight: a prompt's copies are interleaved with the other prompts' and land
in different batches, batch positions and data-parallel ranks. Per prompt: whether every copy
gave the same text and, if not, where they part (the first character, and the first piece of
the detector's tokenizer-free split, evals/detector/_text.py: the same unit for every engine,
so cells compare whatever their tokenizer and whether or not they return ids).

Healthy engines are not batch-invariant either (another batch size can flip a near-tie), so the
share of prompts whose copies disagree is a COUNT metric compared with the baseline cell's
(Fisher's exact test), not required to be 0; the median first-divergence position is shown
beside it (a race tends to part copies early, a near-tie late). Each prompt's samples row keeps
every copy's text, the order it was sent in, and where the copies part with each distinct
continuation (`parted`): the evidence the report's details show. Off unless a config names it.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from pydantic import Field

from evalkit import fastjson
from evalkit.errors import ConfigError, EvalError
from evalkit.evals import cancel, registry
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
    setup_fingerprint,
)
from evalkit.evals.detector import split_text
from evalkit.evals.http_client import Bounded, Tries, pooled_client, with_retries
from evalkit.evals.prompts import Prompt, load_prompt_set
from evalkit.evals.units import TOKENS

CONTEXT_CHARS = 120
"""Characters of the shared text before the parting place, and of each continuation after it,
kept in a samples row's `parted` (the whole texts are in `texts`)."""


class ConsistencySettings(EvalSettings):
    """K prompts, each sent N times at temperature 0, interleaved and concurrent."""

    prompt_set: str = Field("long_generation_v1", description="The shipped prompt set (evals/prompts/<name>.jsonl).")
    count: int = Field(32, ge=1, description="K: the first K prompts of the set.")
    copies: int = Field(4, ge=2, le=16, description="N: identical requests per prompt.")
    max_tokens: int = Field(64, ge=1, le=1024, description="Short: a race shows within a few tokens.")
    concurrency: int = Field(64, ge=1, description="Requests in flight; 1 sends one at a time (no shared batches).")
    seed: int = Field(0, description="Seed of the shuffle that interleaves the copies.")
    timeout: float = Field(600.0, gt=0, description="Per-request seconds.")


async def _generate(client: httpx.AsyncClient, settings: ConsistencySettings, server: Server,
                    item: Prompt) -> dict[str, Any]:
    """One copy: its text and finish reason. Transient failures (connection, 429/5xx) are asked
    again with backoff (`with_retries`), as divergence.py's prefills are (it cites where the
    engines answer a failed non-streamed request with a 5xx)."""
    body = {"model": server.served_name, "prompt": item.prompt, "max_tokens": settings.max_tokens, "temperature": 0}

    async def ask(_: Tries) -> Any:
        response = await client.post("/v1/completions", json=body)
        response.raise_for_status()
        return (fastjson.loads(response.content).get("choices") or [None])[0]

    choice = await with_retries(ask, f"consistency: prompt {item.id}")
    if not isinstance(choice, Mapping) or not isinstance(choice.get("text"), str):
        raise EvalError(f"consistency: prompt {item.id}: the answer has no choices[0].text")
    raw = choice.get("finish_reason")
    return {"text": choice["text"], "finish_reason": server.wire.finish(raw), "engine_finish_reason": raw}


def _shared_prefix(sequences: Sequence[Sequence[Any]]) -> int:
    """Length of the prefix every sequence shares."""
    shortest = min(len(s) for s in sequences)
    return next((i for i in range(shortest) if any(s[i] != sequences[0][i] for s in sequences)), shortest)


def compare_copies(item: Prompt, outputs: Sequence[Mapping[str, Any]], sent: Sequence[int]) -> dict[str, Any]:
    """One prompt's samples row from its copies' outputs (in copy order) and the places in the
    send order each went out at: do they agree, where do they part, and how."""
    texts = [str(out["text"]) for out in outputs]
    distinct = list(dict.fromkeys(texts))
    row: dict[str, Any] = {"id": item.id, "kind": item.kind, "copies": len(texts), "disagree": len(distinct) > 1,
                           "variants": len(distinct), "diverge_at_token": None, "diverge_at_char": None,
                           "parted": None, "sent": list(sent),
                           "finish_reasons": [out["finish_reason"] for out in outputs], "texts": texts}
    if len(distinct) > 1:
        at = _shared_prefix(texts)
        pieces = [split_text(text).tolist() for text in distinct]
        row["diverge_at_token"] = _shared_prefix(pieces)
        row["diverge_at_char"] = at
        row["parted"] = {"before": texts[0][max(0, at - CONTEXT_CHARS): at],
                         "after": [{"copies": [i for i, t in enumerate(texts) if t == text],
                                    "text": text[at: at + CONTEXT_CHARS]} for text in distinct]}
    return row


async def _run_all(settings: ConsistencySettings, ctx: EvalContext, items: list[Prompt]) -> list[dict[str, Any]]:
    """Every copy of every prompt, in one seeded shuffle; one samples row per prompt, in set order."""
    order = [(index, copy) for index in range(len(items)) for copy in range(settings.copies)]
    random.Random(settings.seed).shuffle(order)
    async with pooled_client(ctx.server, settings.concurrency, settings.timeout) as client:

        async def one(request: tuple[int, int]) -> dict[str, Any]:
            return await _generate(client, settings, ctx.server, items[request[0]])

        outputs = await Bounded(one, settings.concurrency, len(order), ctx.progress).map(order)
    copies: list[dict[int, tuple[int, dict[str, Any]]]] = [{} for _ in items]
    for place, ((index, copy), out) in enumerate(zip(order, outputs)):
        copies[index][copy] = (place, out)
    return [compare_copies(item, [copies[i][c][1] for c in range(settings.copies)],
                           [copies[i][c][0] for c in range(settings.copies)]) for i, item in enumerate(items)]


def summarize(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The raw metrics over the samples rows: k of K prompts disagreeing, and the median place
    (in pieces) where their copies part (None when none do)."""
    parted = [row["diverge_at_token"] for row in samples if row["disagree"]]
    n = len(samples)
    return {"n": n, "disagree": len(parted), "disagree_rate": len(parted) / n if n else None,
            "diverge_at_median": statistics.median(parted) if parted else None}


def setup_fields(settings: ConsistencySettings, version: str) -> dict[str, Any]:
    """What the disagreement depends on besides the engine: the prompts, how many copies, how long,
    and how the copies are mixed (the shuffle's seed and the requests in flight decide which
    batches they share). Not in it: `count` (like `--limit`: Fisher's test takes each cell's K),
    timeouts. evalkit's version is added by `setup_fingerprint`."""
    return {"prompt_set": settings.prompt_set, "prompt_set_version": version, "copies": settings.copies,
            "max_tokens": settings.max_tokens, "concurrency": settings.concurrency, "seed": settings.seed}


def _k_of_n(flat: Mapping[str, Any]) -> str:
    rate = flat.get("consistency.disagree_rate")
    if rate is None:
        return "-"
    return f"{rate:.3f} ({flat.get('consistency.disagree')}/{flat.get('consistency.n')})"


SPECS = (
    MetricSpec("consistency.disagree_rate", Comparison.COUNT,
               MetricDisplay("consistency disagree rate", key="disagree", column="disagree (k/K)", text=_k_of_n,
                             delta_label="disagree", details=Evidence.PARTED,
                             event_words="prompts whose identical requests disagreed"),
               higher_is_better=False, count_metric="consistency.disagree", n_metric="consistency.n",
               event_field="disagree"),
    MetricSpec("consistency.diverge_at_median", Comparison.CONTINUOUS,
               MetricDisplay("median first divergence (token)", key="diverge_at", column="diverge at (median token)",
                             delta_label="diverge at"), unit=TOKENS),
)
"""The eval's metrics (`Consistency.metrics_for` a config naming it). An earlier divergence is
the worse one: a race parts copies within a few tokens."""


CSV_FIELDS = ("consistency.disagree_rate", "consistency.disagree", "consistency.n",
              "consistency.disagree_rate_ci95", "consistency.diverge_at_median")


def csv_columns(specs: tuple[MetricSpec, ...]) -> tuple[str, ...]:
    """Its facts, in the CSV of a run that has the eval (like its metrics)."""
    return CSV_FIELDS if specs else ()


class Consistency(Eval):
    """Identical greedy requests, interleaved and concurrent, compared with each other; checks its
    prompt count before a run (`Checks`)."""

    name = "consistency"
    settings_model = ConsistencySettings
    default_enabled = False
    metrics = SPECS
    display = EvalDisplay(title="self-consistency", csv_columns=csv_columns)

    def metrics_for(self, settings: ConsistencySettings | None) -> tuple[MetricSpec, ...]:
        """Only where a config names the eval: a run without it has no columns of dashes."""
        return SPECS if settings is not None else ()

    def metrics_in(self, raw: Mapping[str, Any]) -> tuple[MetricSpec, ...]:
        return SPECS

    def check(self, settings: ConsistencySettings) -> None:
        size = len(load_prompt_set(settings.prompt_set).prompts)
        if settings.count > size:
            raise ConfigError(f"evals.consistency.count: {settings.count} prompts asked, "
                              f"{settings.prompt_set} has {size}")

    def run(self, ctx: EvalContext, settings: ConsistencySettings) -> EvalResult:
        self.check(settings)
        prompt_set = load_prompt_set(settings.prompt_set)
        count = settings.count if ctx.limit is None else min(settings.count, ctx.limit)
        items = list(prompt_set.prompts[:count])
        samples = cancel.run(_run_all(settings, ctx, items))
        metrics = {**summarize(samples), "copies": settings.copies, "max_tokens": settings.max_tokens,
                   "prompt_set": prompt_set.id, "prompt_set_version": prompt_set.version}
        metrics[SETUP_KEY] = setup_fingerprint(setup_fields(settings, prompt_set.version))
        return EvalResult(metrics, samples)

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from evalkit.stats.tests import proportion

        out: dict[str, Any] = {f"consistency.{key}": raw[key]
                               for key in ("disagree_rate", "disagree", "n", "diverge_at_median")}
        if raw.get("n"):
            p = proportion(raw["disagree"], raw["n"])
            out["consistency.disagree_rate_ci95"] = [p.low, p.high]
        return out


EVAL = registry.register(Consistency())
