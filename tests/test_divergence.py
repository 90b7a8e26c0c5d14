"""The divergence eval against real local HTTP servers whose logprobs are known (logprob_server.py):
identical servers diverge by exactly 0, a shifted one by its shift, a different tokenizer is
refused, and the KL estimate is a lower bound of the true KL."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from evalkit.config import parse_config
from evalkit.errors import ConfigError, EvalError
from evalkit.evals import registry
from evalkit.evals.base import EvalContext, Server
from evalkit.evals.divergence import SPECS, DivergenceSettings
from evalkit.evals.divergence_stats import position_kl
from evalkit.store import read_jsonl, write_jsonl
from tests.logprob_server import serving

EVAL = registry.builtins().get("divergence")
METRICS = ("kl_mean", "kl_p99", "top1_agreement", "logprob_abs_mean")
ROOT = Path(__file__).resolve().parent.parent


def score(tmp_path: Path, name: str, settings: dict[str, Any] | None = None, **server: Any) -> tuple[Path, dict]:
    """Run the eval on a fresh server with these options; its samples land in tmp_path/name."""
    cell_dir = tmp_path / name
    with serving(**server) as url:
        result = EVAL.run(EvalContext(Server(url, "m"), cell_dir, tmp_path),
                          DivergenceSettings(**({"count": 6, "max_tokens": 200} | (settings or {}))))
    write_jsonl(cell_dir / EVAL.samples_file, result.samples)
    return cell_dir, result.metrics


def between(cell: Path, ref: Path) -> dict[str, dict[str, Any]]:
    specs = {spec.name: spec for spec in SPECS}
    return {short: EVAL.pairwise(specs[f"divergence.{short}"], cell, ref) for short in METRICS}


def test_identical_servers_diverge_by_exactly_zero(tmp_path: Path) -> None:
    ref, raw = score(tmp_path, "ref")
    same, _ = score(tmp_path, "same")
    found = between(same, ref)
    assert [found[m]["value"] for m in METRICS] == [0.0, 0.0, 1.0, 0.0]
    assert [found[m]["diff"] for m in METRICS] == [0.0, 0.0, 0.0, 0.0]
    assert found["kl_p99"]["worst"] == [] and found["kl_mean"]["texts"] == 6
    assert raw["n"] == 6 and raw["tokens"] == sum(r["n_tokens"] for r in read_jsonl(ref / EVAL.samples_file))


def shift_kl(ref_rows: list[dict[str, Any]], delta: float) -> list[float]:
    """KL(ref || ref shifted by delta) on the coarsened partition, in closed form: the shared
    tokens' mass P moves to P e^delta, the rest bucket takes what is left."""
    out = []
    for row in ref_rows:
        for top in row["top"][1:]:
            p = sum(math.exp(lp) for lp in top.values())
            out.append(-delta * p + (1 - p) * math.log((1 - p) / (1 - math.exp(delta) * p)))
    return out


@pytest.mark.parametrize("request_shape", ["echo", "prompt_logprobs"])
def test_a_shifted_server_diverges_by_its_shift(tmp_path: Path, request_shape: str) -> None:
    wanted = {"request": request_shape}
    ref, _ = score(tmp_path, "ref", wanted)
    shifted, _ = score(tmp_path, "shifted", wanted, shift=-0.25)
    found = between(shifted, ref)
    assert found["logprob_abs_mean"]["value"] == pytest.approx(0.25, abs=1e-12)
    assert found["logprob_abs_mean"]["logprob_abs"]["max"] == pytest.approx(0.25, abs=1e-12)
    assert found["top1_agreement"]["value"] == 1.0  # a shift moves every logprob alike: the order stays
    kls = shift_kl(list(read_jsonl(ref / EVAL.samples_file)), -0.25)
    assert found["kl_mean"]["value"] == pytest.approx(np.mean(kls), rel=1e-9)
    assert found["kl_p99"]["value"] == pytest.approx(np.percentile(kls, 99), rel=1e-9)


