"""The simulator as a disaggregated pair: a prefill worker hands the prompt's KV state to a decode
worker as bytes over HTTP, behind the PD router (evalkit/sim/disagg.py, evalkit/sim/router.py).

The workers and the router are the simulator's own apps served by threads of this process over real
ports (tests/helpers/served.py), so the decode worker's fetch from the prefill worker and the router's
relay are real HTTP. The processes themselves are tests/test_sim_pd_e2e.py's.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from evalkit.sim.config import SimConfigError
from evalkit.sim.disagg import KV_HEADS, hidden_states, pack, unpack
from evalkit.sim.router import Router
from tests.helpers.served import served_app, served_sim
from tests.helpers.sim import extracted_answer, gsm8k_test, periodic_tail, reference_answer, simulator

PRODUCER = '{"kv_role":"kv_producer","kv_connector":"mooncake","handshake_port":6301}'
CONSUMER = '{"kv_role":"kv_consumer","kv_connector":"mooncake","handshake_port":6301}'
QUESTIONS = 200
ROWS = gsm8k_test()[:QUESTIONS]
PROMPTS = [f"Question: {row['question']}\nAnswer:" for row in ROWS]
STORIES = [f"Write a long story about a lighthouse keeper number {i}." for i in range(32)]


@contextlib.contextmanager
def pd_pair(prefill_tp: int, decode_tp: int, *decode_flags: str) -> Iterator[str]:
    """The router's URL in front of a prefill worker of TP `prefill_tp` and a decode worker of TP
    `decode_tp` (with `decode_flags`)."""
    with (served_sim("-tp", str(prefill_tp), "--kv-transfer-config", PRODUCER) as prefill,
          served_sim("-tp", str(decode_tp), "--kv-transfer-config", CONSUMER, *decode_flags) as decode,
          served_app(Router([prefill], [decode]).app) as router):
        yield router


def texts(url: str, prompts: list[str], **fields: object) -> list[str]:
    """Greedy completions of `prompts` (in batches, as lm-eval sends them)."""
    out: list[str] = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for start in range(0, len(prompts), 50):
            response = client.post("/v1/completions", json={"model": "sim-model", "prompt": prompts[start:start + 50],
                                                             "temperature": 0, **fields})
            response.raise_for_status()
            out += [c["text"] for c in sorted(response.json()["choices"], key=lambda c: c["index"])]
    return out


def right(answers: list[str]) -> int:
    return sum(extracted_answer(text) == reference_answer(row) for text, row in zip(answers, ROWS, strict=True))


@pytest.fixture(scope="module")
def single_tp4() -> dict[str, list[str]]:
    """What one TP4 instance answers: the reference a PD pair decoding at TP4 is held to."""
    with served_sim("-tp", "4") as url:
        return {"gsm8k": texts(url, PROMPTS, max_tokens=256), "stories": texts(url, STORIES, max_tokens=1024)}


def test_the_payload_is_the_prompts_state_in_the_producers_rank_layout() -> None:
    state = hidden_states("Natalia sold clips to 48 of her friends in April.", seed=0)
    payload = pack([state], tp=2)
    header, (read,) = unpack(payload, split=2)
    assert header == {"tp_size": 2, "heads": KV_HEADS, "tokens": [len(state)]}
    assert np.array_equal(read, state) and np.array_equal(unpack(payload, None)[1][0], state)
    # the producer's rank 0 (heads 0-3 of every token) comes first, token-major
    body = np.frombuffer(payload[-state.nbytes:], dtype="<u4")
    assert np.array_equal(body[: 4 * len(state)].reshape(len(state), 4), state[:, :4])


@pytest.mark.parametrize(("written", "read"), [(1, 2), (2, 4), (4, 2), (8, 1)])
def test_reading_another_tps_layout_puts_every_tokens_heads_in_the_wrong_places(written: int, read: int) -> None:
    state = hidden_states(PROMPTS[0], seed=0)
    _, (misread,) = unpack(pack([state], tp=written), split=read)
    assert (misread != state).any(axis=1).mean() > 0.95
    assert np.array_equal(unpack(pack([state], tp=written), split=None)[1][0], state)


def test_equal_tps_answer_exactly_as_a_single_instance(single_tp4: dict[str, list[str]]) -> None:
    with pd_pair(4, 4) as router:
        assert texts(router, PROMPTS, max_tokens=256) == single_tp4["gsm8k"]
        assert texts(router, STORIES, max_tokens=1024) == single_tp4["stories"]


def test_unequal_tps_drop_answers_and_collapse_long_generations(single_tp4: dict[str, list[str]]) -> None:
    with pd_pair(2, 4) as router:
        answers = texts(router, PROMPTS, max_tokens=256)
        stories = texts(router, STORIES, max_tokens=1024)
    lost = right(single_tp4["gsm8k"]) - right(answers)
    assert 0.03 * QUESTIONS < lost < 0.15 * QUESTIONS, lost  # ~7% of right answers, as the demo's buggy cell
    looping = sum(periodic_tail(story.split()) is not None for story in stories)
    healthy = sum(periodic_tail(story.split()) is not None for story in single_tp4["stories"])
    assert looping >= healthy + 4, (looping, healthy)


def test_the_layout_fix_reads_by_the_producers_tp(single_tp4: dict[str, list[str]]) -> None:
    with pd_pair(2, 4, "--sim-kv-layout-fix", "on") as router:
        assert texts(router, PROMPTS, max_tokens=256) == single_tp4["gsm8k"]


def test_a_misread_state_moves_the_decode_workers_logprobs() -> None:
    body = {"prompt": STORIES[0], "max_tokens": 64, "logprobs": 5, "temperature": 0}

    def logprobs(router: str) -> list[float]:
        response = httpx.post(f"{router}/v1/completions", json=body, timeout=60)
        return response.json()["choices"][0]["logprobs"]["token_logprobs"]

    with served_sim("-tp", "4") as single:
        reference = logprobs(single)
    with pd_pair(4, 4) as same, pd_pair(2, 4) as other:
        assert logprobs(same) == reference
        assert np.abs(np.array(logprobs(other)) - reference).max() > 0.1


def test_a_producer_keeps_a_state_for_one_fetch_and_says_its_role() -> None:
    with served_sim("-tp", "2", "--kv-transfer-config", PRODUCER) as prefill, httpx.Client(base_url=prefill) as client:
        assert client.get("/kv_transfer_info").json() == {"tp_size": 2, "dp_size": 1, "kv_role": "kv_producer",
                                                          "handshake_port": 6301}
        answer = client.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 1,
                                                      "kv_transfer_params": {"do_remote_decode": True}}).json()
        params = answer["kv_transfer_params"]
        assert params["do_remote_prefill"] is True and params["tp_size"] == 2
        assert f"http://{params['remote_host']}:{params['remote_port']}" == prefill
        first = client.get(f"/kv/{params['transfer_id']}")
        assert first.status_code == 200 and unpack(first.content, None)[0]["tokens"] == [len(hidden_states(PROMPTS[0], 0))]
        assert client.get(f"/kv/{params['transfer_id']}").status_code == 404


def test_a_whole_engine_has_no_kv_role() -> None:
    with served_sim() as url:
        assert httpx.get(f"{url}/kv_transfer_info").json()["kv_role"] is None


def test_a_decode_worker_that_cannot_fetch_the_state_answers_502_naming_it() -> None:
    with served_sim("-tp", "2", "--kv-transfer-config", CONSUMER) as decode:
        params = {"do_remote_prefill": True, "remote_host": "127.0.0.1", "remote_port": 9, "transfer_id": "xfer-gone",
                  "tp_size": 2}
        response = httpx.post(f"{decode}/v1/completions", json={"prompt": "hi", "kv_transfer_params": params})
        assert response.status_code == 502
        assert response.json()["error"]["message"].startswith("KV transfer failed: GET http://127.0.0.1:9/kv/xfer-gone")


def test_the_router_is_not_ready_until_it_has_seen_every_worker_ready_in_its_role() -> None:
    with (served_sim("--kv-transfer-config", PRODUCER) as prefill,
          served_sim("--kv-transfer-config", CONSUMER, "--sim-fault", "never-ready") as starting,
          served_sim("--kv-transfer-config", PRODUCER) as miscast):
        for decode, why in ((starting, "/health answered 503"), (miscast, "kv_role is kv_producer, listed as kv_consumer"),
                            ("http://127.0.0.1:9", "unreachable: ConnectError")):
            with served_app(Router([prefill], [decode]).app) as router:
                health = httpx.get(f"{router}/health")
                assert health.status_code == 503 and health.json()["workers"] == {prefill: "ready", decode: why}
                refused = httpx.post(f"{router}/v1/completions", json={"prompt": "hi"})
                assert refused.status_code == 503


def test_the_router_streams_the_decode_workers_answer_and_labels_its_model(single_tp4: dict[str, list[str]]) -> None:
    with pd_pair(4, 4) as router:
        card = httpx.get(f"{router}/v1/models").json()["data"][0]
        assert card["simulator"] is True and card["router"] == "evalkit.sim.router"
        assert card["settings"]["kv_role"] == "kv_consumer"
        with httpx.stream("POST", f"{router}/v1/completions", timeout=60,
                          json={"prompt": PROMPTS[0], "max_tokens": 256, "temperature": 0, "stream": True}) as response:
            chunks = [json.loads(line[6:]) for line in response.iter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
        assert "".join(c["choices"][0]["text"] for c in chunks) == single_tp4["gsm8k"][0]


@pytest.mark.parametrize(("flags", "message"), [
    (["--kv-transfer-config", "{nope"], "--kv-transfer-config is not JSON"),
    (["--kv-transfer-config", '{"kv_role":"kv_both"}'], "kv_role must be one of kv_producer, kv_consumer, not 'kv_both'"),
    (["-tp", "3", "--kv-transfer-config", PRODUCER], "--tensor-parallel-size 3: the simulated model's 8 KV heads"),
])
def test_a_bad_kv_transfer_config_is_one_line_naming_the_flag(flags: list[str], message: str) -> None:
    with pytest.raises(SimConfigError, match=message.replace("(", r"\(")):
        simulator(*flags)


def test_the_router_says_in_one_line_what_it_cannot_relay() -> None:
    """Bad bodies are 400s naming the fault; /version comes from the decode worker, which generates
    every token; a prefill worker gone after the router saw it ready is a 502 naming that worker."""
    with contextlib.ExitStack() as stack:
        prefill = stack.enter_context(served_sim("--kv-transfer-config", PRODUCER))
        decode = stack.enter_context(served_sim("--kv-transfer-config", CONSUMER))
        with served_app(Router([prefill], [decode]).app) as router:
            assert httpx.get(f"{router}/health").status_code == 200
            bad = httpx.post(f"{router}/v1/completions", content=b"{not json")
            assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("invalid JSON body: ")
            listed = httpx.post(f"{router}/v1/completions", json=["hi"])
            assert listed.status_code == 400 and listed.json()["error"]["message"] == "request body must be a JSON object"
            assert httpx.get(f"{router}/version").json() == httpx.get(f"{decode}/version").json()
            stack.close()  # both workers stop; the router saw them ready and keeps relaying
            gone = httpx.post(f"{router}/v1/completions", json={"prompt": "hi", "max_tokens": 4})
            assert gone.status_code == 502
            assert gone.json()["error"]["message"].startswith("prefill worker unreachable: ConnectError")
            assert httpx.get(f"{router}/version").status_code == 502


def test_the_router_command_refuses_a_bad_worker_and_a_taken_port_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m evalkit.sim.router` as a launcher starts it (its `main`, here in this process):
    a worker that is not a URL is exit 2 naming the flag; a port already bound is exit 1 naming it."""
    from evalkit.sim.router import EXIT_BIND, EXIT_CONFIG, main

    flags = ["--pd-disaggregation", "--decode", "http://127.0.0.1:2"]
    assert main([*flags, "--prefill", "127.0.0.1:1"]) == EXIT_CONFIG
    assert capsys.readouterr().err.strip() == ("python -m evalkit.sim.router: error: --prefill 127.0.0.1:1: "
                                               "expected URL [BOOTSTRAP_PORT]")
    with contextlib.closing(socket.socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main([*flags, "--prefill", "http://127.0.0.1:1", "8998", "--port", str(port)]) == EXIT_BIND
    err = capsys.readouterr().err
    assert err.startswith(f"evalkit.sim.router: error: cannot bind 127.0.0.1:{port}: ") and err.count("\n") == 1
