"""``python -m evalkit.sim.router``: the PD router in front of simulated prefill and decode workers.

It takes ATOM's ``atomesh launch`` flags (atom/kv_transfer/disaggregation/README.md at ROCm/ATOM
ffdf3bb5d) and relays a request as atomesh's ATOM backend does
(atom/mesh/src/core/placement/backend/atom.rs:91-108): to a prefill worker with
``kv_transfer_params: {"do_remote_decode": true, "do_remote_prefill": false}``, ``stream`` off,
``max_tokens`` (and ``max_completion_tokens``) 1 and no ``stream_options``; then the client's own
request to a decode worker with the ``kv_transfer_params`` the prefill answered, its response (a
stream, if asked) passed back as it comes. A worker's error is passed back with its status.

Why its readiness is its own: a topology is ready only when the router can reach every worker, so
``/health`` (and every request) is 503 until each worker has answered ``/health`` 200 and
``/kv_transfer_info`` with the role it is listed under; the body names each worker's state.
After that a worker that stops answering (its port refused) makes ``/health`` 503 again, while
one too busy to answer in time stays ready, and requests are relayed (a dead worker's error is
the request's). Workers are checked when asked (a second's cache), so nothing runs between requests.
Several ``--prefill`` / ``--decode`` URLs are taken in turn.

``--shared-storage``: the workers are real vLLM servers handing KV over through a folder they
share (vLLM's ``ExampleConnector``, the one connector its CPU build can run: docs/engines.md).
Why it is this router's mode rather than a proxy of its own: the relay is the same (the prompt
to the prefill worker with ``max_tokens`` 1, then the whole request to the decode worker, as vLLM's
disaggregated examples drive a pair); only the handshake differs. vLLM 0.32.0 serves no
``/kv_transfer_info``, so a worker is ready at ``/health`` alone, and ExampleConnector answers
no ``kv_transfer_params`` (it keeps the base ``request_finished``, kv_connector/v1/base.py:616-635),
so no ``kv_transfer_params`` are sent and the decode worker gets the client's request unchanged:
it finds the prompt's KV in the folder by the hash of its tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from evalkit.sim.disagg import KvRole
from evalkit.sim.openai import error_body

CHECK_TTL_S = 1.0
"""How long a readiness check of the workers holds."""
CHECK_TIMEOUT_S = 5.0
BUSY = "ready (busy: its /health was slow)"
EXIT_CONFIG = 2
EXIT_BIND = 1
_PASSED_HEADERS = ("content-type",)


@dataclass(frozen=True)
class Worker:
    """One worker the router sends to, and the role it must report."""

    url: str
    role: KvRole


class Router:
    """The router's ASGI app (``app``) over its workers."""

    def __init__(self, prefill: Sequence[str], decode: Sequence[str], shared_storage: bool = False) -> None:
        self.shared_storage = shared_storage
        self.workers = [Worker(u.rstrip("/"), "kv_producer") for u in prefill] + [
            Worker(u.rstrip("/"), "kv_consumer") for u in decode]
        self._turns = {role: itertools.cycle([w for w in self.workers if w.role == role])
                       for role in ("kv_producer", "kv_consumer")}
        self._client: httpx.AsyncClient | None = None
        self._checked: tuple[float, dict[str, str]] = (float("-inf"), {})
        self._seen_ready = False
        self.app = Starlette(routes=[
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.completions, methods=["POST"]),
            *(Route(path, self.from_decode, methods=["GET"]) for path in ("/version", "/metrics", "/sim/stats")),
        ])

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:  # made in the serving loop, on first use
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0))
        return self._client

    async def states(self) -> dict[str, str]:
        """Each worker's state: ``ready`` or why not (cached CHECK_TTL_S)."""
        at, states = self._checked
        if time.monotonic() - at < CHECK_TTL_S:
            return states
        found = await asyncio.gather(*(self._state(w) for w in self.workers))
        states = {w.url: state for w, state in zip(self.workers, found, strict=True)}
        self._checked = (time.monotonic(), states)
        self._seen_ready = self._seen_ready or all(state == "ready" for state in states.values())
        return states

    async def _state(self, worker: Worker) -> str:
        try:
            health = await self.client.get(f"{worker.url}/health", timeout=CHECK_TIMEOUT_S)
            if health.status_code != 200:
                return f"/health answered {health.status_code}"
            if self.shared_storage:
                return "ready"
            info = (await self.client.get(f"{worker.url}/kv_transfer_info", timeout=CHECK_TIMEOUT_S)).json()
        except httpx.TimeoutException as error:
            return BUSY if self._seen_ready else f"unreachable: {type(error).__name__}"
        except (httpx.HTTPError, ValueError) as error:
            return f"unreachable: {type(error).__name__}"
        role = info.get("kv_role") if isinstance(info, dict) else None
        return "ready" if role == worker.role else f"kv_role is {role}, listed as {worker.role}"

    async def ready(self) -> bool:
        """Whether requests are relayed: once every worker has been seen ready."""
        if not self._seen_ready:
            await self.states()
        return self._seen_ready

    async def health(self, _: Request) -> Response:
        states = await self.states()
        ok = self._seen_ready and all(state in ("ready", BUSY) for state in states.values())
        return JSONResponse({"status": "ok" if ok else "waiting for workers", "workers": states},
                            status_code=200 if ok else 503)

    async def models(self, request: Request) -> Response:
        """The decode worker's model list, each card marked as served through this router."""
        if not await self.ready():
            return _error("the router has not seen every worker ready", 503)
        response = await self.client.get(f"{next(self._turns['kv_consumer']).url}/v1/models")
        body = response.json()
        for card in body.get("data", []):
            card["router"] = "evalkit.sim.router"
        return JSONResponse(body, status_code=response.status_code)

    async def from_decode(self, request: Request) -> Response:
        """/version, /metrics, /sim/stats: the decode worker's, which generates every token."""
        try:
            response = await self.client.get(f"{next(self._turns['kv_consumer']).url}{request.url.path}")
        except httpx.HTTPError as error:
            return _error(f"decode worker unreachable: {type(error).__name__}", 502)
        return Response(response.content, status_code=response.status_code,
                        media_type=response.headers.get("content-type"))

    async def completions(self, request: Request) -> Response:
        if not await self.ready():
            return _error("the router has not seen every worker ready", 503)
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError as error:
            return _error(f"invalid JSON body: {error}", 400)
        if not isinstance(body, dict):
            return _error("request body must be a JSON object", 400)
        path = request.url.path
        handshake = {} if self.shared_storage else {
            "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}
        prefill = {**body, **handshake, "stream": False, "max_tokens": 1}
        if "max_completion_tokens" in prefill:
            prefill["max_completion_tokens"] = 1
        prefill.pop("stream_options", None)
        try:
            first = await self.client.post(f"{next(self._turns['kv_producer']).url}{path}", json=prefill)
        except httpx.HTTPError as error:
            return _error(f"prefill worker unreachable: {type(error).__name__}: {error}", 502)
        if first.status_code != 200:
            return Response(first.content, status_code=first.status_code, media_type="application/json")
        if self.shared_storage:
            decode = body
        else:
            params = first.json().get("kv_transfer_params")
            if not isinstance(params, dict):
                return _error("the prefill worker answered no kv_transfer_params (is it a kv_producer?)", 502)
            decode = {**body, "kv_transfer_params": params}
        url = f"{next(self._turns['kv_consumer']).url}{path}"
        try:
            sent = self.client.build_request("POST", url, json=decode)
            response = await self.client.send(sent, stream=True)
        except httpx.HTTPError as error:
            return _error(f"decode worker unreachable: {type(error).__name__}: {error}", 502)
        headers = {k: v for k, v in response.headers.items() if k.lower() in _PASSED_HEADERS}
        return StreamingResponse(_relay(response), status_code=response.status_code, headers=headers)


async def _relay(response: httpx.Response) -> AsyncIterator[bytes]:
    """The decode worker's body as it comes; its connection closed however the client leaves."""
    try:
        async for piece in response.aiter_raw():
            yield piece
    finally:
        await response.aclose()


def _error(message: str, status: int) -> JSONResponse:
    kinds = {400: "BadRequestError", 502: "BadGatewayError", 503: "ServiceUnavailableError"}
    return JSONResponse(error_body(message, kinds.get(status, "Error"), status), status_code=status)


def build_parser() -> argparse.ArgumentParser:
    """atomesh launch's flags as ATOM's recipe passes them; only PD routing is simulated."""
    parser = argparse.ArgumentParser(prog="python -m evalkit.sim.router", allow_abbrev=False,
                                     description="Simulated atomesh PD router (evalkit's simulator): relays "
                                                 "each request to a prefill then a decode worker.")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (0: any free port)")
    parser.add_argument("--pd-disaggregation", action="store_true", required=True,
                        help="route prefill and decode to separate workers (the only mode simulated)")
    parser.add_argument("--prefill", action="append", nargs="+", required=True, metavar="URL",
                        help="a prefill worker (repeatable; a bootstrap port after the URL is accepted, unused)")
    parser.add_argument("--decode", action="append", nargs="+", required=True, metavar="URL",
                        help="a decode worker (repeatable)")
    for flag in ("--policy", "--backend", "--log-level"):
        parser.add_argument(flag, help="accepted, not simulated")
    parser.add_argument("--shared-storage", action="store_true",
                        help="the workers hand KV over through a shared folder (vLLM's ExampleConnector): "
                             "ready at /health alone, no kv_transfer_params handshake")
    for flag in ("--disable-health-check", "--disable-circuit-breaker"):
        parser.add_argument(flag, action="store_true", help="accepted, not simulated")
    return parser


def _urls(groups: list[list[str]], flag: str) -> list[str]:
    urls = []
    for group in groups:
        url, *rest = group
        if not url.startswith(("http://", "https://")) or any(not r.isdigit() for r in rest) or len(rest) > 1:
            raise ValueError(f"{flag} {' '.join(group)}: expected URL [BOOTSTRAP_PORT]")
        urls.append(url)
    return urls


def banner(router: Router) -> str:
    """The router's first line: what it is, and its workers. In front of the simulator's workers
    it is the SIMULATED atomesh router; with ``--shared-storage`` the workers are real engines
    whose answers it relays unchanged, and it says so rather than calling their answers simulated."""
    what = ("PD router relaying to real workers joined by a shared KV folder (--shared-storage)"
            if router.shared_storage else "SIMULATED atomesh PD router")
    urls = {role: ", ".join(w.url for w in router.workers if w.role == role) for role in ("kv_producer", "kv_consumer")}
    return f"sim-router: {what}, prefill {urls['kv_producer']}, decode {urls['kv_consumer']}"


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, bind, print the ready line and serve until stopped; the exit code."""
    args = build_parser().parse_args(argv)
    try:
        router = Router(_urls(args.prefill, "--prefill"), _urls(args.decode, "--decode"), args.shared_storage)
    except ValueError as error:
        print(f"python -m evalkit.sim.router: error: {error}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    import uvicorn  # deferred: --help and flag errors stay instant

    from evalkit.sim.process import bind

    try:
        sock = bind(args.host, args.port)
    except OSError as error:
        print(f"evalkit.sim.router: error: cannot bind {args.host}:{args.port}: {error}", file=sys.stderr, flush=True)
        return EXIT_BIND
    host, port = sock.getsockname()[:2]
    print(banner(router), flush=True)

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                print(f"sim-router: ready on http://{host}:{port}", flush=True)

    _Server(uvicorn.Config(router.app, log_level="warning", access_log=False, lifespan="off",
                           timeout_graceful_shutdown=1)).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
