"""A tiny real OpenAI-style completions server with known prompt logprobs, for the divergence eval.

Every position's next-token distribution is a log-softmax over the text's own next token and a
fixed vocabulary of 40 words, with logits from a hash of (previous token, candidate): the same on
every server started with the same options, so two of them agree exactly. Options make a server
differ in a known way:

* ``shift``: add δ to every logprob it reports (|Δ logprob| against an unshifted one is |δ|);
* ``spike_every``: every N-th position gives the word "zzz" a logit 12 higher (the top-1 changes
  there and the KL jumps: the worst positions are known);
* ``tokenizer``: "words" (a word with its leading space per token) or "chars" (4 characters per
  token), so a cell that tokenizes differently is made;
* ``jitter``: add uniform noise of this size to every logit of every request (a server that is
  not deterministic: its repeats differ, which is a noise floor);
* ``fail_every``: answer every N-th completion request with this HTTP status instead
  (``fail_status``, default 503), so a client's retries are exercised.

Both request shapes: ``echo`` + ``logprobs`` (OpenAI legacy: tokens, token_logprobs with None
first, top_logprobs, text_offset, then the generated token; usage.prompt_tokens) and vLLM's
``prompt_logprobs`` + ``return_token_ids`` (keyed by token id). Also /health and /v1/models, so
the matrix runner can start it as a `command`-profile engine:

    python tests/logprob_server.py --port 8000 --served-name m [--shift -0.25] [--tokenizer chars]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import random
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VOCAB = tuple(f" w{i}" for i in range(39)) + (" zzz",)


@dataclass(frozen=True)
class Options:
    shift: float = 0.0
    spike_every: int = 0
    tokenizer: str = "words"
    jitter: float = 0.0
    served_name: str = "m"
    fail_every: int = 0
    fail_status: int = 503


def tokenize(text: str, tokenizer: str) -> list[str]:
    if tokenizer == "chars":
        return [text[i:i + 4] for i in range(0, len(text), 4)]
    return re.findall(r"\s*\S+|\s+$", text)


def token_id(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "big")


def distribution(prev: str, actual: str, position: int, options: Options, rng: random.Random) -> dict[str, float]:
    """The log-softmax over the vocabulary and the actual next token, before any shift."""
    candidates = dict.fromkeys((actual, *VOCAB))
    logits = {}
    for tok in candidates:
        h = hashlib.blake2b(f"{prev}\x00{tok}".encode(), digest_size=4).digest()
        logits[tok] = int.from_bytes(h, "big") / 2**32 * 6.0 + (3.0 if tok == actual else 0.0)
        if options.spike_every and position % options.spike_every == 0 and tok == " zzz":
            logits[tok] += 12.0
        if options.jitter:
            logits[tok] += rng.uniform(-options.jitter, options.jitter)
    top = max(logits.values())
    norm = top + math.log(sum(math.exp(v - top) for v in logits.values()))
    return {tok: v - norm for tok, v in logits.items()}


def score(text: str, k: int, options: Options) -> tuple[list[str], list[float | None], list[dict[str, float] | None]]:
    """Tokens, each one's logprob and the top-k (plus the token itself, as vLLM does) per position."""
    tokens = tokenize(text, options.tokenizer)
    rng = random.Random()
    logprobs: list[float | None] = [None]
    tops: list[dict[str, float] | None] = [None]
    for i in range(1, len(tokens)):
        dist = {tok: lp + options.shift for tok, lp in distribution(tokens[i - 1], tokens[i], i, options, rng).items()}
        best = sorted(dist.items(), key=lambda kv: -kv[1])[:k]
        logprobs.append(dist[tokens[i]])
        tops.append(dict(best) | {tokens[i]: dist[tokens[i]]})
    return tokens, logprobs, tops


def completion(body: dict[str, Any], options: Options) -> dict[str, Any]:
    text, k = str(body.get("prompt", "")), int(body.get("logprobs") or body.get("prompt_logprobs") or 0)
    tokens, logprobs, tops = score(text, max(k, 1), options)
    generated = " w0"
    choice: dict[str, Any] = {"index": 0, "text": (text if body.get("echo") else "") + generated, "finish_reason": "length"}
    if body.get("echo") and body.get("logprobs") is not None:
        offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        choice["logprobs"] = {"tokens": [*tokens, generated], "token_logprobs": [*logprobs, -1.0],
                              "top_logprobs": [*tops, {generated: -1.0}], "text_offset": [*offsets, len(text)]}
    if body.get("prompt_logprobs") is not None:
        choice["prompt_logprobs"] = [None] + [
            {str(token_id(tok)): {"logprob": lp, "rank": rank, "decoded_token": tok}
             for rank, (tok, lp) in enumerate(sorted(top.items(), key=lambda kv: -kv[1]), 1)}
            for top in tops[1:] if top is not None]
        if body.get("return_token_ids"):
            choice["prompt_token_ids"] = [token_id(tok) for tok in tokens]
    return {"id": "cmpl-1", "object": "text_completion", "model": options.served_name, "choices": [choice],
            "usage": {"prompt_tokens": len(tokens), "completion_tokens": 1, "total_tokens": len(tokens) + 1}}


def handler(options: Options) -> type[BaseHTTPRequestHandler]:
    requests = iter(range(1, 1 << 62))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": options.served_name, "object": "model"}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            with lock:
                n = next(requests)
            if self.path != "/v1/completions":
                self._send(404, {"error": "not found"})
            elif options.fail_every and n % options.fail_every == 0:
                self._send(options.fail_status, {"error": f"request {n} fails on purpose"})
            else:
                self._send(200, completion(body, options))

    return Handler


@contextlib.contextmanager
def serving(**options: Any) -> Iterator[str]:
    """A server in a thread of this process for the block: yields its root URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(Options(**options)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-name", default="m")
    parser.add_argument("--shift", type=float, default=0.0)
    parser.add_argument("--spike-every", type=int, default=0)
    parser.add_argument("--tokenizer", choices=("words", "chars"), default="words")
    parser.add_argument("--jitter", type=float, default=0.0)
    args = parser.parse_args()
    options = Options(args.shift, args.spike_every, args.tokenizer, args.jitter, args.served_name)
    ThreadingHTTPServer((args.host, args.port), handler(options)).serve_forever()


if __name__ == "__main__":
    main()