def test_the_request_shapes_store_the_same_logprobs(tmp_path: Path) -> None:
    echo, _ = score(tmp_path, "echo", {"request": "echo"})
    ids, _ = score(tmp_path, "ids", {"request": "prompt_logprobs"})
    by_text = [(e, i) for e, i in zip(read_jsonl(echo / EVAL.samples_file), read_jsonl(ids / EVAL.samples_file))]
    assert all(e["logprobs"] == i["logprobs"] and e["tokens"][1:] == i["pieces"][1:] for e, i in by_text)
    assert by_text[0][1]["pieces"][0] == ""  # no logprobs at position 0, so no decoded text either
    assert sorted(by_text[0][0]["top"][1].values()) == sorted(by_text[0][1]["top"][1].values())


def test_a_cell_that_tokenizes_differently_is_refused_naming_the_text_and_position(tmp_path: Path) -> None:
    ref, _ = score(tmp_path, "ref")
    other, _ = score(tmp_path, "other", tokenizer="chars")
    found = between(other, ref)
    for m in METRICS:
        assert found[m]["diff"] is None
    n_other, n_ref = (next(read_jsonl(d / EVAL.samples_file))["n_tokens"] for d in (other, ref))
    assert found["kl_p99"]["refused"] == (
        f"text gsm8k-train-0: tokenized differently from token 0 on ('Ques' here, 'Question:' in the reference; "
        f"{n_other} vs {n_ref} tokens): positions would not be the same predictions")


def test_the_worst_positions_are_where_the_distributions_moved_with_the_text_around_them(tmp_path: Path) -> None:
    ref, _ = score(tmp_path, "ref")
    spiked, _ = score(tmp_path, "spiked", spike_every=50)
    found = between(spiked, ref)
    worst = found["kl_p99"]["worst"]
    assert len(worst) == 5 and all(w["at"] % 50 == 0 for w in worst)
    row = next(r for r in read_jsonl(ref / EVAL.samples_file) if r["id"] == worst[0]["id"])
    at = worst[0]["at"]
    assert worst[0]["here"] == row["tokens"][at] and worst[0]["before"].endswith(row["tokens"][at - 1])
    assert found["kl_p99"]["value"] < found["kl_p99"]["kl"]["max"] == worst[0]["value"]
    spikes = sum((r["n_tokens"] - 1) // 50 for r in read_jsonl(ref / EVAL.samples_file))  # positions 50, 100, ...
    positions = found["top1_agreement"]["positions"]
    assert found["top1_agreement"]["value"] == pytest.approx(1 - spikes / positions)


def test_repeats_measure_how_far_a_server_moves_from_itself(tmp_path: Path) -> None:
    _, steady = score(tmp_path, "steady", {"repeats": 2})
    assert steady["repeats"] == {"n": 2, "noise_floor": {m: 0.0 for m in METRICS}}
    _, noisy = score(tmp_path, "noisy", {"repeats": 3}, jitter=0.05)
    floor = noisy["repeats"]["noise_floor"]
    assert 0 < floor["logprob_abs_mean"] < 0.1 and 0 < floor["kl_p99"] and floor["top1_agreement"] < 0.1


def test_a_transient_server_error_is_retried_and_changes_nothing(tmp_path: Path) -> None:
    steady, _ = score(tmp_path, "steady", {"concurrency": 1})
    flaky, _ = score(tmp_path, "flaky", {"concurrency": 1}, fail_every=3)
    rows = list(read_jsonl(flaky / EVAL.samples_file))
    assert [r["attempts"] for r in rows] == [1, 1, 2, 1, 2, 1]  # requests 3 and 6 answered 503
    assert [r["top"] for r in rows] == [r["top"] for r in read_jsonl(steady / EVAL.samples_file)]


def test_a_refused_request_fails_the_eval_naming_the_text(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match=r"^divergence: text gsm8k-train-0: HTTPStatusError: Client error '400 Bad Req"):
        score(tmp_path, "bad", fail_every=1, fail_status=400)


def test_positions_past_max_tokens_are_not_stored(tmp_path: Path) -> None:
    cell, raw = score(tmp_path, "short", {"max_tokens": 10, "count": 8})
    rows = list(read_jsonl(cell / EVAL.samples_file))
    assert [r["n_tokens"] for r in rows] == [10] * 8 and raw["tokens"] == 80
    assert rows[7]["id"] == "long-1" and all(len(r["top"]) == 10 for r in rows)


def full(logits: list[float]) -> dict[str, float]:
    norm = math.log(sum(math.exp(v) for v in logits))
    return {f"t{i}": v - norm for i, v in enumerate(logits)}


def top(dist: dict[str, float], k: int) -> dict[str, float]:
    return dict(sorted(dist.items(), key=lambda kv: -kv[1])[:k])


@hyp_settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-6, 6), st.floats(-6, 6)), min_size=2, max_size=30), st.integers(1, 8))
def test_the_kl_estimate_from_top_k_never_exceeds_the_true_kl(pairs: list[tuple[float, float]], k: int) -> None:
    p, q = full([a for a, _ in pairs]), full([b for _, b in pairs])
    true = sum(math.exp(p[t]) * (p[t] - q[t]) for t in p)
    assert position_kl(top(p, k), top(q, k)) <= true + 1e-9
    assert position_kl(top(p, len(p)), top(q, len(q))) == pytest.approx(max(true, 0.0), abs=1e-9)  # all of it: exact


