"""What the engine itself reports, per cell (issue 17 part 2): its version against the source tree it
should run, its /metrics counters around each eval, thresholds on them, and throughput.

One real matrix on the real simulator serves most tests (module-scoped: four engine starts in all):

    base     source = commit c1, reports c1             spec decoding K=3, acceptance 0.7
    lowspec  source = commit c1, reports c1             spec decoding K=3, acceptance 0.3
    nospec   source = commit c1, reports c1             no spec decoding
    stale    source = the root commit, reports c1       (a version naming another commit than the tree)

with the threshold `{metric: engine.spec_acceptance_rate, min: 0.6}`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from prometheus_client import CollectorRegistry, Counter, generate_latest
from rich.console import Console

from evalkit.cli import main
from evalkit.config import load_config
from evalkit.engine.metrics import Scrape, figures, parse
from evalkit.evals.engine_figures import NO_SPEC, VERIFY_ONLY, EngineFigures
from evalkit.gitinfo import MISMATCH_WORDS, commit_of_version, match_source
from evalkit.profiles.sglang import PROFILE as SGLANG
from evalkit.profiles.vllm import VLLM_METRICS
from evalkit.render import render
from evalkit.sim.config import Reports
from evalkit.sim.reports import EngineMetrics
from evalkit.store import read_json, read_jsonl
from evalkit.verdict.deltas import summarize
from tests.helpers.git import add_branch, make_repo
from tests.helpers.sim import SimServer

COMMON = '["--sim-fix-module", "simfix", "--sim-natural-loop-rate", "0"]'
EVALS = "evals:\n  gsm8k: {num_fewshot: 1}\n  repetition: {count: 4, max_tokens: 256, early_abort: false}\n"


def report(summary: dict[str, Any], fmt: str) -> str:
    """A report as text; the terminal one as a wide terminal shows it."""
    if fmt != "terminal":
        return render(summary, fmt) or ""
    console = Console(file=io.StringIO(), width=250, record=True)
    render(summary, fmt, console=console)
    return console.export_text()


def matrix(config: Path, results: Path, run_id: str, *extra: str) -> Result:
    return CliRunner().invoke(main, ["matrix", "--config", str(config), "--run-id", run_id, "--results-dir",
                                     str(results), "--no-history", "--limit", "8", *extra])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One matrix for the module; its cells start simulator processes, so each test that reads it
    asks for `engine_processes` itself (module scope cannot), which makes it e2e."""
    root = tmp_path_factory.mktemp("engine-report")
    repo, first = make_repo(root)
    c1 = add_branch(repo, "next", 2, first_bad=99)[1]
    reports = f'"--sim-version", "0.32.1.dev1+g{c1[:9]}"'
    spec = '"--sim-spec-decode", "3", "--sim-spec-acceptance"'
    config = root / "engine.yaml"
    config.write_text(f"""
model: sim/engine-report
served_name: engine-report
engine: {{profile: sim, package: simfix, args: {COMMON}}}
# each eval's engine figures are its own only when the evals take turns (a wave's are scraped once)
run: {{evals: apart}}
axes:
  cell:
    base: {{source: {{repo: "{repo}", ref: "{c1}"}}, args: [{reports}, {spec}, "0.7"]}}
    lowspec: {{source: {{repo: "{repo}", ref: "{c1}"}}, args: [{reports}, {spec}, "0.3"]}}
    nospec: {{source: {{repo: "{repo}", ref: "{c1}"}}, args: [{reports}]}}
    stale: {{source: {{repo: "{repo}", ref: "{first}"}}, args: [{reports}, {spec}, "0.7"]}}
baseline: {{cell: base}}
{EVALS}thresholds:
  - {{metric: engine.spec_acceptance_rate, min: 0.6}}
""", encoding="utf-8")
    result = matrix(config, root / "results", "er", "--cache-dir", str(root / "cache"))
    path = root / "results" / "er"
    summary = summarize(path, load_config(config))
    return {"result": result, "path": path, "summary": summary, "c1": c1, "first": first,
            "cells": {c["id"]: c for c in summary["cells"]}, "record": lambda cid: read_json(path / cid / "cell.json")}


