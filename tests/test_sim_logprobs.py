"""The simulator's logprobs: a real distribution per position, perturbed per serving cell.

Reference texts (GSM8K questions with their reference solutions) are scored teacher-forced
(``echo`` + ``logprobs``, as a divergence eval scores them) by simulators built in this process
from the argv evalkit builds for the 12 cells of configs/demo.yaml.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalkit.config.cells import expand
from evalkit.config.loader import load_config
from evalkit.engine.launch import build_launch
from evalkit.evals.divergence import parse_echo, parse_prompt_logprobs
from evalkit.evals.prompts import Prompt
from tests.helpers.sim import gsm8k_test, sim_client

DEMO = load_config(Path(__file__).resolve().parent.parent / "configs" / "demo.yaml")
BASELINE, BUGGY = "tp8-full-fixon", "dp8-piecewise-fixoff"
TEXTS = [f"Question: {row['question']}\nAnswer: {row['answer']}" for row in gsm8k_test()[:24]]
TOP = 5
ECHO = {"prompt": TEXTS, "echo": True, "logprobs": TOP, "max_tokens": 1, "temperature": 0}


def demo_args() -> dict[str, list[str]]:
    """Each demo cell's simulator flags, as evalkit launches it (without its start-up delay)."""
    args = {}
    for cell in expand(DEMO):
        argv = build_launch(DEMO, cell, 0).argv
        args[cell.id] = argv[argv.index("evalkit.sim") + 1 :] + ["--sim-startup-seconds", "0"]
    return args


def post(client: httpx.Client, body: dict[str, Any], path: str = "/v1/completions") -> httpx.Response:
    response = client.post(path, json={"model": DEMO.served, **body})
    assert response.status_code == 200, response.text
    return response


@contextlib.contextmanager
def serve(args: list[str]) -> Iterator[httpx.Client]:
    with sim_client(*args) as client:
        yield client


@pytest.fixture(scope="module")
def echoed() -> dict[str, httpx.Response]:
    """Every demo cell's response to the same teacher-forced scoring request."""
    responses = {}
    for cell, args in demo_args().items():
        with serve(args) as client:
            responses[cell] = post(client, ECHO)
    return responses


def prompt_positions(response: httpx.Response) -> list[list[tuple[str, float, dict[str, float]]]]:
    """Per text, the scored prompt positions (token, logprob, top) after the first token."""
    body = response.json()
    assert body["usage"]["completion_tokens"] == len(body["choices"])  # max_tokens 1: the last token is generated
    texts = []
    for choice in sorted(body["choices"], key=lambda c: c["index"]):
        lp = choice["logprobs"]
        texts.append(list(zip(lp["tokens"][1:-1], lp["token_logprobs"][1:-1], lp["top_logprobs"][1:-1])))
    return texts


def kl_from_top(ref: dict[str, float], cell: dict[str, float]) -> float:
    """KL(ref || cell) over the tokens both tops list plus one bucket for everything else
    (a coarse-graining, so a lower bound of the true KL)."""
    shared = [t for t in ref if t in cell]
    p = [math.exp(ref[t]) for t in shared]
    q = [math.exp(cell[t]) for t in shared]
    p_rest, q_rest = max(1e-12, 1 - sum(p)), max(1e-12, 1 - sum(q))
    return sum(a * math.log(a / b) for a, b in zip(p, q)) + p_rest * math.log(p_rest / q_rest)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def divergence(ref: httpx.Response, cell: httpx.Response) -> tuple[float, float]:
    """(KL p99, top-1 agreement) of ``cell`` against ``ref`` over every prompt position."""
    kls, agree = [], []
    for ref_text, cell_text in zip(prompt_positions(ref), prompt_positions(cell), strict=True):
        for (token, _, ref_top), (same, _, cell_top) in zip(ref_text, cell_text, strict=True):
            assert token == same
            kls.append(kl_from_top(ref_top, cell_top))
            agree.append(max(ref_top, key=ref_top.__getitem__) == max(cell_top, key=cell_top.__getitem__))
    return p99(kls), sum(agree) / len(agree)