def test_a_token_in_one_top_k_only_joins_the_rest_bucket_on_both_sides() -> None:
    ref = {"a": math.log(0.6), "b": math.log(0.3)}  # rest 0.1
    cell = {"a": math.log(0.5), "c": math.log(0.4)}  # "b" is in the cell's rest: rest 0.5 there
    expected = 0.6 * math.log(0.6 / 0.5) + 0.4 * math.log(0.4 / 0.5)
    assert position_kl(ref, cell) == pytest.approx(expected)
    assert position_kl(ref, ref) == 0.0


def test_its_config_section_is_checked(tmp_path: Path) -> None:
    base = {"model": "m", "engine": {"profile": "sim"}}
    with pytest.raises(ConfigError, match=r"cfg.yaml: evals.divergence.count: Input should be less than or equal to 64"):
        parse_config(base | {"evals": {"divergence": {"count": 65}}}, "cfg.yaml")
    with pytest.raises(ConfigError, match=r"cfg.yaml: evals.divergence.top_k: Input should be less than or equal to 20"):
        parse_config(base | {"evals": {"divergence": {"top_k": 21}}}, "cfg.yaml")
    assert parse_config(base, "cfg.yaml").evals.divergence is None  # runs only where a config names it
    with pytest.raises(ConfigError, match=r"^evals.divergence.texts: no text set 'nope' "):
        EVAL.check(DivergenceSettings(texts="nope"))


def test_the_shipped_texts_are_what_the_builder_makes_from_the_packaged_gsm8k() -> None:
    built = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_reference_texts.py"), "--check"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    from evalkit.evals.prompts import load_prompt_set

    texts = load_prompt_set("reference_texts_v1").prompts
    assert len(texts) == 64 and sum(t.kind == "passage" for t in texts) == 8
    assert max(len(t.prompt) for t in texts) <= 4200 and "<<" not in "".join(t.prompt for t in texts)


def test_the_kl_is_the_same_to_the_last_bit_in_every_process() -> None:
    """A report recomputed later (`evalkit report --format json`) must equal the stored summary:
    no sum may follow a set's order, which changes with each process's string hashing."""
    code = ("import math, random; from evalkit.evals.divergence_stats import position_kl; r = random.Random(7); "
            "ps = [{f'tok{i}': math.log(r.random() / 20) for i in range(20)} for _ in range(50)]; "
            "qs = [{k: v + r.gauss(0, 0.01) for k, v in p.items()} for p in ps]; "
            "print(repr(sum(position_kl(p, q) for p, q in zip(ps, qs))))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}).stdout for seed in ("1", "2", "3")}
    assert len(runs) == 1, runs