def test_commits_are_read_from_setuptools_scm_versions_and_releases_name_none() -> None:
    assert commit_of_version("0.32.1.dev12+g1a2b3c4d") == "1a2b3c4d"
    assert commit_of_version("0.32.1.dev12+g1A2B3C4D.d20261204") == "1a2b3c4d"  # a dirty tree
    assert commit_of_version("0.5.23+cu128.gabc1234") == "abc1234"
    assert commit_of_version("0.32.0") is None and commit_of_version("0.1.0+sim") is None
    sha = "1a2b3c4d" + "0" * 32
    assert match_source("0.32.1.dev12+g1a2b3c4d", sha).status == "match"
    wrong = match_source("0.32.1.dev12+gffffffff", sha)
    assert wrong.status == "mismatch" and wrong.message.startswith(MISMATCH_WORDS) and "1a2b3c4d0000" in wrong.message
    assert match_source("0.32.0", sha).status == "unknown" and match_source(None, sha).status == "unknown"


def test_figures_are_deltas_of_the_engine_s_own_prometheus_text() -> None:
    engine = EngineMetrics("m", Reports(spec_tokens=3, spec_acceptance=0.7))
    engine.generated(11)
    engine.finished(11, "stop", 0.02)
    before = Scrape(parse(engine.text().decode()))
    engine.generated(31)
    engine.finished(31, "length", 0.01)
    engine.generated(5)
    engine.finished(5, None, None)  # aborted: its tokens were made, it is no success
    found = figures(before, Scrape(parse(engine.text().decode()), 0.003), VLLM_METRICS, "/metrics")
    assert found["generation_tokens"] == 36 and found["requests"] == 1
    assert found["tpot_mean_s"] == pytest.approx(0.01) and found["tpot_n"] == 1
    # 30 decoded tokens at K=3, p=0.7: floor(30 * 2.1 / 3.1) = 20 accepted drafts, 10 steps of 3 drafts
    assert (found["spec_accepted_tokens"], found["spec_drafts"], found["spec_draft_tokens"]) == (20, 10, 30)
    assert found["spec_acceptance_rate"] == pytest.approx(20 / 30) and found["spec_mean_accepted_len"] == 3.0
    assert found["scrape_s"] == 0.003
    failed = figures(before, Scrape(error="GET /metrics: HTTP 404"), VLLM_METRICS, "/metrics")
    assert failed == {"scrape_s": 0.0, "missing": "GET /metrics: HTTP 404"}


def test_sglang_s_mean_accepted_length_is_tokens_per_verify_call() -> None:
    """SGLang 0.5.23 counts verify steps, not drafts (observability/metrics_collector.py:1860-1869,
    both counted per finished request, :2110-2112): per request it reports completion tokens /
    verify calls (managers/tokenizer_manager.py:3165-3168); over an eval, the counters' deltas."""
    registry = CollectorRegistry()
    labels = {"model_name": "m", "engine_type": "unified"}
    tokens = Counter("sglang:generation_tokens_total", "", [*labels, "is_streaming"], registry=registry)
    verify = Counter("sglang:spec_verify_calls_total", "", list(labels), registry=registry)

    def finished(completion_tokens: int, verify_ct: int, streaming: str) -> None:
        tokens.labels(**labels, is_streaming=streaming).inc(completion_tokens)
        verify.labels(**labels).inc(verify_ct)

    finished(100, 40, "false")
    before = Scrape(parse(generate_latest(registry).decode()))
    finished(300, 100, "true")
    finished(60, 20, "false")
    assert SGLANG.metric_names is not None
    found = figures(before, Scrape(parse(generate_latest(registry).decode())), SGLANG.metric_names, "/metrics")
    assert found["generation_tokens"] == 360 and found["spec_drafts"] == 120
    assert found["spec_mean_accepted_len"] == pytest.approx(3.0)
    engine = EngineFigures()
    raw = {"engine_metrics": {"gsm8k": found}, "throughput": {}}
    assert engine.flat(raw)["engine.spec_accepted_len"] == pytest.approx(3.0)
    assert engine.absent(raw)["engine.spec_acceptance_rate"] == VERIFY_ONLY


