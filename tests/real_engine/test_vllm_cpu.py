"""evalkit against a real engine: vLLM's CPU build serving the tiny local model.

- the matrix of configs/vllm-tiny.yaml through the real `evalkit matrix` command: every cell
  starts, becomes ready, is evaluated and stops with no process left (checked by pid);
- forced failures (a bad flag; a fatal log line while the whole process tree is up; a worker
  killed mid-eval) fail their cells cleanly and leave no process either;
- GSM8K marks equal the `lm_eval` CLI's, question by question, against the same server;
- the detector finds the tiny model's natural greedy loops from token ids, and the loop it
  reports is really in the text.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.config import load_config
from evalkit.config.cells import expand
from evalkit.config.loader import _UniqueKeyLoader
from evalkit.engine import EngineProcess, free_port
from evalkit.engine.launch import build_launch
from evalkit.errors import EngineError
from evalkit.evals import gsm8k
from evalkit.evals.base import EvalContext, Server
from tests.conftest import CONFIGS
from tests.helpers.lm_eval import lm_eval_cli
from tests.real_engine.helpers import (
    REPORT,
    RUNS,
    TINY_MODEL,
    alive,
    engine_processes,
    evalkit_cli,
    pids_in_log,
    read_cells,
    read_jsonl,
    venv_tool,
)

pytestmark = pytest.mark.real_engine
TINY = CONFIGS / "vllm-tiny.yaml"
LOCK = RUNS.parent / "devices.lock"
"""The suite's own device lock: a CPU run on this box neither waits for nor blocks a GPU matrix."""


def run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def assert_no_process_left(cell: dict[str, Any], log: Path) -> set[int]:
    """The cell's engine pid, every pid the engine log names, and any venv python: all gone."""
    pids = pids_in_log(log) | ({cell["engine_pid"]} if cell.get("engine_pid") else set())
    assert not alive(pids), f"{cell['id']}: still alive: {alive(pids)}"
    assert not engine_processes(), f"{cell['id']}: leftover engine processes: {engine_processes()}"
    return pids


# -- the matrix -------------------------------------------------------------------------------


def consistency_checks(summary: dict[str, Any], cid: str) -> list[str]:
    """The cell's outcomes on the config's consistency thresholds, e.g. `PASS vs eager-seqs1 (p_adj 1)`."""
    row = next(r for r in summary["cells"] if r["id"] == cid)
    return [f"{c['outcome']} {c['check']} vs {c['reference']} (p_adj {c['p_adj']:.3g})"
            for c in row.get("checks", []) if c["metric"] == "consistency.disagree_rate"]


def decode(sequences: list[list[int]]) -> list[str]:
    return venv_tool(["decode", str(TINY_MODEL / "tokenizer.json")], sequences)


