"""The collapse signal from the model itself (evals/model_signal.py): each long generation scored
teacher-forced under the cell's own engine, judged against the cell's text-healthy samples, and
joined with the text rules in the collapse verdict. The simulator's app serves in this process."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from evalkit.evals import model_signal, repetition
from evalkit.evals.base import EvalResult, Server
from evalkit.evals.detector import analyze_text
from evalkit.evals.http_client import pooled_client
from evalkit.evals.model_signal import ModelSignalSettings, worst_window
from evalkit.evals.prompts import Prompt, load_prompt_set
from evalkit.evals.repetition import RepetitionSettings
from evalkit.render.details import event_facts
from evalkit.sim.tokens import tokenize
from tests.helpers.cli import evalkit_cli
from tests.helpers.sim import asgi_server

BUGGY = ("--enable-dp-attention", "-tp", "8", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off")
LONG = RepetitionSettings(count=8, max_tokens=1200, concurrency=8)
CODE = ("def load(path):\n    with open(path) as f:\n        rows = [json.loads(line) for line in f if line.strip()]\n"
        "    return {row['id']: row for row in rows}\n\nclass Cache(dict):\n    def __missing__(self, key):\n"
        "        value = self[key] = load(key)\n        return value\n")


def _score(server: Server, prompt: Prompt, text: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with pooled_client(server, 1, 60.0) as client:
            return await model_signal.score(client, server, prompt, text, ModelSignalSettings(), "completions")

    return asyncio.run(go())


@pytest.fixture(scope="module")
def healthy() -> tuple[Server, Any]:
    server = asgi_server()
    return server, repetition.run_repetition(LONG, server)


def test_the_worst_window_is_a_soup_tail_not_its_average_with_the_healthy_start() -> None:
    nll = [1.0] * 300 + [12.0] * 100
    assert worst_window(nll, 64) == (12.0, 300)
    assert worst_window([1.0, 3.0], 64) == (2.0, 0)  # shorter than a window: its mean


def test_the_simulated_model_finds_its_prose_likely_and_the_same_tokens_shuffled_unlikely(
        healthy: tuple[Server, Any]) -> None:
    server, result = healthy
    row = result.samples[0]
    prompt = load_prompt_set().prompts[0]
    tokens = tokenize(row["text"])
    random.Random(0).shuffle(tokens)
    in_order, shuffled = row["model_signal"], _score(server, prompt, "".join(tokens))
    assert in_order["tokens"] > 100
    assert in_order["nll"] < 2.0 and shuffled["nll"] > in_order["nll"] + 5.0  # nats per token


def test_every_healthy_generation_is_scored_and_none_is_flagged(healthy: tuple[Server, Any]) -> None:
    _, result = healthy
    signal = result.metrics["model_signal"]
    assert signal["measured"] == signal["n"] == 8 and signal["flagged"] == 0 and signal["unmeasured"] is None
    assert signal["reference"]["n"] == 8 and signal["threshold"] == pytest.approx(
        min(8.0, signal["reference"]["median_worst_nll"] + 5.5))
    assert all(row["model_flagged"] is False and row["collapse_signals"] == [] for row in result.samples)
    flat = repetition.EVAL.flat(result.metrics)
    assert flat["repetition.model_flagged"] == 0 and flat["repetition.model_nll"] == signal["worst_nll_median"]
    assert repetition.EVAL.absent(result.metrics) == {}


def test_soup_the_text_rules_miss_is_collapsed_by_the_model_signal_alone(healthy: tuple[Server, Any]) -> None:
    """Code tokens in random order after a healthy start: no stutter, no script change, nothing the
    text rules read as salad; the cell's own model finds it far less likely than its own prose."""
    server, result = healthy
    prompt = load_prompt_set().prompts[0]
    code = tokenize(CODE)
    rng = random.Random(1)
    text = result.samples[0]["text"][:1500] + "".join(rng.choice(code) for _ in range(600))
    assert not analyze_text(text, finish_reason="length").collapsed
    samples = [dict(row) for row in result.samples]
    samples[0] = {"collapsed": False, "model_signal": _score(server, prompt, text)}
    cell = model_signal.judge(samples, ModelSignalSettings())
    assert samples[0]["collapsed"] and samples[0]["collapse_signals"] == ["model"]
    assert cell["flagged"] == cell["model_only"] == 1
    assert sum(row["collapsed"] for row in samples) == 1