def test_the_engine_reports_its_version_and_it_is_a_second_witness_to_the_import_path(run: dict[str, Any], engine_processes: None) -> None:
    """Each cell's tree is proven by where its package (the fix module) imports from; a version
    naming another commit than that tree (SGLang reports the installed build's, a vLLM tree may
    hold another commit's build) is noted, never the loud "ENGINE DOES NOT RUN ITS SOURCE"
    (a mismatch the running engine itself shows is: test_tree_proof.py)."""
    base, stale = run["record"]("base"), run["record"]("stale")
    version = f"0.32.1.dev1+g{run['c1'][:9]}"
    assert base["engine_version"] == stale["engine_version"] == version
    assert base["engine_check"]["status"] == "match" and base["engine_check"]["source_sha"] == run["c1"]
    assert [w["status"] for w in base["engine_check"]["witnesses"]] == ["match", "match"]
    check = stale["engine_check"]
    assert (check["status"], check["commit"], check["source_sha"]) == ("match", run["c1"][:9], run["first"])
    assert [(w["kind"], w["status"]) for w in check["witnesses"]] == [("import", "match"), ("version", "mismatch")]
    assert check["message"] == (f"the engine runs {run['first'][:12]}: simfix imports from {stale['imports']['origin']}; "
                                f"checked out {run['first'][:12]} but the engine reports version {version} "
                                f"(commit {run['c1'][:9]}), a build of another commit?")
    assert stale["imports"]["inside"] is True and run["first"] in stale["imports"]["tree"]
    assert MISMATCH_WORDS not in run["result"].output
    assert not [f for c in run["cells"].values() for f in c["flags"] if f["check"] == "source"]


def test_the_engine_s_token_counts_are_exactly_what_each_eval_received(run: dict[str, Any], engine_processes: None) -> None:
    record = run["record"]("base")
    gsm8k = list(read_jsonl(run["path"] / "base" / "gsm8k.samples.jsonl"))
    long = list(read_jsonl(run["path"] / "base" / "repetition.samples.jsonl"))
    engine = record["engine_metrics"]
    # each long generation, then its one teacher-forced scoring request (the model's own signal,
    # evals/model_signal.py: max_tokens 1, so one token more each)
    assert engine["repetition"]["generation_tokens"] == sum(row["metrics"]["n_tokens"] for row in long) + len(long) > 0
    assert engine["repetition"]["requests"] == 2 * len(long)
    # GSM8K first probes its endpoint with one max_tokens=1 completion: one request and one token more
    assert engine["gsm8k"]["generation_tokens"] == sum(row["completion_tokens"] for row in gsm8k) + 1
    assert engine["gsm8k"]["requests"] == len(gsm8k) + 1
    assert all(0 <= figures["scrape_s"] < 5 for figures in engine.values())
    throughput = record["throughput"]
    assert throughput["gsm8k"]["tokens_from"] == "usage"
    assert throughput["repetition"]["tokens_from"] == "stream token ids"
    # GSM8K is timed from its first request to its last answer (lm-eval's set-up is not the engine's
    # time: the first cell of a run loads it), the collapse check over the whole eval
    assert throughput["gsm8k"]["timed"] == "requests" and throughput["repetition"]["timed"] == "eval"
    assert throughput["gsm8k"]["wall_s"] == record["metrics"]["gsm8k"]["requests_s"] <= record["timings"]["gsm8k_s"]
    assert throughput["repetition"]["wall_s"] == record["timings"]["repetition_s"]
    for t in throughput.values():
        assert t["tokens_per_s"] == pytest.approx(t["completion_tokens"] / t["wall_s"])
    flat = run["cells"]["base"]["metrics"]
    assert flat["engine.tokens_per_s"] == pytest.approx(
        sum(t["completion_tokens"] for t in throughput.values()) / sum(t["wall_s"] for t in throughput.values()))
    assert flat["engine.generation_tokens"] == sum(f["generation_tokens"] for f in engine.values())


