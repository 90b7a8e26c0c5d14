"""The simulator's HTTP app (Starlette): health, models, completions, chat, stats, version, metrics.

One process, one event loop: a completion is computed in microseconds, so the server's cost
is HTTP handling, and concurrency only matters for paced (``--sim-tokens-per-second``)
streams, which ``asyncio.sleep`` between events. A streaming client that disconnects makes
Starlette cancel the stream at its next ``await``: generation stops at once, and
``/sim/stats`` shows both the tokens really produced and the aborted streams, so a test can
prove that an early abort saves engine work. ``/version`` and ``/metrics`` report what vLLM's
do (evalkit/sim/reports.py), counted at the same places as those stats. In ATOM's dialect
(``--sim-dialect atom``, evalkit/sim/atom_wire.py) requests are validated, answered and streamed
as ATOM does, and neither endpoint exists.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from evalkit import fastjson
from evalkit.sim import atom_wire, disagg, openai
from evalkit.sim.batching import Slot, Steps
from evalkit.sim.config import ServerConfig
from evalkit.sim.disagg import KvDamage, KvStore, TransferError
from evalkit.sim.faults import FaultState
from evalkit.sim.logprobs import Scorer
from evalkit.sim.model import LONG_GENERATION, Generation, SimulatedModel
from evalkit.sim.mtp import MtpLog
from evalkit.sim.openai import BadRequest, CompletionRequest, Json, Scores, error_body
from evalkit.sim.ranks import RankGroup
from evalkit.sim.reports import EngineMetrics
from evalkit.sim.tokens import tokenize

COALESCE = 16
"""Tokens per SSE event when decoding is unthrottled (fewer events, faster streams)."""
EVENTS_PER_SECOND = 100
"""Upper bound on events per paced stream: above it, events carry several tokens."""
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
}


@dataclass
class Stats:
    """Engine-side work counters, served at ``GET /sim/stats`` with the request count.

    ``requests`` (kept by the fault state, which trips on it) counts completion requests
    that got past the readiness gate, bad ones included; warm-up 503s are not counted.
    """

    completion_tokens_generated: int = 0
    aborted_streams: int = 0
    stream_errors: int = 0
    """Streams ended by the stream-error fault's error event."""


def _error(message: str, status: int, param: str | None = None) -> JSONResponse:
    kind = _ERROR_TYPES.get(status, "Error")
    return JSONResponse(error_body(message, kind, status, param), status_code=status)


