"""The whole flow, config -> cells -> engines -> evals -> store -> report: the CLI in this process
(tests/helpers/cli.py), every cell's engine a real simulator process (the `e2e` tier)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT
from tests.helpers.cli import evalkit_cli
from tests.test_sources import make_engine_repo


def sim_processes() -> list[psutil.Process]:
    """This test's simulators anywhere on the box, not only among this process's children:
    stricter than `engine_processes`, which sees only descendants."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "evalkit.sim" in cmd and "--served-model-name" in cmd and "src-test" in cmd:
            found.append(p)
    return found


@pytest.mark.usefixtures("engine_processes")
def test_fix_as_source_trees_checks_out_both_refs(tmp_path: Path) -> None:
    """The ATOM way: fix on/off are two commits; the sim reads the fix from a module on PYTHONPATH."""
    repo, before, after = make_engine_repo(tmp_path)
    config = tmp_path / "src.yaml"
    config.write_text(f"""
model: sim/src-test
served_name: src-test
engine:
  profile: sim
  package: simfix
  args: ["--sim-fix-module", "simfix"]
  settings: {{tensor_parallel: 8, dp_attention: true, graph_mode: PIECEWISE}}
axes:
  fix:
    fixon: {{source: {{repo: "{repo}", ref: "{after[:10]}"}}}}
    fixoff: {{source: {{repo: "{repo}", ref: "HEAD~1"}}}}
ab: {{axis: fix, on: fixon, off: fixoff}}
evals:
  repetition: {{enabled: false}}
thresholds:
  - {{metric: gsm8k.flexible, max_drop_ab: 0.02, alpha: 0.01}}
""")
    done = evalkit_cli("matrix", "--config", str(config), "--run-id", "src", "--results-dir", str(tmp_path / "results"),
                   "--cache-dir", str(tmp_path / "cache"), "--json", "--limit", "600", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # the fix-off tree breaks the A/B threshold
    summary = json.loads(done.stdout)
    cells = {c["id"]: c for c in summary["cells"]}
    assert cells["fixon"]["source"]["sha"] == after and cells["fixoff"]["source"]["sha"] == before
    assert cells["fixoff"]["metrics"]["gsm8k.flexible"] < cells["fixon"]["metrics"]["gsm8k.flexible"] - 0.04
    assert [f["check"] for f in cells["fixoff"]["flags"]] == ["max_drop_ab"]
    run = tmp_path / "results" / "src"
    assert "forced aiter ca_comm" in (run / "fixon" / "engine.log").read_text()
    assert "forced aiter ca_comm" not in (run / "fixoff" / "engine.log").read_text()
    assert "source=module:simfix" in (run / "fixoff" / "engine.log").read_text()
    assert not sim_processes()


def test_bad_ref_fails_before_any_engine_starts(tmp_path: Path) -> None:
    repo, _, _ = make_engine_repo(tmp_path)
    config = tmp_path / "bad.yaml"
    config.write_text(f"""
model: m
engine: {{profile: sim}}
axes:
  fix:
    fixon: {{source: {{repo: "{repo}", ref: "no-such-branch"}}}}
""")
    done = evalkit_cli("matrix", "--config", str(config), "--results-dir", str(tmp_path / "results"),
                   "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: source {repo}@no-such-branch: ref does not resolve to a commit"]
    assert not (tmp_path / "results").exists()


@pytest.mark.usefixtures("engine_processes")
def test_repeats_give_a_noise_floor_and_a_delta_inside_it_is_not_a_regression(tmp_path: Path) -> None:
    """Asking again flips a few answers (the simulator's run-to-run noise): a small floor, and the
    bug's 7-point drop is far outside it. Every repeat is reported, with the worst (which a `min`
    gates) and the spread."""
    config = tmp_path / "rep.yaml"
    config.write_text((ROOT / "configs" / "demo.yaml").read_text().replace(
        "    num_concurrent: 32", "    num_concurrent: 32\n    repeats: 2").replace(
        "thresholds:\n", "thresholds:\n  - {metric: gsm8k.flexible_worst, min: 0.9}\n"))
    done = evalkit_cli("matrix", "--config", str(config), "--run-id", "rep", "--only", "parallel=dp8,graph=piecewise",
                   "--limit", "300", "--json", cwd=tmp_path)
    summary = json.loads(done.stdout)
    off = next(c for c in summary["cells"] if c["id"] == "dp8-piecewise-fixoff")
    assert 0 < off["vs_ab"]["gsm8k.flexible"]["noise_floor"] < 0.01
    for cell in summary["cells"]:
        m = cell["metrics"]
        assert m["gsm8k.repeats"] == 2 and len(m["gsm8k.flexible_repeats"]) == 2
        assert m["gsm8k.flexible_repeats"][0] == m["gsm8k.flexible"]  # the first run is the cell's score
        assert m["gsm8k.flexible_worst"] == min(m["gsm8k.flexible_repeats"])
        assert m["gsm8k.flexible_spread"] == max(m["gsm8k.flexible_repeats"]) - m["gsm8k.flexible_worst"]
        worst = next(c for c in cell["checks"] if c["rule"] == "gsm8k.flexible_worst min 0.9")
        assert worst["outcome"] == ("FAIL" if cell["id"] == "dp8-piecewise-fixoff" else "PASS")
    table = evalkit_cli("report", "rep", "--format", "markdown", "--results-dir", str(tmp_path / "results"),
                    cwd=tmp_path).stdout
    every = off["metrics"]["gsm8k.flexible_repeats"]
    assert "| GSM8K worst repeat (spread: every run) |" in table
    assert (f"{min(every):.3f} of 2 (spread {(max(every) - min(every)) * 100:.1f} pts: "
            f"{every[0]:.3f} {every[1]:.3f})") in table  # bold where its `min` FAILs
    # The bug's drop is far outside the floor; whether 300 questions make it significant at alpha
    # 0.01 depends on which 300 (the stratified 300: -4.0 points, p = 0.04, MDE 8.7): never a PASS.
    drop = off["vs_ab"]["gsm8k.flexible"]["diff"]
    assert drop < -3 * off["vs_ab"]["gsm8k.flexible"]["noise_floor"]
    assert next(c for c in off["checks"] if c["rule"].startswith("gsm8k.flexible max_drop_ab"))["outcome"] != "PASS"
    record = json.loads((tmp_path / "results" / "rep" / "dp8-piecewise-fixoff" / "cell.json").read_text())
    assert record["metrics"]["gsm8k"]["repeats"]["n"] == 2
    assert (tmp_path / "results" / "rep" / "dp8-piecewise-fixoff" / "gsm8k.repeat2.samples.jsonl").is_file()