def test_a_spec_decoding_threshold_passes_fails_and_is_not_checked_without_spec_decoding(run: dict[str, Any], engine_processes: None) -> None:
    cells = run["cells"]
    spec = {cid: [f for f in c["flags"] if f["metric"] == "engine.spec_acceptance_rate"] for cid, c in cells.items()}
    assert 0.6 < cells["base"]["metrics"]["engine.spec_acceptance_rate"] < 0.75 and spec["base"] == []
    assert cells["base"]["metrics"]["engine.spec_accepted_len"] > 2.5
    [low] = spec["lowspec"]
    assert low["check"] == "min" and low["action"] == "fail" and low["value"] < 0.4
    [unchecked] = spec["nospec"]
    assert unchecked["not_checked"] == NO_SPEC and unchecked["action"] == "fail"
    assert unchecked["message"] == f"nospec: spec decoding acceptance rate not checked: {NO_SPEC}"
    assert "engine.spec_acceptance_rate" not in cells["nospec"]["metrics"]
    assert run["summary"]["exit_code"] == 1 == run["result"].exit_code


def test_tokens_per_s_is_a_column_of_every_report(run: dict[str, Any], engine_processes: None) -> None:
    header = next(line for line in report(run["summary"], "markdown").splitlines() if line.startswith("| cell"))
    assert "| tokens/s |" in header and "| engine TPOT |" in header
    assert "tokens/s" in report(run["summary"], "terminal") and ">tokens/s<" in report(run["summary"], "html")
    rows = list(csv.DictReader(io.StringIO(report(run["summary"], "csv"))))
    assert {row["cell"] for row in rows} == {"base", "lowspec", "nospec", "stale"}
    assert all(float(row["engine.tokens_per_s"]) > 0 and float(row["engine.generation_tokens"]) > 0 for row in rows)
    assert float(next(r for r in rows if r["cell"] == "base")["engine.spec_acceptance_rate"]) > 0.6
    assert {row["engine_version"] for row in rows} == {f"0.32.1.dev1+g{run['c1'][:9]}"}


def test_a_failed_scrape_is_recorded_with_its_reason_and_the_cell_passes(tmp_path: Path, engine_processes: None) -> None:
    config = tmp_path / "noscrape.yaml"
    config.write_text("model: sim/x\nserved_name: x\nengine: {profile: sim, metrics_path: /no-metrics}\n"
                      "evals:\n  gsm8k: {enabled: false}\n  repetition: {count: 2, max_tokens: 128}\n"
                      "thresholds:\n  - {metric: engine.tpot_s, max: 0.05, action: warn}\n", encoding="utf-8")
    result = matrix(config, tmp_path / "results", "ns")
    assert result.exit_code == 0, result.output
    record = read_json(next((tmp_path / "results" / "ns").glob("*/cell.json")))  # the one cell of an axis-less matrix
    assert record["status"] == "ok"
    assert record["engine_metrics"] == {"repetition": {"scrape_s": record["engine_metrics"]["repetition"]["scrape_s"],
                                                       "missing": "GET /no-metrics: HTTP 404"}}
    assert record["throughput"]["repetition"]["tokens_from"] == "stream token ids"  # the client still counts
    summary = summarize(tmp_path / "results" / "ns", load_config(config))
    [flag] = summary["cells"][0]["flags"]
    assert flag["message"].endswith("engine TPOT not checked: no engine metrics (GET /no-metrics: HTTP 404)")


