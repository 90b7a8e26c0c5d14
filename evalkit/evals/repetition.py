"""The long-generation collapse check: greedy, long, streamed, scanned as it arrives.

Each prompt of a shipped, versioned prompt set is sent with temperature 0 and a large
`max_tokens` (short limits missed the real bugs). The stream is fed to the detector as it comes;
once a sample is clearly collapsed the request is closed, which stops the engine generating it
(the verdict is the same as letting it run to `max_tokens`, at a fraction of the engine time).

Token ids come from the server when its profile says it returns them (vLLM's
`return_tokens_as_token_ids`, or `return_token_ids`: evalkit/wire.py); otherwise the text is split
without a tokenizer. The results say which. The loop rules read the ids; stutter and soup always
read the streamed text, split the same way on both kinds of engine (a chunk's ids come with its
`text`), so an id-streaming engine and a text-only one judge the same output alike. Finish reasons are judged in evalkit's canonical terms,
through the engine's map (`EvalContext.wire`). Each generation is then scored under the cell's own
engine, one teacher-forced request, and the model's signal joins the text rules in the verdict
(evals/model_signal.py): a sample's `collapse_signals` say which fired.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import Field

from evalkit import fastjson
from evalkit.errors import EvalError, StreamBroken
from evalkit.evals import cancel, model_signal, registry
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
    StopWhen,
    setup_fingerprint,
)
from evalkit.evals.detector import DetectorSettings, StreamingDetector, analyze_text, is_text_collapsed, split_text
from evalkit.evals.http_client import Bounded, Tries, pooled_client, with_retries
from evalkit.evals.model_signal import ModelSignalSettings
from evalkit.evals.prompts import Prompt, load_prompt_set
from evalkit.evals.sse import StreamErrorEvent, error_event, sse_data, token_ids
from evalkit.store.files import read_jsonl
from evalkit.wire import TokenIdsRequest, Wire

FEED_BATCH = 64
"""Token ids per detector call: the detector looks every 64 tokens anyway (check_every)."""


class RepetitionSettings(EvalSettings):
    """Long greedy generations scanned for repeated-token collapse."""

    prompt_set: str = "long_generation_v1"
    count: int | None = Field(None, ge=1, description="First N prompts of the set; default: all.")
    max_tokens: int = Field(4096, ge=16, description="Long limits matter: 4096 often missed real bugs.")
    concurrency: int = Field(16, ge=1)
    endpoint: Literal["completions", "chat"] = "completions"
    early_abort: bool = Field(True, description="Stop a stream once it is clearly collapsed.")
    order_seed: int = Field(0, description="Seed of the order the prompts are submitted and judged in "
                            "(`submission_order`): a cell that stops early has judged a random part of the set.")
    timeout: float = Field(1800.0, gt=0, description="Per-request seconds.")
    detector: DetectorSettings = Field(default_factory=DetectorSettings)
    model_signal: ModelSignalSettings = Field(default_factory=ModelSignalSettings)


def ids_request(settings: RepetitionSettings, wire: Wire) -> TokenIdsRequest | None:
    """How this eval's streams ask for token ids, if at all. SGLang 0.5.23 refuses
    `return_token_ids` on a chat stream (entrypoints/openai/serving_chat.py:1315-1320), so chat
    through such an engine splits text."""
    if settings.endpoint == "chat" and wire.token_ids == "return_token_ids":
        return None
    return wire.token_ids


@dataclass(frozen=True)
class _Asking:
    """How every prompt of one run is asked: the settings, the server, and how (if at all) the
    stream carries token ids, decided once per run (`ids_request`)."""

    settings: RepetitionSettings
    server: Server
    ids_via: TokenIdsRequest | None

    @classmethod
    def of(cls, settings: RepetitionSettings, server: Server) -> _Asking:
        return cls(settings, server, ids_request(settings, server.wire))


async def _stream(
    client: httpx.AsyncClient, asking: _Asking, prompt: str
) -> AsyncIterator[tuple[str, list[int] | None, str | None]]:
    """Yield (text delta, its token ids if asked for, raw finish_reason) per choice of each SSE
    event of one generation; raise `StreamErrorEvent` on an error event."""
    settings, ids_via = asking.settings, asking.ids_via
    if settings.endpoint == "completions":
        url = "/v1/completions"
        body: dict[str, Any] = {"prompt": prompt}
        if ids_via == "return_tokens_as_token_ids":
            body |= {"logprobs": 1, "return_tokens_as_token_ids": True}
    else:
        url = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": prompt}]}
        if ids_via == "return_tokens_as_token_ids":
            body |= {"logprobs": True, "return_tokens_as_token_ids": True}
    if ids_via == "return_token_ids":
        body["return_token_ids"] = True
    body |= {"model": asking.server.served_name, "max_tokens": settings.max_tokens, "temperature": 0, "stream": True}
    async with client.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            raise httpx.HTTPStatusError(f"HTTP {response.status_code}", request=response.request, response=response)
        async for data in sse_data(response):
            if data == b"[DONE]":
                return
            chunk = fastjson.loads(data)
            if (error := error_event(chunk)) is not None:
                raise error
            for choice in chunk.get("choices") or []:
                if settings.endpoint == "completions":
                    text = choice.get("text") or ""
                    pieces = ((choice.get("logprobs") or {}).get("tokens")) or []
                else:
                    text = (choice.get("delta") or {}).get("content") or ""
                    pieces = [t["token"] for t in ((choice.get("logprobs") or {}).get("content") or [])]
                if ids_via == "return_token_ids":
                    ids = choice.get("token_ids")
                else:
                    ids = token_ids(pieces) if ids_via else None
                yield text, ids, choice.get("finish_reason")
    raise StreamBroken("stream ended without [DONE]")


async def _generate(client: httpx.AsyncClient, asking: _Asking, item: Prompt) -> dict[str, Any]:
    """One prompt: stream, detect, maybe abort early.

    Transient failures (connection errors, 429/5xx, a stream cut before `[DONE]` or ended by an
    error event, a broken chunk) restart the prompt from scratch with backoff (`with_retries`):
    greedy decoding regenerates the same text, and `attempts` and `stream_errors` record that it
    happened.
    Other HTTP errors fail at once; so does a transient failure still there after MAX_ATTEMPTS,
    with the engine's own message, so a failed stream is never judged as a (truncated) sample.

    The finish reason is the choice's first non-null one: ATOM follows the real last chunk with
    an empty chunk saying "stop" (atom/entrypoints/openai/serving_completion.py at 0e9804c21,
    `stream_completion_response`), which must not turn a cut into a natural end. It is judged
    in the engine's canonical terms (`wire.finish`); the sample keeps the raw one too.
    """
    settings, ids_via, wire = asking.settings, asking.ids_via, asking.server.wire

    async def ask(tries: Tries) -> dict[str, Any]:
        detector = StreamingDetector(settings.detector)
        pending: list[int] = []  # ids are fed in batches: one detector call per FEED_BATCH tokens
        pending_text: list[str] = []  # with the text of those ids, for stutter and soup
        text_parts: list[str] = []
        raw_reason: str | None = None
        aborted = False
        source = "token_ids" if ids_via else "text_split"
        async for text, ids, reason in _stream(client, asking, item.prompt):
            text_parts.append(text)
            if ids_via and ids is None and text:
                raise EvalError(f"repetition: prompt {item.id}: the server sent no token ids "
                                "although its profile says it returns them")
            if ids is not None:
                pending += ids
                pending_text.append(text)
                collapsed = False
                if len(pending) >= FEED_BATCH:
                    collapsed = detector.feed(pending, text="".join(pending_text))
                    pending, pending_text = [], []
            else:
                collapsed = detector.feed_text(text) if text else False
            raw_reason = raw_reason or reason
            if collapsed and settings.early_abort:
                aborted = True
                break
        else:
            if ids_via:
                detector.feed(pending, text="".join(pending_text))
        finish_reason = "aborted" if aborted else wire.finish(raw_reason)
        analysis = detector.finish(finish_reason)
        text = "".join(text_parts)
        # Token-id evidence shows ids; for a reader, the same verdict's evidence as text.
        text_evidence = (dataclasses.asdict(analyze_text(text, finish_reason=finish_reason,
                                                        settings=settings.detector).evidence)
                         if analysis.collapsed and ids_via else None)
        return {
            "id": item.id,
            "kind": item.kind,
            "token_source": source,
            "attempts": tries.attempt,
            "stream_errors": sum(isinstance(e, StreamErrorEvent) for e in tries.failed),
            "finish_reason": finish_reason,
            "engine_finish_reason": raw_reason,
            "collapsed": analysis.collapsed,
            **analysis.to_dict(),
            "text_evidence": text_evidence,
            "text": text,
        }

    sample = await with_retries(ask, f"repetition: prompt {item.id}")
    return sample | {"model_signal": await model_signal.score(client, asking.server, item, sample["text"],
                                                              settings.model_signal, settings.endpoint)}


def select_prompts(prompts: Sequence[Prompt], only: Sequence[str] | None) -> list[Prompt]:
    """The prompts with these ids, in the order given (all when None); an unknown id is an EvalError."""
    if only is None:
        return list(prompts)
    by_id = {item.id: item for item in prompts}
    if missing := [pid for pid in only if pid not in by_id]:
        raise EvalError(f"repetition: prompt {missing[0]!r} is not in the prompt set")
    return [by_id[pid] for pid in dict.fromkeys(only)]


def submission_order(items: Sequence[Prompt], seed: int) -> list[Prompt]:
    """The order a run submits (and judges) its prompts: the set's, shuffled by `seed`, so a
    stopping rule's prefix is a random sample of the set, the same in every cell."""
    order = list(items)
    random.Random(f"{seed}:repetition").shuffle(order)
    return order