@pytest.mark.timeout(1800)
def test_matrix_every_cell_runs_and_stops_clean() -> None:
    config = load_config(TINY)
    rid = run_id("vllm-tiny")
    t0 = time.monotonic()
    out = evalkit_cli(["matrix", "--config", str(TINY), "--results-dir", str(RUNS), "--run-id", rid, "--json",
                       "--lock-file", str(LOCK)], 1700)
    wall = round(time.monotonic() - t0, 1)
    assert out.returncode == 0, f"evalkit matrix exit {out.returncode}\n{out.stderr[-4000:]}"
    run_dir = RUNS / rid
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
    summary = json.loads(out.stdout)
    cells = read_cells(run_dir)
    assert list(cells) == [c.id for c in expand(config)]

    rows, samples_by_cell = [], {}
    for cid, cell in cells.items():
        log = run_dir / cid / "engine.log"
        assert cell["status"] == "ok", f"{cid}: {cell.get('error')}"
        timings = cell["timings"]
        assert timings["engine_start_s"] and timings["engine_ready_s"] and timings["engine_stop_s"] is not None
        text = log.read_text("utf-8", "replace")
        assert "Initializing a V1 LLM engine (v0.32.0)" in text  # the real engine, not the simulator
        assert cell["effective_mode"] == "NONE"  # vLLM's own config dump: no CUDA graphs on CPU
        assert_no_process_left(cell, log)
        g, r = cell["metrics"]["gsm8k"], cell["metrics"]["repetition"]
        assert g["n"] == 100 and g["num_fewshot"] == 5
        # Every question answered, none retried but for one cause: a pooled keep-alive connection
        # that vLLM closed as lm-eval reused it (vLLM 0.32 closes an idle one after 5 s,
        # envs.py VLLM_HTTP_TIMEOUT_KEEP_ALIVE; aiohttp 3.14 keeps it 15 s, connector.py:301),
        # which lm-eval retries. Seen once in a CI run (2 of 100 in eager-seqs16): the engine's
        # answers were whole, and the retries are in cell.json as they happened.
        retried = [line for line in (run_dir / cid / "gsm8k.log").read_text().splitlines() if "retrying" in line]
        assert len(retried) == g["retries"] and all("ServerDisconnectedError" in line for line in retried), retried
        assert not [s for s in read_jsonl(run_dir / cid / "gsm8k.samples.jsonl") if s.get("error")]
        assert r["n"] == 8 and r["token_source"] == "token_ids"
        samples = read_jsonl(run_dir / cid / "repetition.samples.jsonl")
        samples_by_cell[cid] = samples
        assert all(s["token_source"] == "token_ids" for s in samples)
        # The tiny model loops under greedy decoding: the detector must see it in every cell.
        assert r["collapsed"] >= 1, f"{cid}: no collapse found in {r}"
        # What the engine reports of itself: its version (GET /version) and the tokens its /metrics
        # counted around the evals' one wave (run/wave.py: concurrent evals' counters cannot be
        # told apart): at least one per GSM8K question and per long generation.
        assert cell["engine_version"] == "0.32.0", cell.get("engine_version")
        scraped = cell["engine_metrics"]
        assert scraped["wave"]["generation_tokens"] >= g["n"] + r["n"], scraped
        d = cell["metrics"]["divergence"]
        assert d["n"] == 16 and d["tokens"] > 16 * 100 and d["setup"]["fields"]["request"] == "prompt_logprobs"
        c = cell["metrics"]["consistency"]
        assert c["n"] == 16 and c["copies"] == 4 and 0 <= c["disagree"] <= 16
        # The A/B threshold on the disagree share is judged in every seqs16 cell (vs its seqs1 twin).
        assert len(consistency_checks(summary, cid)) == (cell["axes"]["batch"] == "seqs16"), cid
        rows.append({
            "id": cid, "status": cell["status"], "ready_s": timings["engine_ready_s"],
            "effective_mode": cell["effective_mode"], "flexible": round(g["flexible"], 3),
            "collapse_rate": r["collapse_rate"], "collapsed": r["collapsed"], "n": r["n"],
            "token_source": r["token_source"],
            "consistency": {"disagree": c["disagree"], "n": c["n"], "diverge_at_median": c["diverge_at_median"],
                            "eval_s": timings["consistency_s"], "cell_s": timings["total_s"],
                            "checks": consistency_checks(summary, cid)},
            "samples": [{"id": s["id"], "verdict": s["verdict"], "period": s["evidence"]["period"],
                         "loop_tokens": s["evidence"]["loop_tokens"], "finish_reason": s["metrics"]["finish_reason"]}
                        for s in samples],
        })

    # The loop the detector reports is in the text. For an exactly periodic tail or a token run,
    # the unit's ids three times over, decoded, occur verbatim in the generated text; for a loop
    # without a fixed period, the unit recurs at least three times. Byte tokens that are not
    # whole UTF-8 characters decode to U+FFFD, and vLLM's incremental detokenizer renders them
    # differently from a one-shot decode, so failing a verbatim match U+FFFD is removed on both
    # sides (a unit of bytes alone, e.g. a run of one byte token, must then match verbatim).
    # Only a loop's evidence holds token ids: a sample the stutter or soup rules alone called
    # collapsed (the random tiny model writes byte-token garbage too: U+FFFD, words without
    # punctuation) shows the text's pieces, whose ids are hashes of the split text.
    collapsed = [(cid, s) for cid, ss in samples_by_cell.items() for s in ss
                 if s["verdict"] == "collapsed" and "loop" in s["evidence"]["categories"]]
    tripled = decode([list(s["evidence"]["unit_ids"]) * 3 for _, s in collapsed])
    single = decode([list(s["evidence"]["unit_ids"]) for _, s in collapsed])
    missing, candidates = [], []
    for (cid, s), three, one in zip(collapsed, tripled, single):
        exact = bool({"periodic_tail", "token_run"} & set(s["evidence"]["signals"]))
        text, needle, unit = (x.replace("\ufffd", "") for x in (s["text"], three, one))
        if exact:
            ok = three in s["text"] or (bool(needle) and needle in text)
        else:
            ok = s["text"].count(one) >= 3 or (bool(unit) and text.count(unit) >= 3)
        if not ok:
            missing.append(f"{cid}/{s['id']} {s['evidence']['signals']} unit {one!r}")
        elif exact and "\ufffd" not in three and (at := s["text"].find(three)) >= 0:
            candidates.append((-s["evidence"]["period"], cid, s, one, at))
    assert not missing, "reported loops not found in the text: " + "; ".join(missing)
    excerpts = []
    for _, cid, s, one, at in sorted(candidates, key=lambda c: c[0]):
        if len(excerpts) < 2 and all(e["period"] != s["evidence"]["period"] for e in excerpts):
            excerpts.append({"cell": cid, "id": s["id"], "signals": s["evidence"]["signals"],
                             "period": s["evidence"]["period"], "onset": s["evidence"]["onset"],
                             "loop_tokens": s["evidence"]["loop_tokens"],
                             "finish_reason": s["metrics"]["finish_reason"], "unit_text": one,
                             "excerpt": s["text"][max(0, at - 60): at + 200]})
    assert len(excerpts) == 2
    found = len(collapsed) - len(missing)

    # Batch invariance of greedy output (the A/B axis): reported, judged by the config's thresholds.
    invariance = {}
    for graph in config.axes["graph"]:
        one = read_jsonl(run_dir / f"{graph}-seqs1" / "gsm8k.samples.jsonl")
        many = read_jsonl(run_dir / f"{graph}-seqs16" / "gsm8k.samples.jsonl")
        invariance[graph] = sum(a["response"] != b["response"] for a, b in zip(one, many))
    # Logprob divergence between real cells (eager vs torch.compile, 1 vs 16 sequences): measured
    # for every cell against the baseline, whatever it is (float32 on CPU: tiny, and recorded).
    divergence = {}
    for row in summary["cells"]:
        for against in ("vs_baseline", "vs_ab"):
            delta = (row.get(against) or {}).get("divergence.kl_p99")
            if delta is not None:
                assert delta["value"] is not None and delta["value"] >= 0, (row["id"], against, delta)
                divergence[f"{row['id']} {against}"] = {
                    m: row[against][f"divergence.{m}"]["value"] for m in ("kl_p99", "kl_mean", "top1_agreement",
                                                                          "logprob_abs_mean")}
    assert len(divergence) == 5  # 3 cells vs the baseline, 2 seqs16 cells vs their seqs1 twin
    REPORT["matrix"] = {"config": "configs/vllm-tiny.yaml", "run": str(run_dir), "wall_s": wall, "cells": rows,
                        "divergence": divergence,
                        "excerpts": excerpts, "batch_invariance": invariance, "units_found_in_text": f"{found}/{len(collapsed)}",
                        "exit_code": summary.get("exit_code")}