def test_an_external_server_is_scraped_only_when_its_profile_says_so(
    tmp_path: Path, sim_process: Callable[..., SimServer]
) -> None:
    """`--base-url` takes an address, so the server is a process (e2e), its /metrics read over HTTP."""
    text = ("model: sim/x\nserved_name: sim-model\nengine: {{profile: {profile}}}\n"
            "evals:\n  gsm8k: {{enabled: false}}\n  repetition: {{count: 2, max_tokens: 128}}\n")
    url = sim_process("--sim-version", "0.32.0").url
    for profile in ("sim", "vllm"):
        config = tmp_path / f"{profile}.yaml"
        config.write_text(text.format(profile=profile), encoding="utf-8")
        assert matrix(config, tmp_path / "results", profile, "--base-url", url).exit_code == 0
    sim, vllm = (read_json(tmp_path / "results" / p / "external" / "cell.json") for p in ("sim", "vllm"))
    assert sim["engine_version"] == vllm["engine_version"] == "0.32.0"
    # an external server gets text requests: split text counts words, so only the engine's counter counts tokens
    assert sim["engine_metrics"]["repetition"]["generation_tokens"] > 0
    assert sim["throughput"]["repetition"]["tokens_from"] == "engine counter"
    assert vllm["engine_metrics"]["repetition"]["missing"].startswith("external server: not scraped")
    assert vllm["throughput"]["repetition"] | {"wall_s": 0} == {"completion_tokens": None, "wall_s": 0,
                                                                 "tokens_per_s": None, "tokens_from": None,
                                                                 "timed": "eval"}


def _row(cell_id: str, tokens_per_s: float, rise: float = 0.0, p: float = 1.0) -> dict[str, Any]:
    return {"id": cell_id, "metrics": {"engine.tokens_per_s": tokens_per_s},
            "vs_baseline": {"repetition.collapse_rate": {"diff": rise, "p_value": p}}}


@pytest.mark.parametrize(("speed", "rise", "p", "noted"), [
    (1.6, 0.30, 1e-5, True),    # much faster and collapsing significantly more
    (1.6, 0.30, 0.2, False),    # the rise is noise
    (1.6, 0.0, 1.0, False),     # just faster
    (1.2, 0.30, 1e-5, False),   # collapsing, but not much faster
])
def test_a_cell_much_faster_while_collapsing_gets_a_note(speed: float, rise: float, p: float, noted: bool) -> None:
    flags = EngineFigures().cell_flags({}, _row("dp8", 100 * speed, rise, p), _row("tp8", 100))
    assert [f["check"] for f in flags] == (["faster_while_collapsing"] if noted else [])
    if noted:
        assert flags[0]["message"] == ("dp8: faster while collapsing: loops are cheap to decode (1.6x the baseline's "
                                       "tokens/s while collapse rate rose +30.0 points, Fisher p = 1e-05)")


def test_a_faster_cell_whose_copies_disagree_more_gets_no_collapse_note() -> None:
    """Only the collapse rate makes the note: a buggy cell's disagree share also rises, and whether
    that cell is faster then depends on the box's load, not on loops."""
    row = _row("dp8", 160) | {"vs_baseline": {"consistency.disagree_rate": {"diff": 0.5, "p_value": 1e-6}}}
    record = {"metrics": {"consistency": {"n": 32, "disagree": 16}}}  # the cell ran the consistency eval
    assert EngineFigures().cell_flags(record, row, _row("tp8", 100)) == []


def test_cell_json_keeps_engine_figures_out_of_the_eval_metrics(run: dict[str, Any], engine_processes: None) -> None:
    record = run["record"]("base")
    assert set(record["metrics"]) == {"gsm8k", "repetition"}
    assert set(record["engine_metrics"]) == set(record["throughput"]) == {"gsm8k", "repetition"}
    json.dumps(record)  # plain JSON all the way down