def test_the_buggy_cell_s_soup_is_collapsed_by_both_signals() -> None:
    server = asgi_server(*BUGGY, "--sim-collapse-rate", "0.5", "--sim-collapse-kind", "soup")
    result = repetition.run_repetition(LONG, server)
    collapsed = [row for row in result.samples if row["collapsed"]]
    assert collapsed and all(row["collapse_signals"] == ["text", "model"] for row in collapsed)
    assert all(row["model_signal"]["worst_nll"] > 8.0 for row in collapsed)
    assert result.metrics["collapsed"] == len(collapsed) < len(result.samples)


def test_an_engine_without_logprobs_is_not_measured_and_judged_by_the_text_rules_alone() -> None:
    server = asgi_server("--sim-dialect", "atom")
    result = repetition.run_repetition(RepetitionSettings(count=4, max_tokens=600), server)
    signal = result.metrics["model_signal"]
    assert signal["measured"] == 0 and signal["flagged"] == 0
    assert signal["unmeasured"] == "the engine returned no echoed logprobs with text offsets"
    assert all(row["model_flagged"] is None for row in result.samples)
    assert "repetition.model_nll" not in repetition.EVAL.flat(result.metrics)
    assert repetition.EVAL.absent(result.metrics) == {
        "repetition.model_nll": "not measured: the engine returned no echoed logprobs with text offsets"}


@pytest.mark.parametrize(("settings", "why"), [
    (RepetitionSettings(count=2, max_tokens=600, endpoint="chat"), "chat generations are not scored"),
    (RepetitionSettings(count=2, max_tokens=600, model_signal=ModelSignalSettings(enabled=False)), "off in the config"),
])
def test_chat_or_the_signal_off_says_why_it_was_not_measured(settings: RepetitionSettings, why: str) -> None:
    result = repetition.run_repetition(settings, asgi_server())
    assert result.metrics["model_signal"]["unmeasured"] == why
    assert repetition.EVAL.absent(result.metrics) == {"repetition.model_nll": f"not measured: {why}"}


def test_a_run_before_the_signal_existed_says_so() -> None:
    assert repetition.EVAL.absent({"n": 3, "collapsed": 0, "collapse_rate": 0.0}) == {
        "repetition.model_nll": "not measured: the run predates the model signal"}


def test_too_few_healthy_samples_leave_only_the_ceiling() -> None:
    samples = [{"collapsed": True, "model_signal": {"worst_nll": 9.0}},
               {"collapsed": False, "model_signal": {"worst_nll": 7.5}}]
    cell = model_signal.judge(samples, ModelSignalSettings())
    assert cell["reference"] == {"n": 1, "median_worst_nll": None} and cell["threshold"] == 8.0
    assert [row["collapse_signals"] for row in samples] == [["text", "model"], []]


def test_subsets_are_judged_again_against_every_part_s_healthy_samples(healthy: tuple[Server, Any]) -> None:
    _, result = healthy
    first, second = ([dict(row) for row in result.samples[i:i + 4]] for i in (0, 4))
    parts = [EvalResult({**result.metrics, "n": 4}, rows) for rows in (first, second)]
    combined = repetition.combine(parts)
    assert combined.metrics["model_signal"]["reference"]["n"] == 8 and combined.metrics["n"] == 8


def test_detect_on_plain_text_keeps_the_text_rules_alone_and_says_so(tmp_path: Path) -> None:
    done = evalkit_cli("detect", "-", cwd=tmp_path, input="A short healthy answer, nothing repeats here.")
    assert done.returncode == 0 and done.stdout == "stdin: too short to judge (9 tokens)\n"
    assert done.stderr == "note: text rules only; the model's own signal needs the engine: not measured\n"
    as_json = json.loads(evalkit_cli("detect", "--json", "-", cwd=tmp_path, input="Fine text.").stdout)
    assert as_json["model_signal"] == "text rules only; the model's own signal needs the engine: not measured"


def test_a_report_says_why_the_model_flagged_a_sample_the_text_rules_passed() -> None:
    sample = {"text_collapsed": False, "model_flagged": True, "model_threshold": 8.0,
              "model_signal": {"worst_nll": 12.34, "worst_at": 310}, "evidence": {"categories": []},
              "metrics": {"n_tokens": 1200, "finish_reason": "length"}}
    assert event_facts(sample) == ["improbable under the cell's own model: 12.3 nats/token over the window from "
                                   "generated token 310 (threshold 8.0)", "1200 tokens", "finish length"]
    both = event_facts({**sample, "text_collapsed": True, "evidence": {"categories": ["soup"]}})
    assert both[0] == "soup" and both[-1].startswith("improbable under the cell's own model")