def test_the_buggy_cell_diverges_ten_times_more_than_any_other(echoed: dict[str, httpx.Response]) -> None:
    figures = {cell: divergence(echoed[BASELINE], response) for cell, response in echoed.items()}
    buggy_kl, buggy_agree = figures.pop(BUGGY)
    assert figures.pop(BASELINE) == (0.0, 1.0)
    # the fix changes the collective only under PIECEWISE: this twin runs the baseline's numerics
    assert figures.pop("tp8-full-fixoff") == (0.0, 1.0)
    for cell, (kl, agree) in figures.items():
        assert 0 < kl and buggy_kl >= 10 * kl, cell  # every other path has small, non-zero noise
        assert agree >= 0.99, cell
    assert buggy_agree < 0.95


def test_one_cell_twice_gives_byte_identical_logprobs(echoed: dict[str, httpx.Response]) -> None:
    with serve(demo_args()[BUGGY]) as client:
        again = post(client, ECHO)
    assert again.text.split('"choices":', 1)[1] == echoed[BUGGY].text.split('"choices":', 1)[1]


def test_each_position_is_a_proper_distribution_with_its_token_first(echoed: dict[str, httpx.Response]) -> None:
    for cell in (BASELINE, BUGGY):
        argmax = []
        for text in prompt_positions(echoed[cell]):
            for token, logprob, top in text:
                entries = list(top.items())
                assert entries[0] == (token, logprob) and logprob <= 0
                assert len(entries) in (TOP, TOP + 1)  # the top 5, plus the token when it is not among them
                ranked = [v for _, v in entries[1:]]
                assert ranked == sorted(ranked, reverse=True)
                assert sum(math.exp(v) for v in top.values()) < 1  # the rest of the vocabulary has mass
                argmax.append(logprob == max(top.values()))
        assert 0.6 <= sum(argmax) / len(argmax) <= 0.8, cell  # usually, not always, the model's first choice
    first = echoed[BASELINE].json()["choices"][0]["logprobs"]
    assert first["token_logprobs"][0] is None and first["top_logprobs"][0] is None


def test_another_seed_gives_other_values(echoed: dict[str, httpx.Response]) -> None:
    with serve([*demo_args()[BASELINE], "--sim-seed", "1"]) as client:
        other = post(client, ECHO)
    pairs = [(a[1], b[1]) for x, y in zip(prompt_positions(echoed[BASELINE]), prompt_positions(other))
             for a, b in zip(x, y)]
    assert sum(a != b for a, b in pairs) / len(pairs) > 0.95


def test_logprob_noise_flags_set_the_perturbation(echoed: dict[str, httpx.Response]) -> None:
    quiet = {}
    for cell in (BASELINE, "dp8-full-fixon", BUGGY):
        with serve([*demo_args()[cell], "--sim-logprob-noise", "0", "--sim-logprob-bug-noise", "0.8"]) as client:
            quiet[cell] = post(client, ECHO)
    assert divergence(quiet[BASELINE], quiet["dp8-full-fixon"]) == (0.0, 1.0)  # no noise: one model
    assert divergence(quiet[BASELINE], quiet[BUGGY])[0] > divergence(echoed[BASELINE], echoed[BUGGY])[0]


@pytest.fixture(scope="module")
def buggy() -> Iterator[httpx.Client]:
    with serve(demo_args()[BUGGY]) as client:
        yield client


def test_generated_tokens_are_the_argmax_streamed_or_not(buggy: httpx.Client) -> None:
    body = {"prompt": TEXTS[0], "max_tokens": 60, "logprobs": 3, "temperature": 0}
    whole = post(buggy, body).json()["choices"][0]["logprobs"]
    for token, logprob, top in zip(whole["tokens"], whole["token_logprobs"], whole["top_logprobs"], strict=True):
        assert list(top.items())[0] == (token, logprob) == max(top.items(), key=lambda item: item[1])
        assert len(top) == 3
    with buggy.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    streamed = [c["choices"][0]["logprobs"] for c in chunks if c["choices"] and c["choices"][0]["logprobs"]]
    assert [t for s in streamed for t in s["top_logprobs"]] == whole["top_logprobs"]