# -- forced failures --------------------------------------------------------------------------


def fault_config(tmp_path: Path) -> Path:
    """vllm-tiny with one axis of broken cells; the fatal pattern fires once the Worker loads weights."""
    data = yaml.load(TINY.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506
    data = copy.deepcopy(data)
    data["axes"] = {"fault": {
        "badflag": {"args": ["--no-such-flag"]},
        "fatalline": {"settings": {"graph_mode": "eager"}},
    }}
    data.pop("baseline"), data.pop("ab"), data.pop("thresholds")
    data["engine"]["fatal_patterns"] = [r"\[default_loader\.py:\d+\] Loading weights took"]
    path = tmp_path / "vllm-tiny-faults.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.timeout(900)
def test_forced_failures_fail_the_cell_and_leave_no_process(tmp_path: Path) -> None:
    rid = run_id("vllm-tiny-faults")
    out = evalkit_cli(["matrix", "--config", str(fault_config(tmp_path)), "--results-dir", str(RUNS), "--run-id", rid,
                       "--quiet", "--lock-file", str(LOCK)], 800)
    assert out.returncode == 3, f"expected exit 3 (a cell failed), got {out.returncode}\n{out.stderr[-3000:]}"
    cells = read_cells(RUNS / rid)
    faults = []
    for cid, expected in (("badflag", "EngineExited"), ("fatalline", "EngineFault")):
        cell = cells[cid]
        assert cell["status"] == "error" and cell["error"]["type"] == expected, cell.get("error")
        log = RUNS / rid / cid / "engine.log"
        pids = assert_no_process_left(cell, log)
        faults.append({"id": cid, "status": cell["status"], "error_type": expected, "message": cell["error"]["message"],
                       "pids": sorted(pids), "alive_after": sorted(alive(pids))})
    assert cells["badflag"]["error"]["exit_code"] == 2  # argparse's usage error
    # The fatal line came from the Worker: API server, EngineCore and Worker were all up, and all stopped.
    assert len(faults[1]["pids"]) >= 3, faults[1]
    REPORT.setdefault("faults", []).extend(faults)


@pytest.mark.timeout(600)
def test_worker_killed_mid_eval_is_an_engine_error_and_nothing_is_left(tmp_path: Path) -> None:
    config = load_config(TINY)
    cell = next(c for c in expand(config) if c.id == "eager-seqs16")
    launch = build_launch(config, cell, free_port())
    log = tmp_path / "engine.log"
    engine = EngineProcess(argv=launch.argv, env={**os.environ, **launch.env}, log_path=log, base_url=launch.base_url,
                           served_name=config.served, health_path=launch.health_path,
                           fatal_patterns=launch.fatal_patterns, stop_grace_s=20)
    with engine:
        engine.wait_ready(600)
        text = log.read_text("utf-8", "replace")
        worker = int(text.split("(Worker pid=", 1)[1].split(")", 1)[0])
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(EngineError, match="fatal line|exited") as raised:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                engine.check_alive()
                time.sleep(0.5)
    pids = pids_in_log(log) | {engine.pid}
    assert not alive(pids) and not engine_processes()
    REPORT.setdefault("faults", []).append({
        "id": f"worker_sigkill (Worker pid {worker} killed after ready)", "status": "error",
        "error_type": type(raised.value).__name__, "message": str(raised.value), "pids": sorted(pids),
        "alive_after": sorted(alive(pids))})


# -- GSM8K equality with the lm_eval CLI --------------------------------------------------------


def cli_prompt(sample: dict[str, Any]) -> str:
    args = sample["arguments"]
    if isinstance(args, dict):
        return args["gen_args_0"]["arg_0"]
    return args[0][0] if isinstance(args[0], (list, tuple)) else args[0]


@pytest.mark.timeout(1200)
def test_gsm8k_marks_identical_to_the_lm_eval_cli(tmp_path: Path) -> None:
    config = load_config(TINY)
    # The first `limit` questions, lm-eval's own --limit, on both sides. evalkit's default draws a
    # stratified subset (evals/subsets.py) and gives each question the few-shot examples a full
    # run gives it (lm_eval_adapter._pin_fewshot); the CLI's --samples gives them by position
    # instead, so on a drawn subset the two ask other prompts by design. The config's own subset
    # rule made this test compare a stratified 100 with the CLI's first 100 (issue 46).
    settings = config.evals.gsm8k.model_copy(update={"subset": "first"})
    limit = settings.limit or 100
    # One sequence at a time: the server's greedy output cannot depend on how requests are batched.
    cell = next(c for c in expand(config) if c.axes == config.baseline)
    launch = build_launch(config, cell, free_port())
    task_dir = tmp_path / "run" / "lm_eval_tasks"  # where evalkit writes it in a run folder
    gsm8k.write_task_yaml(task_dir, settings)
    with EngineProcess(argv=launch.argv, env={**os.environ, **launch.env}, log_path=tmp_path / "engine.log",
                       base_url=launch.base_url, served_name=config.served, health_path=launch.health_path,
                       fatal_patterns=launch.fatal_patterns) as engine:
        engine.wait_ready(600)
        ours = gsm8k.run_gsm8k(settings, EvalContext(Server(launch.base_url, config.served), tmp_path, tmp_path / "run",
                                                   limit=limit))
        theirs = lm_eval_cli(settings, launch.base_url, config.served, task_dir, tmp_path / "lm_eval_out", limit=limit)
        engine.check_alive()
    by_doc: dict[int, dict[str, Any]] = {}
    for s in theirs:
        row = by_doc.setdefault(s["doc_id"], {"prompt": cli_prompt(s), "response": s["resps"][0][0]})
        row[s["filter"]] = (s["filtered_resps"][0], bool(s["exact_match"]))
    assert sorted(by_doc) == [r["doc_id"] for r in ours.samples] == list(range(limit))
    same = {"same_prompt": 0, "same_response": 0, "same_extracted": 0, "same_marks": 0}
    for row in ours.samples:
        cli = by_doc[row["doc_id"]]
        same["same_prompt"] += hashlib.sha256(cli["prompt"].encode()).hexdigest()[:16] == row["prompt_hash"]
        same["same_response"] += cli["response"] == row["response"]
        same["same_extracted"] += all(cli[f][0] == row[f"{f}.extracted"] for f in gsm8k.FILTERS)
        same["same_marks"] += all(cli[f][1] == row[f"{f}.correct"] for f in gsm8k.FILTERS)
    theirs_acc = {short: sum(by_doc[d][name][1] for d in by_doc) / len(by_doc)
                  for short, name in (("strict", "strict-match"), ("flexible", "flexible-extract"))}
    numbers = sum(1 for r in ours.samples if r["flexible-extract.extracted"] != "[invalid]")
    REPORT["gsm8k_equality"] = {"n": limit, **same, "numbers_extracted": numbers, "cell": cell.id,
                                "ours": {k: ours.metrics[k] for k in ("strict", "flexible")}, "theirs": theirs_acc}
    assert same == {k: limit for k in same}, same
    assert ours.metrics["strict"] == pytest.approx(theirs_acc["strict"], abs=1e-12)
    assert ours.metrics["flexible"] == pytest.approx(theirs_acc["flexible"], abs=1e-12)
    assert numbers >= limit // 2  # the comparison is not between empty answers
    assert not engine_processes()
