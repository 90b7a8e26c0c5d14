"""The consistency eval: identical greedy requests, sent together, compared with each other.

Against the simulator (its app in this process): a healthy cell's copies agree but for a rare near-tie, the buggy
cell's race parts them (only when they share batches with other requests: sent one at a time
they agree), and through `evalkit matrix` (simulator processes: e2e) the disagree share is compared with the baseline's by
Fisher's test, breaks a threshold in the buggy cell only, and the reports show where the copies
parted. The metrics are a pure function of the config."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.config import parse_config
from evalkit.evals import base, registry
from evalkit.evals.base import EvalContext, setup_fingerprint
from evalkit.evals.consistency import EVAL, ConsistencySettings, compare_copies, setup_fields, summarize
from evalkit.evals.prompts import Prompt
from evalkit.store import read_json, read_jsonl
from tests.helpers.runs import config_dict
from tests.helpers.sim import asgi_server

BUGGY = ("-tp", "8", "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "off")
HEALTHY = ("-tp", "8", "--enable-dp-attention", "--cudagraph-mode", "PIECEWISE", "--sim-fix", "on")
PROMPT = Prompt("p-1", "story", "Write a story.")


def output(text: str) -> dict[str, Any]:
    return {"text": text, "finish_reason": "length"}


def test_copies_that_agree_have_no_parting_place() -> None:
    row = compare_copies(PROMPT, [output("The same words.")] * 3, [4, 0, 9])
    assert (row["disagree"], row["variants"], row["diverge_at_token"], row["parted"]) == (False, 1, None, None)
    assert row["sent"] == [4, 0, 9] and row["texts"] == ["The same words."] * 3


def test_copies_that_part_say_where_and_which_copy_took_which_text() -> None:
    texts = ["The cat sat on the mat.", "The cat sat on the hat.", "The cat sat on the mat.", "The cat ran."]
    row = compare_copies(PROMPT, [output(t) for t in texts], [3, 1, 0, 2])
    assert (row["disagree"], row["variants"]) == (True, 3)
    assert (row["diverge_at_char"], row["diverge_at_token"]) == (8, 2)  # "The", " cat" shared
    assert row["parted"] == {"before": "The cat ", "after": [{"copies": [0, 2], "text": "sat on the mat."},
                                                             {"copies": [1], "text": "sat on the hat."},
                                                             {"copies": [3], "text": "ran."}]}


def test_the_disagree_share_and_the_median_parting_place() -> None:
    rows = [compare_copies(PROMPT, [output(a), output(b)], [0, 1])
            for a, b in [("a b c", "a b c"), ("a b c", "a x c"), ("a b c d e", "a b c d f"), ("x", "y")]]
    # parting at pieces 1 (" b"/" x"), 4 (" e"/" f") and 0: the median is 1
    assert summarize(rows) == {"n": 4, "disagree": 3, "disagree_rate": 0.75, "diverge_at_median": 1}
    assert summarize(rows[:1])["diverge_at_median"] is None


def test_its_setup_is_fingerprinted_as_every_eval_s_and_as_results_stored_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The setup is stored through `setup_fingerprint`, which adds evalkit's version; the hash is
    the one evalkit stored when this eval built its fingerprint itself, so a stored run still
    compares with a new one of the same setup (deltas refuse pairs whose hashes differ)."""
    monkeypatch.setattr(base, "__version__", "0.1.0")
    assert setup_fingerprint(setup_fields(ConsistencySettings(), "v1")) == {
        "hash": "a1fbc4a77e9a58e8",
        "fields": {"prompt_set": "long_generation_v1", "prompt_set_version": "v1", "copies": 4, "max_tokens": 64,
                   "concurrency": 64, "seed": 0, "evalkit_version": "0.1.0"}}


def test_its_metrics_exist_only_where_a_config_names_it() -> None:
    named = parse_config(config_dict(evals={"consistency": {"count": 8}}), "c.yaml")
    assert [s.name for s in named.evals.evalset.metrics(named.evals) if s.name.startswith("consistency.")] == [
        "consistency.disagree_rate", "consistency.diverge_at_median"]
    plain = parse_config(config_dict(), "n.yaml").evals
    assert not [s for s in plain.evalset.metrics(plain) if s.name.startswith("consistency.")]
    assert not [s for s in registry.builtins().metrics() if s.name.startswith("consistency.")]


def test_a_count_beyond_the_prompt_set_is_refused_naming_the_field() -> None:
    with pytest.raises(Exception, match=r"evals\.consistency\.count: 99 prompts asked, long_generation_v1 has 72"):
        EVAL.check(ConsistencySettings(count=99))


def run_on(args: tuple[str, ...], tmp_path: Path, **settings: Any) -> Any:
    ctx = EvalContext(asgi_server(*args), tmp_path, tmp_path)
    return EVAL.run(ctx, ConsistencySettings(**settings))