class Simulator:
    """Request handling for one simulated engine; ``app`` is its ASGI application."""

    def __init__(self, config: ServerConfig, model: SimulatedModel, faults: FaultState,
                 ranks: RankGroup | None = None) -> None:
        """``ranks``: rank 0's group of a multi-node engine (evalkit/sim/ranks.py), which gates serving."""
        self.config = config
        self.model = model
        self.faults = faults
        self.ranks = ranks
        self.stats = Stats()
        self.scorer = Scorer(config.behaviour, config.cell)
        self.damaged_scorer = Scorer(config.behaviour, config.cell, damaged=True)
        self.kv_store = KvStore()
        self._client: httpx.AsyncClient | None = None
        self.steps = Steps()
        self.atom = config.dialect == "atom"
        spec = config.reports.spec_tokens
        cell = config.cell
        mtp = MtpLog(spec, config.reports.spec_acceptance, cell.tp * cell.dp if cell.dp_attention else cell.dp,
                     config.behaviour.seed) if self.atom and spec > 0 else None
        self.metrics = EngineMetrics(config.served_model_name, config.reports, mtp)
        self._model_names = (config.served_model_name, config.model)
        self._ready_at = float("inf")
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/sim/stats", self.sim_stats, methods=["GET"]),
            Route("/kv_transfer_info", self.kv_transfer_info, methods=["GET"]),
        ]
        if config.kv and config.kv.role == "kv_producer":
            routes.append(Route("/kv/{transfer_id}", self.kv_payload, methods=["GET"]))
        if not self.atom:  # ATOM at 0e9804c21 serves neither
            routes += [Route("/version", self.version, methods=["GET"]),
                       Route("/metrics", self.prometheus, methods=["GET"])]
        self.app = Starlette(routes=routes)

    def start_serving(self) -> None:
        """Called once the port is bound: the warm-up period starts now."""
        self._ready_at = time.monotonic() + self.config.timing.warmup_seconds

    async def health(self, _: Request) -> Response:
        await self.faults.stall_if_stalled()
        if self.faults.never_ready:
            return JSONResponse({"status": "unavailable"}, status_code=503)
        if self.ranks is not None and not self.ranks.ready:
            return JSONResponse({"status": "waiting for ranks", "nnodes": self.ranks.ranks.nnodes,
                                 "joined": self.ranks.joined}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def kv_transfer_info(self, _: Request) -> Response:
        """ATOM's body (atom/entrypoints/openai/api_server.py:1948 at ffdf3bb5d): the role a router reads."""
        await self.faults.stall_if_stalled()
        kv, cell = self.config.kv, self.config.cell
        return JSONResponse({"tp_size": cell.tp, "dp_size": cell.dp, "kv_role": kv.role if kv else None,
                             "handshake_port": kv.handshake_port if kv else None})

    async def kv_payload(self, request: Request) -> Response:
        """A kept KV state, once: what a decode worker pulls (evalkit/sim/disagg.py)."""
        await self.faults.stall_if_stalled()
        payload = self.kv_store.take(request.path_params["transfer_id"])
        if payload is None:
            return _error(f"no KV state kept for transfer {request.path_params['transfer_id']}", 404)
        return Response(payload, media_type="application/octet-stream")

    async def models(self, _: Request) -> Response:
        await self.faults.stall_if_stalled()
        config, cell = self.config, self.config.cell
        card = {
            "id": config.served_model_name,
            "object": "model",
            "created": 0,
            "owned_by": "evalkit-simulator",
            "root": config.model,
            "simulator": True,
            "max_model_len": config.max_model_len,
            "settings": {
                "tp": cell.tp,
                "dp": cell.dp,
                "dp_attention": cell.dp_attention,
                "expert_parallel": cell.expert_parallel,
                "cudagraph_mode": cell.graph_mode,
                "fix": cell.fix,
                "fix_source": config.fix_source,
                "seed": config.behaviour.seed,
                **({"kv_role": config.kv.role, "kv_layout_fix": config.kv.layout_fix} if config.kv else {}),
                **({"nnodes": config.ranks.nnodes} if config.ranks.nnodes > 1 else {}),
            },
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def sim_stats(self, _: Request) -> Response:
        await self.faults.stall_if_stalled()
        return JSONResponse({"requests": self.faults.requests, **vars(self.stats)})

    async def version(self, _: Request) -> Response:
        await self.faults.stall_if_stalled()
        return JSONResponse({"version": self.config.reports.version})

    async def prometheus(self, _: Request) -> Response:
        await self.faults.stall_if_stalled()
        return Response(self.metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def completions(self, request: Request) -> Response:
        return await self._serve(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._serve(request, chat=True)

    async def _serve(self, request: Request, *, chat: bool) -> Response:
        await self.faults.stall_if_stalled()
        if self.faults.never_ready or time.monotonic() < self._ready_at:
            return _error("the engine is still starting (simulated warm-up)", 503)
        if self.ranks is not None and not self.ranks.ready:
            return _error(f"waiting for ranks: {len(self.ranks.joined)} of {self.ranks.ranks.nnodes - 1} joined", 503)
        number = self.faults.admit()
        await self.faults.stall_if_stalled()
        if self.faults.hits("http-500", number):
            return _error("simulated internal error (--sim-fault http-500)", 500)
        try:
            body = json.loads(await request.body())
            if self.atom:
                parsed = atom_wire.parse(body, chat=chat, model=self.config.model,
                                         max_model_len=self.config.max_model_len)
            else:
                parsed = openai.parse(body, chat=chat, model_names=self._model_names,
                                      max_model_len=self.config.max_model_len)
        except json.JSONDecodeError as error:
            return _error(f"invalid JSON body: {error}", 400)
        except BadRequest as error:
            if error.body is not None:
                return JSONResponse(error.body, status_code=error.status)
            return _error(error.message, error.status, error.param)
        options = parsed.options
        try:
            damages, handoff = await self._handoff(body, parsed, request.headers.get("host", ""))
        except TransferError as error:
            return _error(f"KV transfer failed: {error}", 502)
        slots = await self.steps.join(len(parsed.prompts))
        # in a worker thread: a long generation's text and scores take CPU time, and the event loop
        # must keep answering /health meanwhile, as a real engine's API server does while its engine
        # core computes (evalkit's hang watchdog would otherwise stop a busy healthy simulator)
        generations, scores = await asyncio.to_thread(self._compute, parsed, slots, damages)
        if options.stream:
            cut = next((kind for kind in ("truncated-stream", "stream-error") if self.faults.hits(kind, number)), None)
            return StreamingResponse(
                self._stream(parsed, generations, scores, cut), media_type="text/event-stream"
            )
        return await self._respond(parsed, generations, scores, number, handoff)

    async def _handoff(self, body: Any, request: CompletionRequest,
                       host: str) -> tuple[list[KvDamage | None], Json | None]:
        """A PD worker's part of the request (evalkit/sim/disagg.py): a producer keeps the prompts'
        state and returns the params that name it; a consumer fetches its state and returns how far
        each prompt's is off. A whole engine, or a request without params, prefills itself."""
        none: list[KvDamage | None] = [None] * len(request.prompts)
        params = body.get("kv_transfer_params")
        kv, cell, seed = self.config.kv, self.config.cell, self.config.behaviour.seed
        if kv is None or not isinstance(params, dict):
            return none, None
        if kv.role == "kv_producer" and params.get("do_remote_decode"):
            states = [disagg.hidden_states(p.context, seed) for p in request.prompts]
            transfer_id = self.kv_store.keep(disagg.pack(states, cell.tp))
            return none, disagg.remote_params(transfer_id, host, cell.tp, cell.dp)
        if kv.role == "kv_consumer" and params.get("do_remote_prefill"):
            if self._client is None:
                self._client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0))
            received = await disagg.receive(self._client, params, [p.context for p in request.prompts], seed,
                                            cell.tp, kv.layout_fix)
            return list(received), None
        return none, None

    def _compute(self, request: CompletionRequest, slots: list[Slot],
                 damages: list[KvDamage | None]) -> tuple[list[Generation], list[Scores | None]]:
        """Each prompt's generation and, where the request asks, its scores."""
        options = request.options
        generations = [
            self.model.generate(prompt, options.max_tokens, options.stop, slot, damage)
            for prompt, slot, damage in zip(request.prompts, slots, damages)
        ]
        return generations, [self._scores(request, i, g, d) for i, (g, d) in enumerate(zip(generations, damages))]

    def _scores(self, request: CompletionRequest, index: int, generation: Generation,
                damage: KvDamage | None = None) -> Scores | None:
        """The choice's tokens scored by this cell's model, as far as the request needs them."""
        options = request.options
        if options.logprobs is None and options.prompt_logprobs is None:
            return None
        context = tokenize(request.prompts[index].context)
        # teacher-forced prompt positions from the second token (the first has no context)
        start = min(1, len(context)) if options.scores_prompt else len(context)
        keep = max(options.logprobs or 0, options.prompt_logprobs or 0)
        scorer = self.damaged_scorer if damage and damage.share > 0 else self.scorer
        scored = scorer.score(context + generation.tokens, start, greedy_from=len(context), keep=keep)
        split = len(context) - start
        return Scores(prompt=scored[:split], generated=scored[split:])

    def _envelope(self, request: CompletionRequest, request_id: str, created: int) -> Json:
        return {
            "id": request_id,
            "object": "chat.completion" if request.chat else "text_completion",
            "created": created,
            "model": self.config.served_model_name,
        }

    async def _respond(
        self, request: CompletionRequest, generations: list[Generation], scores: list[Scores | None], number: int,
        handoff: Json | None = None,
    ) -> Response:
        timing = self.config.timing
        produced = sum(len(g.tokens) for g in generations)
        delay = timing.ttft_ms / 1000
        rate = timing.rate(request.options.max_tokens >= LONG_GENERATION)
        if rate > 0:
            delay += max(len(g.tokens) for g in generations) / rate
        if delay > 0:
            await asyncio.sleep(delay)
        self.stats.completion_tokens_generated += produced
        self.metrics.generated(produced)
        per_token = 1 / rate if rate > 0 else 0.0
        for g in generations:
            self.metrics.finished(len(g.tokens), g.finish_reason, per_token)
        prefix = "chatcmpl-" if request.chat else "cmpl-"
        body = self._envelope(request, prefix + uuid.uuid4().hex, int(time.time()))
        if self.atom:
            body["choices"] = [atom_wire.choice(request, i, g) for i, g in enumerate(generations)]
        else:
            body["choices"] = [openai.choice(request, i, g, s) for i, (g, s) in enumerate(zip(generations, scores))]
        body["usage"] = openai.usage(sum(request.prompt_tokens), produced)
        if handoff is not None:  # a producer's params for the decode side, as ATOM answers them
            body["kv_transfer_params"] = handoff
        data = fastjson.dumps(body)
        if self.faults.hits("malformed-json", number):
            text = data.decode()
            data = text[: len(text) // 2].encode()
        return Response(data, media_type="application/json")

    async def _stream(
        self,
        request: CompletionRequest,
        generations: list[Generation],
        scores: list[Scores | None],
        cut: str | None,
    ) -> AsyncIterator[bytes]:
        """SSE events for every choice in turn, paced per token, ending ``data: [DONE]``; `cut`
        (a fault) ends the stream half-way: without a word (truncated-stream) or with an error
        event and [DONE] (stream-error)."""
        timing = self.config.timing
        rate = timing.rate(request.options.max_tokens >= LONG_GENERATION)
        per_event = timing.stream_interval or (COALESCE if rate <= 0 else max(1, round(rate / EVENTS_PER_SECOND)))
        prefix = "chatcmpl-" if request.chat else "cmpl-"
        head = self._envelope(request, prefix + uuid.uuid4().hex, int(time.time()))
        head["object"] = "chat.completion.chunk" if request.chat else "text_completion"
        include_usage = request.options.include_usage
        if include_usage:
            head["usage"] = None
        loop = asyncio.get_running_loop()
        total = sum(len(g.tokens) for g in generations)
        cut_at = total // 2 if cut else total + 1
        ended = False  # by us: complete, or cut by the truncated-stream fault
        sent = 0

        def event(choice: Json) -> bytes:
            return _sse({**head, "choices": [choice]})

        try:
            if timing.ttft_ms > 0:
                await asyncio.sleep(timing.ttft_ms / 1000)
            start = loop.time()
            for index, generation in enumerate(generations):
                if request.chat:
                    yield event(atom_wire.chunk(request, index, [], None, first=True) if self.atom
                                else openai.chunk_choice(request, index, [], None, 0, None, first=True))
                tokens, offset = generation.tokens, 0
                first_at: float | None = None
                for begin in range(0, len(tokens), per_event):
                    await self.faults.stall_if_stalled()
                    piece = tokens[begin : begin + per_event]
                    if sent + len(piece) >= cut_at:
                        ended = True
                        if cut == "stream-error":
                            self.stats.stream_errors += 1
                            yield _sse(error_body("simulated generation error (--sim-fault stream-error)",
                                                  "InternalServerError", 500))
                            yield b"data: [DONE]\n\n"
                        return
                    if rate > 0:
                        await asyncio.sleep(max(0.0, start + (sent + len(piece)) / rate - loop.time()))
                    else:
                        await asyncio.sleep(0)
                    sent += len(piece)
                    self.stats.completion_tokens_generated += len(piece)
                    self.metrics.generated(len(piece))
                    first_at = loop.time() if first_at is None else first_at
                    scored = None if (score := scores[index]) is None else score.generated[begin : begin + per_event]
                    if self.atom:  # the real reason rides on the last content chunk
                        last = begin + per_event >= len(tokens)
                        yield event(atom_wire.chunk(request, index, piece,
                                                    atom_wire.last_reason(request, generation) if last else None))
                    else:
                        yield event(openai.chunk_choice(request, index, piece, scored, offset, None))
                    offset += sum(map(len, piece))
                per_token = (loop.time() - first_at) / (len(tokens) - 1) if first_at is not None and len(tokens) > 1 else None
                self.metrics.finished(len(tokens), generation.finish_reason, per_token)
                if self.atom:
                    if not tokens and not request.chat:
                        yield event(atom_wire.chunk(request, index, [], atom_wire.finish_reason(generation)))
                    yield event(atom_wire.chunk(request, index, [], "stop"))  # ATOM's extra closing chunk
                else:
                    yield event(openai.chunk_choice(request, index, [], None, offset, generation.finish_reason))
            if self.atom:  # always, with no `choices` at all
                yield _sse({**head, "usage": openai.usage(sum(request.prompt_tokens), sent)})
            elif include_usage:
                yield _sse({**head, "choices": [], "usage": openai.usage(sum(request.prompt_tokens), sent)})
            yield b"data: [DONE]\n\n"
            ended = True
        finally:
            if not ended:
                self.stats.aborted_streams += 1


def _sse(payload: Any) -> bytes:
    return b"data: " + fastjson.dumps(payload) + b"\n\n"
