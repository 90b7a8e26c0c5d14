"""The PD router's `--shared-storage` mode, for real vLLM workers joined by ExampleConnector's shared
folder (docs/engines.md): ready at `/health` alone, no `kv_transfer_params` handshake, the prompt
to the prefill worker with `max_tokens` 1 and the client's request unchanged to the decode worker.
The workers here are stand-ins that serve only what vLLM 0.32.0 serves (no `/kv_transfer_info`)
and record what they are sent; in this process, nothing started."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evalkit.sim.router import Router, build_parser
from tests.helpers.served import served_app


def vllm_like(name: str, seen: list[dict[str, Any]]) -> Starlette:
    """A worker with vLLM's `/health` and `/v1/completions` only, answering no kv_transfer_params."""

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({})

    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        return JSONResponse({"choices": [{"index": 0, "text": f"{name}:{body['prompt']}", "finish_reason": "stop"}],
                             "kv_transfer_params": None})

    return Starlette(routes=[Route("/health", health), Route("/v1/completions", completions, methods=["POST"])])


@contextlib.contextmanager
def pair(shared_storage: bool) -> Iterator[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    to_prefill: list[dict[str, Any]] = []
    to_decode: list[dict[str, Any]] = []
    with (served_app(vllm_like("prefill", to_prefill)) as prefill, served_app(vllm_like("decode", to_decode)) as decode,
          served_app(Router([prefill], [decode], shared_storage=shared_storage).app) as router):
        yield router, to_prefill, to_decode


def test_shared_storage_relays_the_prompt_then_the_clients_request_unchanged() -> None:
    request = {"model": "m", "prompt": "Question: 2 + 2?\nAnswer:", "max_tokens": 64, "temperature": 0,
               "stop": ["Question:"], "stream": False}
    with pair(shared_storage=True) as (router, to_prefill, to_decode):
        assert httpx.get(f"{router}/health").status_code == 200
        answer = httpx.post(f"{router}/v1/completions", json=request)
        assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == "decode:" + request["prompt"]
    assert to_prefill == [{**request, "max_tokens": 1, "stream": False}]  # no kv_transfer_params asked
    assert to_decode == [request]
    assert build_parser().parse_args(["--pd-disaggregation", "--shared-storage", "--prefill", "http://a",
                                      "--decode", "http://b"]).shared_storage


def test_without_it_workers_that_serve_no_kv_transfer_info_are_never_ready() -> None:
    with pair(shared_storage=False) as (router, to_prefill, _):
        health = httpx.get(f"{router}/health")
        assert health.status_code == 503 and set(health.json()["workers"].values()) == {"unreachable: JSONDecodeError"}
        assert httpx.post(f"{router}/v1/completions", json={"prompt": "hi"}).status_code == 503
    assert to_prefill == []


def test_its_first_line_says_the_workers_are_real_and_the_simulators_router_says_simulated() -> None:
    from evalkit.sim.router import Router, banner

    real = banner(Router(["http://127.0.0.1:1"], ["http://127.0.0.1:2"], shared_storage=True))
    simulated = banner(Router(["http://127.0.0.1:1"], ["http://127.0.0.1:2"]))
    assert "SIMULATED" not in real and "real workers" in real and real.endswith("prefill http://127.0.0.1:1, decode http://127.0.0.1:2")
    assert simulated.startswith("sim-router: SIMULATED atomesh PD router, prefill http://127.0.0.1:1")