async def _run_all(asking: _Asking, progress: Callable[[int, int], None] | None, only: Sequence[str] | None,
                   stop_when: StopWhen | None) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Every prompt's sample in the set's order, and, when `stop_when` stopped the run, at what
    point and why (the samples are then those of the judged prefix of the submission order)."""
    settings = asking.settings
    prompt_set = load_prompt_set(settings.prompt_set)
    items = select_prompts(prompt_set.prompts[: settings.count], only)
    order = items if only is not None else submission_order(items, settings.order_seed)  # a step's batch: its order
    async with pooled_client(asking.server, settings.concurrency, settings.timeout) as client:

        async def one(item: Prompt) -> dict[str, Any]:
            return await _generate(client, asking, item)

        bounded = Bounded(one, settings.concurrency, len(items), progress)
        if stop_when is None:
            samples, why = await bounded.map(order), None
        else:
            samples, why = await bounded.judged(order, stop_when)
    place = {item.id: index for index, item in enumerate(items)}
    samples.sort(key=lambda row: place[row["id"]])
    return samples, None if why is None else {"at": len(samples), "of": len(items), "why": why}


def run_repetition(
    settings: RepetitionSettings, server: Server, progress: Callable[[int, int], None] | None = None,
    only: Sequence[str] | None = None, stop_when: StopWhen | None = None,
) -> EvalResult:
    """Generate the prompt set (or just the prompts `only` names) on a running server and judge
    every sample, in the server's dialect (`server.wire`: its finish reasons, its token ids).

    `stop_when`: the cell's stopping rule (run/stopping.py), asked after each sample that extends
    the judged prefix of the submission order (`submission_order`); when it stops the run, the
    samples are that prefix and `metrics["stopped"]` says at what point and why. It reads the
    text rules' verdicts; the model's signal, judged after, can only add collapses."""
    prompt_set = load_prompt_set(settings.prompt_set)
    asking = _Asking.of(settings, server)
    samples, stopped = cancel.run(_run_all(asking, progress, only, stop_when))
    metrics = {
        "model_signal": model_signal.judge(samples, settings.model_signal),
        **_counts(samples),
        "prompt_set": prompt_set.id,
        "prompt_set_version": prompt_set.version,
        "max_tokens": settings.max_tokens,
        "token_source": "token_ids" if asking.ids_via else "text_split",
    }
    if stopped is not None:
        metrics["stopped"] = stopped
    metrics[SETUP_KEY] = setup_fingerprint(setup_fields(settings, prompt_set.version, asking.ids_via is not None))
    return EvalResult(metrics, samples)


def _counts(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """What the collapse metrics count over the samples."""
    n = len(samples)
    collapsed = sum(1 for s in samples if s["collapsed"])
    return {"collapse_rate": collapsed / n if n else None, "collapsed": collapsed, "n": n,
            "aborted_early": sum(1 for s in samples if s.get("finish_reason") == "aborted"),
            "hit_max_tokens": sum(1 for s in samples if s.get("finish_reason") == "length"),
            "stream_errors": sum(s.get("stream_errors", 0) for s in samples)}


def combine(parts: list[EvalResult]) -> EvalResult:
    """Runs on disjoint prompt subsets as one run over all their prompts (the setup of the first)."""
    samples = [row for part in parts for row in part.samples]
    metrics = {key: value for key, value in parts[0].metrics.items() if not key.endswith("_responses")}  # one part's scan
    if "model_signal" in metrics:  # the reference is every part's healthy samples
        rule = ModelSignalSettings(**metrics["model_signal"]["settings"])
        metrics["model_signal"] = model_signal.judge(samples, rule)
    metrics |= {**_counts(samples), "parts": [part.metrics["n"] for part in parts]}
    return EvalResult(metrics, samples)


def setup_fields(settings: RepetitionSettings, prompt_set_version: str, token_ids: bool) -> dict[str, Any]:
    """What a collapse rate depends on besides the engine: the prompts, how long and through which
    endpoint they are generated, what the detector reads (ids or split text) and its rules.

    Not in it: `count` (like `limit`), concurrency, timeouts, and `early_abort` (the verdict is the
    same with or without it, by construction).
    """
    return {
        "prompt_set": settings.prompt_set,
        "prompt_set_version": prompt_set_version,
        "max_tokens": settings.max_tokens,
        "endpoint": settings.endpoint,
        "token_source": "token_ids" if token_ids else "text_split",
        "detector": settings.detector.model_dump(mode="json"),
        "model_signal": settings.model_signal.model_dump(mode="json"),
    }


def scan_texts(texts: list[str], finish_reasons: list[str | None], settings: RepetitionSettings) -> dict[str, Any]:
    """The detector over already generated text (e.g. every GSM8K answer): free extra evidence
    (loops, and the stutter and soup that only the text shows)."""
    flagged = [
        i for i, (t, r) in enumerate(zip(texts, finish_reasons))
        if is_text_collapsed(t, finish_reason=r, settings=settings.detector)
    ]
    return {"n": len(texts), "collapsed": len(flagged), "collapsed_ids": flagged[:50]}


def new_collapses(cell_dir: Path, ref_dir: Path, samples_file: str, limit: int = 50) -> list[dict[str, Any]]:
    """Prompts collapsed in the cell but not in the reference, with the first token where the
    two greedy outputs diverge: what the reference did instead, and how early the cell left it."""

    def rows(d: Path, keep: Any) -> dict[str, dict[str, Any]]:
        path = d / samples_file  # streamed: only the rows needed are kept
        return {row["id"]: row for row in read_jsonl(path) if keep(row)} if path.is_file() else {}

    cell = rows(cell_dir, lambda row: bool(row.get("collapsed")))
    ref = rows(ref_dir, lambda row: row["id"] in cell) if cell else {}
    out = []
    for prompt_id, row in cell.items():
        other = ref.get(prompt_id)
        if other is None or other.get("collapsed"):
            continue
        a, b = split_text(row.get("text", "")), split_text(other.get("text", ""))
        n = min(len(a), len(b))
        mismatch = (a[:n] != b[:n]).nonzero()[0]
        diverge = int(mismatch[0]) if len(mismatch) else n
        out.append({"id": prompt_id, "diverge_at_token": diverge, "onset": (row.get("evidence") or {}).get("onset")})
        if len(out) == limit:
            break
    return out


def _k_of_n(flat: Mapping[str, Any]) -> str:
    rate = flat.get("repetition.collapse_rate")
    if rate is None:
        return "-"
    return f"{rate:.3f} ({flat.get('repetition.collapsed')}/{flat.get('repetition.n')})"


class Repetition(Eval):
    """Long generations judged by the repeated-token collapse detector; runs subsets (`Subsets`),
    a comparison names the new collapses (`ExtraDelta`), it scans the other evals' answers
    (`ScansEarlierTexts`), and a cell that stopped it early says so (`CellFlags`)."""

    name = "repetition"
    settings_model = RepetitionSettings
    wave_first = True
    metrics = (
        MetricSpec("repetition.collapse_rate", Comparison.COUNT,
                   MetricDisplay("collapse rate", key="collapse", column="collapse rate (k/n)", text=_k_of_n,
                                 delta_label="collapse", pivot="Collapse rate (k/n) by configuration",
                                 details=Evidence.EVENTS, event_words="long generations collapsed"),
                   higher_is_better=False, count_metric="repetition.collapsed", n_metric="repetition.n",
                   event_field="collapsed"),
        model_signal.SPEC,
    )
    display = EvalDisplay(title="long-generation collapse", csv_fields=(
        "repetition.collapse_rate", "repetition.collapsed", "repetition.n", "repetition.collapse_rate_ci95"))

    def run(self, ctx: EvalContext, settings: RepetitionSettings) -> EvalResult:
        if ctx.limit is not None and ctx.only is None:
            settings = settings.model_copy(update={"count": min(settings.count or ctx.limit, ctx.limit)})
        result = run_repetition(settings, ctx.server, ctx.progress, ctx.only, ctx.stop_when)
        self.scan_earlier(result, ctx.earlier, settings)
        return result

    def scan_earlier(self, result: EvalResult, earlier: Mapping[str, EvalResult], settings: RepetitionSettings) -> None:
        """Free extra evidence: the detector over every answer the cell's other evals generated."""
        for name, other in earlier.items():
            if other.texts:
                texts, reasons = zip(*other.texts)
                result.metrics[f"{name}_responses"] = scan_texts(list(texts), list(reasons), settings)

    def combine(self, parts: list[EvalResult]) -> EvalResult:
        return combine(parts)

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        from evalkit.stats.tests import proportion

        out: dict[str, Any] = {"repetition.collapse_rate": raw["collapse_rate"], "repetition.n": raw["n"],
                               "repetition.collapsed": raw["collapsed"]}
        out |= model_signal.flat(raw)
        if raw.get("n"):
            p = proportion(raw["collapsed"], raw["n"])
            out["repetition.collapse_rate_ci95"] = [p.low, p.high]
        return out

    def absent(self, raw: Mapping[str, Any]) -> dict[str, str]:
        return model_signal.absent(raw)

    def cell_flags(self, record: Mapping[str, Any], row: Mapping[str, Any],
                   baseline: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """A cell whose long generations stopped early says so, with what decided it (`CellFlags`)."""
        stopped = ((record.get("metrics") or {}).get(self.name) or {}).get("stopped")
        if not stopped:
            return []
        return [{"metric": "repetition.collapse_rate", "check": "stopped", "action": "warn",
                 "message": f"{row['id']}: long generations stopped at {stopped['at']} of {stopped['of']}: "
                            f"{stopped['why']}"}]

    def extra_delta(self, metric: MetricSpec, cell_dir: Path, ref_dir: Path) -> dict[str, Any]:
        return {"new_collapses": new_collapses(cell_dir, ref_dir, self.samples_file)}


EVAL = registry.register(Repetition())