def test_the_buggy_cell_s_copies_part_only_when_they_share_batches(tmp_path: Path) -> None:
    together = run_on(BUGGY, tmp_path)
    alone = run_on(BUGGY, tmp_path, concurrency=1, count=8)
    healthy = run_on(HEALTHY, tmp_path)
    assert together.metrics["disagree"] >= 8, together.metrics  # the race: ~40-70% of 32 prompts
    assert healthy.metrics["disagree"] <= 3, healthy.metrics  # a rare near-tie at most
    assert alone.metrics["disagree"] == 0  # one request at a time: nothing to race with
    for row in together.samples:
        assert sorted(place for r in together.samples for place in r["sent"]) == list(range(128))
        if row["disagree"]:
            at = row["diverge_at_char"]
            assert len({text[:at] for text in row["texts"]}) == 1 and len({text[at:at + 1] for text in row["texts"]}) > 1
            assert sorted(c for v in row["parted"]["after"] for c in v["copies"]) == [0, 1, 2, 3]


CONFIG = """\
model: sim/deepseek-v4
served_name: deepseek-v4-sim
engine: {profile: sim, args: ["--sim-seed", "0"]}
axes:
  cell:
    base: {settings: {tensor_parallel: 8, graph_mode: FULL}, args: ["--sim-fix", "on"]}
    healthy: {settings: {tensor_parallel: 8, dp_attention: true, graph_mode: PIECEWISE}, args: ["--sim-fix", "on"]}
    buggy: {settings: {tensor_parallel: 8, dp_attention: true, graph_mode: PIECEWISE}, args: ["--sim-fix", "off"]}
baseline: {cell: base}
evals:
  gsm8k: {enabled: false}
  repetition: {enabled: false}
  consistency: {}
thresholds:
  - {metric: consistency.disagree_rate, max_rise_vs_baseline: 0.2, alpha: 0.01}
timeouts: {startup: 60, stop_grace: 5}
"""


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three simulated cells: the baseline, a healthy DP-attention cell and the buggy one. Module-scoped,
    so each test that reads it asks for `engine_processes` itself (and is e2e)."""
    tmp = tmp_path_factory.mktemp("consistency")
    (tmp / "c.yaml").write_text(CONFIG, encoding="utf-8")
    result = CliRunner().invoke(main, ["matrix", "--config", str(tmp / "c.yaml"), "--run-id", "c", "--results-dir",
                                       str(tmp / "results"), "--lock-file", str(tmp / "lock"), "--no-history", "--quiet"])
    assert result.exit_code == 1, result.output  # the buggy cell breaks the threshold
    return tmp / "results" / "c"


def test_the_buggy_cell_breaks_a_threshold_on_the_disagree_share_vs_the_baseline(matrix: Path,
                                                                                engine_processes: None) -> None:
    summary = read_json(matrix / "summary.json")
    cells = {c["id"]: c for c in summary["cells"]}
    assert [c["status"] for c in cells.values()] == ["ok"] * 3
    recorded = {m["name"]: m for m in summary["metrics"]}
    assert recorded["consistency.disagree_rate"]["comparison"] == "count"
    assert recorded["consistency.diverge_at_median"]["comparison"] == "continuous"
    buggy = cells["buggy"]
    (flag,) = buggy["flags"]
    assert (flag["metric"], flag["check"]) == ("consistency.disagree_rate", "max_rise_vs_baseline")
    assert buggy["vs_baseline"]["consistency.disagree_rate"]["p_value"] < 0.01
    assert cells["healthy"]["flags"] == [] and cells["healthy"]["vs_baseline"]["consistency.disagree_rate"]["p_value"] > 0.05
    assert buggy["metrics"]["consistency.n"] == 32 and buggy["metrics"]["consistency.disagree"] >= 8


def test_the_reports_show_where_the_buggy_cell_s_copies_parted(matrix: Path, engine_processes: None) -> None:
    first = next(row for row in read_jsonl(matrix / "buggy" / "consistency.samples.jsonl") if row["disagree"])
    args = ["--results-dir", str(matrix.parent)]
    markdown = CliRunner().invoke(main, ["report", "c", "--format", "markdown", *args]).output
    assert "#### Disagree evidence" in markdown
    assert f"parting at token {first['diverge_at_token']} (character {first['diverge_at_char']})" in markdown
    continuation = first["parted"]["after"][0]["text"]
    assert f"⟦{continuation[:40]}" in html.unescape(markdown)
    page = CliRunner().invoke(main, ["report", "c", "--format", "html", *args]).output
    assert f'<mark class="onset">{html.escape(continuation[:40])}' in page and "different texts, parting at token" in page
