"""`--base-url`: any of the ways users write a server's address, and the name it really serves,
settled before any question (issue #19 item 1)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.errors import ConfigError
from evalkit.run.external import choose_served_name, normalise_base_url
from evalkit.store import read_json
from tests.helpers.sim import SimServer

CONFIG = ("model: sim/x\nserved_name: deepseek-v4-sim\nengine: {profile: sim}\n"
          "evals:\n  gsm8k: {num_fewshot: 1}\n  repetition: {count: 2, max_tokens: 256}\n")


@pytest.mark.parametrize(("given", "root"), [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1/completions", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1/chat/completions", "http://127.0.0.1:8000"),
    ("https://gw.example/team-a/v1", "https://gw.example/team-a"),  # a proxy prefix is part of the root
    (" http://[::1]:9000/v1 ", "http://[::1]:9000"),
])
def test_the_root_the_v1_base_and_the_full_endpoint_name_the_same_server(given: str, root: str) -> None:
    assert normalise_base_url(given) == root


@pytest.mark.parametrize("bad", ["127.0.0.1:8000", "ftp://h/v1", "http:///v1", "http://h:1/v1?x=1"])
def test_what_is_not_a_server_address_is_one_line(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"^--base-url "):
        normalise_base_url(bad)


def test_the_configured_name_wins_then_the_requested_then_the_only_one() -> None:
    assert choose_served_name("r", "a", None, ["a", "b"]) == ("a", None)
    assert choose_served_name("r", "a", "b", ["a", "b"])[0] == "b"
    name, note = choose_served_name("r", "a", None, ["demo"])
    assert name == "demo" and "serves 'demo', not the config's 'a'" in (note or "")
    with pytest.raises(ConfigError, match=r"the server lists 'x', 'y'\); pick one with --served-name NAME"):
        choose_served_name("r", "a", None, ["x", "y"])
    with pytest.raises(ConfigError, match=r"--served-name z: r does not serve it \(it serves 'x', 'y'\)"):
        choose_served_name("r", "a", "z", ["x", "y"])


@pytest.mark.parametrize("suffix", ["/v1", "/v1/completions"])
def test_a_server_serving_another_name_is_used_under_the_name_it_serves(
    tmp_path: Path, suffix: str, sim_process: Callable[..., SimServer]
) -> None:
    """A simulator process serving another name (lm-eval's GSM8K client needs a real port): e2e."""
    config = tmp_path / "ext.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    url = sim_process(model="demo").url
    result = CliRunner().invoke(main, ["matrix", "--config", str(config), "--base-url", url + suffix, "--limit", "5",
                                       "--run-id", "ext", "--results-dir", str(tmp_path / "results"),
                                       "--no-history"])
    assert result.exit_code == 0, result.output
    assert "serves 'demo', not the config's 'deepseek-v4-sim': using 'demo'" in result.output
    run = read_json(tmp_path / "results" / "ext" / "run.json")
    assert run["served_name"] == "demo" and run["base_url"] == url
    assert read_json(tmp_path / "results" / "ext" / "external" / "cell.json")["status"] == "ok"


@contextmanager
def model_list(*names: str) -> Iterator[str]:
    """A real local HTTP server whose /v1/models lists `names` (and serves nothing else)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = json.dumps({"object": "list", "data": [{"id": n, "object": "model"} for n in names]}).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("served_name", "words"), [
    (None, "the config's served name 'deepseek-v4-sim' is not served (the server lists 'qwen', 'llama'); "
           "pick one with --served-name NAME"),
    ("mistral", "--served-name mistral: .* does not serve it (it serves 'qwen', 'llama')"),
])
def test_a_name_the_server_does_not_serve_fails_before_anything_is_created(tmp_path: Path, served_name: str | None,
                                                                        words: str) -> None:
    config = tmp_path / "ext.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    with model_list("qwen", "llama") as url:
        args = ["matrix", "--config", str(config), "--base-url", url + "/v1", "--results-dir", str(tmp_path / "results")]
        result = CliRunner().invoke(main, args + (["--served-name", served_name] if served_name else []))
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1
    assert re.search(words.replace("(", r"\(").replace(")", r"\)"), result.output), result.output
    assert not (tmp_path / "results").exists()
