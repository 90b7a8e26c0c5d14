"""The long-generation client: reading streams as servers really send them (raw bytes over a real
socket), and its verdicts against the simulator's app in this process."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest

from evalkit.evals import repetition, sse
from evalkit.evals.repetition import RepetitionSettings
from evalkit.profiles import get_profile
from evalkit.render.markdown_details import _excerpt_label
from evalkit.wire import Wire
from tests.helpers.sim import asgi_served, asgi_server, simulator


class _RawSSE(http.server.BaseHTTPRequestHandler):
    """Answers every POST with the bytes of ``server.body``, cut into ``server.pieces`` writes."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802  (the stdlib's name)
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        body: bytes = self.server.body  # type: ignore[attr-defined]
        size: int = self.server.piece  # type: ignore[attr-defined]
        for i in range(0, len(body), size):
            part = body[i : i + size]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def raw_sse() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RawSSE)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


async def _events(url: str) -> list[bytes]:
    async with httpx.AsyncClient() as client, client.stream("POST", url, json={}) as response:
        return [data async for data in sse.sse_data(response)]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_sse_events_are_read_whatever_the_line_ends_and_the_chunking(
    raw_sse: http.server.ThreadingHTTPServer, newline: bytes, piece: int
) -> None:
    events = [b'{"a": 1}', b'{"b": "x: y"}', b"[DONE]"]
    lines = [b": keep-alive comment", b"event: message", b"data: " + events[0], b"",
             b"data:" + events[1], b"id: 7", b"", b"data: " + events[2], b""]
    raw_sse.body, raw_sse.piece = newline.join(lines) + newline, piece  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{raw_sse.server_address[1]}/v1/completions"
    assert asyncio.run(_events(url)) == events


def test_results_do_not_depend_on_how_many_tokens_each_event_carries() -> None:
    """One token per event (vLLM's and SGLang's default) or 16: the same samples, verdicts and ids."""
    settings = RepetitionSettings(count=6, max_tokens=1024, concurrency=3)
    runs = []
    for interval in ("1", "16"):
        args = ("--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off",
                "--sim-collapse-rate", "0.5", "--sim-stream-interval", interval)
        server = asgi_server(*args, wire=Wire(token_ids="return_tokens_as_token_ids"))
        runs.append(repetition.run_repetition(settings, server))
    one, sixteen = runs
    assert one.metrics == sixteen.metrics and one.metrics["collapsed"] > 0
    assert [s["text"] for s in one.samples] == [s["text"] for s in sixteen.samples]
    assert [s["metrics"] for s in one.samples] == [s["metrics"] for s in sixteen.samples]


def test_return_token_ids_gives_the_detector_the_same_ids_as_vllm_s_extension() -> None:
    """SGLang's `return_token_ids` (each chunk's ids in `choices[i].token_ids`, the SGLang profile's
    request) and vLLM's `return_tokens_as_token_ids`: the same ids, so the same verdicts."""
    settings = RepetitionSettings(count=6, max_tokens=1024, concurrency=3)
    args = ("--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off", "--sim-collapse-rate", "0.5")
    app = simulator(*args).app  # one engine, asked both ways
    vllm = repetition.run_repetition(settings, asgi_served(app, wire=Wire(token_ids="return_tokens_as_token_ids")))
    sglang = repetition.run_repetition(settings, asgi_served(app, wire=Wire(token_ids="return_token_ids")))
    assert {s["token_source"] for s in sglang.samples} == {"token_ids"}
    assert sglang.metrics == vllm.metrics and sglang.metrics["collapsed"] > 0
    assert [s["metrics"] for s in sglang.samples] == [s["metrics"] for s in vllm.samples]
    assert [s["evidence"] for s in sglang.samples] == [s["evidence"] for s in vllm.samples]


@pytest.mark.parametrize("kind", ["stutter", "soup"])
def test_stutter_and_soup_are_judged_alike_by_id_streaming_and_text_only_engines(kind: str) -> None:
    """The loop rules read ids where the engine streams them, but stutter and soup read the text:
    the simulated buggy cell garbling its long generations is judged the same through vLLM's and
    SGLang's id requests as through ATOM's text-only stream, sample for sample."""
    settings = RepetitionSettings(count=8, max_tokens=1024, concurrency=4)
    args = ("--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off",
            "--sim-collapse-rate", "0.5", "--sim-collapse-kind", kind)
    app = simulator(*args).app
    runs = [repetition.run_repetition(settings, asgi_served(app, wire=Wire(token_ids=via)))
            for via in ("return_tokens_as_token_ids", "return_token_ids")]
    atom = asgi_server("--sim-dialect", "atom", *args, wire=get_profile("sim-atom").wire())
    runs.append(repetition.run_repetition(settings, atom))
    assert [run.metrics["token_source"] for run in runs] == ["token_ids", "token_ids", "text_split"]
    verdicts = [[(s["id"], s["collapsed"], s["evidence"]["categories"]) for s in run.samples] for run in runs]
    assert verdicts[0] == verdicts[1] == verdicts[2]
    garbled = [categories for _, collapsed, categories in verdicts[0] if collapsed]
    assert garbled and all(categories == (kind,) for categories in garbled)
    # the evidence of an id stream's stutter or soup is its text, as it is for the text-only engine
    ids_ev, text_ev = ([s["evidence"] for s in run.samples if s["collapsed"]] for run in (runs[0], runs[2]))
    assert [(e["examples"], e["excerpt"], e["onset"]) for e in ids_ev] == [(e["examples"], e["excerpt"], e["onset"]) for e in text_ev]
    assert {_excerpt_label(s) for s in runs[0].samples if s["collapsed"]} == {"Around the onset:"}