def test_prompt_logprobs_as_vllm_returns_them(buggy: httpx.Client) -> None:
    echo = post(buggy, {"prompt": TEXTS[1], "echo": True, "logprobs": 2, "max_tokens": 1}).json()["choices"][0]
    (choice,) = post(buggy, {"prompt": TEXTS[1], "prompt_logprobs": 2, "max_tokens": 1}).json()["choices"]
    assert choice["logprobs"] is None and choice["prompt_logprobs"] == echo["prompt_logprobs"]
    positions = choice["prompt_logprobs"]
    tokens = echo["logprobs"]["tokens"][: len(positions)]
    assert positions[0] is None and len(positions) == len(tokens)
    for token, logprob, entries in zip(tokens[1:], echo["logprobs"]["token_logprobs"][1:], positions[1:]):
        own, *ranked = entries.values()
        assert own["decoded_token"] == token and own["logprob"] == logprob
        ranks = [e["rank"] for e in ranked]  # the top 2, less the token itself when it is one of them
        assert ranks == sorted(ranks) and {own["rank"], *ranks} >= {1, 2} and len(ranks) == 2 - (own["rank"] <= 2)
        assert all(key.isdigit() for key in entries)


def test_echo_with_max_tokens_zero_returns_the_prompt_alone(buggy: httpx.Client) -> None:
    body = post(buggy, {"prompt": TEXTS[2], "echo": True, "logprobs": 1, "max_tokens": 0}).json()
    (choice,) = body["choices"]
    assert choice["text"] == TEXTS[2] and choice["finish_reason"] == "length"
    assert len(choice["logprobs"]["tokens"]) == body["usage"]["prompt_tokens"]
    assert body["usage"]["completion_tokens"] == 1  # vLLM generates one token it does not return


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/completions", {"prompt": "x", "logprobs": 21},
         "Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)"),
        ("/v1/completions", {"prompt": "x", "logprobs": -1},
         "Requested sample logprobs of 131072, which is greater than max allowed: 20"),
        ("/v1/completions", {"prompt": "x", "prompt_logprobs": 21},
         "Requested prompt logprobs of 21, which is greater than max allowed: 20 (parameter=prompt_logprobs"),
        ("/v1/completions", {"prompt": "x", "prompt_logprobs": 1, "stream": True},
         "`prompt_logprobs` are not available when `stream=True`."),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
         "Requested sample logprobs of 21, which is greater than max allowed: 20"),
    ],
)
def test_logprobs_beyond_vllms_cap_get_its_400(buggy: httpx.Client, path: str, body: dict[str, Any],
                                               message: str) -> None:
    response = buggy.post(path, json={"model": DEMO.served, **body})
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


def test_twenty_logprobs_are_served(buggy: httpx.Client) -> None:
    twenty = post(buggy, {"prompt": TEXTS[3], "echo": True, "logprobs": 20, "max_tokens": 1})
    # the simulated model ranks a text token 20th at worst, so it is always among the top 20
    assert {len(top) for top in twenty.json()["choices"][0]["logprobs"]["top_logprobs"][1:]} == {20}


def test_return_token_ids_gives_the_ids_prompt_logprobs_is_keyed_by(buggy: httpx.Client) -> None:
    body = {"prompt": TEXTS[1], "prompt_logprobs": 2, "max_tokens": 1, "return_token_ids": True}
    (choice,) = post(buggy, body).json()["choices"]
    ids, positions = choice["prompt_token_ids"], choice["prompt_logprobs"]
    assert len(ids) == len(positions) and all(str(i) in entries for i, entries in zip(ids[1:], positions[1:]))
    assert len(choice["token_ids"]) == 1  # the one generated token


def test_the_divergence_eval_reads_both_request_shapes_alike(buggy: httpx.Client) -> None:
    """`request: echo` (token text) and `request: prompt_logprobs` (token ids) score the same
    positions with the same logprobs, so `auto` may pick either by the engine's profile."""
    item = Prompt(id="t", kind="text", prompt=TEXTS[3])
    echo = parse_echo(item, post(buggy, {"prompt": item.prompt, "echo": True, "logprobs": TOP, "max_tokens": 1}).json())
    ids = parse_prompt_logprobs(item, post(buggy, {"prompt": item.prompt, "prompt_logprobs": TOP, "max_tokens": 1,
                                                   "return_token_ids": True}).json())
    assert echo["logprobs"] == ids["logprobs"] and echo["tokens"][1:] == ids["pieces"][1:]  # 0: no context
    assert [sorted(t.values()) if t else None for t in echo["top"]] == [sorted(t.values()) if t else None
                                                                       for t in ids["top"]]
