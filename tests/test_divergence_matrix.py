"""The divergence eval through `evalkit matrix` unchanged: the runner starts one real logprob
server per cell (the `command` profile), stores each cell's samples, and summary.json, the
thresholds and the report compare the cells with the baseline through the eval's own measure."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.store import read_json

SERVER = Path(__file__).resolve().parent / "logprob_server.py"

CONFIG = """\
model: m
engine:
  profile: command
  command: ["{python}", "%s", "--host", "{host}", "--port", "{port}", "--served-name", "{served_name}"]
  python: %s
axes:
  server:
    base: {args: ["--shift", "0"]}
    same: {args: ["--shift", "0.0"]}
    shifted: {args: ["--shift", "-0.25"]}
    chars: {args: ["--tokenizer", "chars"]}
baseline: {server: base}
evals:
  gsm8k: {enabled: false}
  repetition: {enabled: false}
  divergence: {count: 4, max_tokens: 128, repeats: 2}
thresholds:
  - {metric: divergence.kl_p99, max_rise_vs_baseline: 0.05}
  - {metric: divergence.top1_agreement, max_drop_vs_baseline: 0.01, action: warn}
timeouts: {startup: 60, stop_grace: 5}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One four-cell matrix (four server starts, 4 texts each, scored twice). The tests that read it are
    about that real run, so each asks for `engine_processes`: e2e."""
    tmp = tmp_path_factory.mktemp("div")
    config = tmp / "div.yaml"
    config.write_text(CONFIG % (SERVER, sys.executable), encoding="utf-8")
    result = CliRunner().invoke(main, ["matrix", "--config", str(config), "--run-id", "div", "--results-dir",
                                       str(tmp / "results"), "--lock-file", str(tmp / "lock"), "--no-history",
                                       "--quiet"])
    return tmp / "results" / "div", result


def test_each_cell_is_measured_against_the_baseline_and_the_thresholds_read_it(
        run: tuple[Path, Any], engine_processes: None) -> None:
    path, result = run
    summary = read_json(path / "summary.json")
    cells = {c["id"]: c for c in summary["cells"]}
    assert [c["status"] for c in cells.values()] == ["ok"] * 4, result.output
    assert cells["base"]["metrics"] == {"divergence.n": 4, "divergence.tokens": cells["same"]["metrics"]["divergence.tokens"],
                                        "divergence.repeats": 2, "divergence.noise_kl_mean": 0.0,
                                        "divergence.noise_kl_p99": 0.0, "divergence.noise_top1_agreement": 0.0,
                                        "divergence.noise_logprob_abs_mean": 0.0}
    same = cells["same"]["vs_baseline"]
    assert (same["divergence.kl_p99"]["value"], same["divergence.logprob_abs_mean"]["value"]) == (0.0, 0.0)
    assert same["divergence.kl_p99"]["noise_floor"] == 0.0 and cells["same"]["flags"] == []
    shifted = cells["shifted"]["vs_baseline"]
    assert shifted["divergence.logprob_abs_mean"]["value"] == pytest.approx(0.25, abs=1e-12)
    (flag,) = cells["shifted"]["flags"]
    kl = shifted["divergence.kl_p99"]["value"]
    assert flag["message"] == f"shifted: KL p99 vs baseline base {kl:.3g} (rise {kl:.3g} > 0.05, noise floor 0)"
    (refused,) = [f for f in cells["chars"]["flags"] if f["action"] == "fail"]
    assert refused["message"].startswith("chars: KL p99 not compared with base: text gsm8k-train-0: tokenized "
                                         "differently from token 0 on ('Ques' here, 'Question:' in the reference")
    assert summary["exit_code"] == 1 and result.exit_code == 1


def test_the_report_shows_the_divergence_columns_and_the_worst_places(run: tuple[Path, Any], engine_processes: None) -> None:
    path, _ = run
    markdown = CliRunner().invoke(main, ["report", "div", "--format", "markdown", "--results-dir",
                                         str(path.parent)]).output
    header = next(line for line in markdown.splitlines() if line.startswith("| cell |"))
    # the divergence columns, then what each cell cost (GPU-h) last
    assert header.endswith("| KL p99 vs baseline | KL p99 vs twin | top-1 agree vs baseline | top-1 agree vs twin | GPU-h |")
    shifted = next(line for line in markdown.splitlines() if line.startswith("| **shifted** ❌ |"))
    assert re.search(r"\| \*\*0\.101\*\* ❌ \| - \| 1 \| - \| [^|]+ \|$", shifted), shifted  # a shift keeps the top-1 order
    assert "#### KL p99: worst places" in markdown and "#### Mean \\|Δ logprob\\|: worst places" in markdown
    assert "not compared" in markdown
    csv = CliRunner().invoke(main, ["report", "div", "--format", "csv", "--results-dir", str(path.parent)]).output
    header = csv.splitlines()[0].split(",")
    assert {"divergence.tokens", "divergence.noise_kl_p99", "vs_baseline.divergence.kl_p99.diff"} <= set(header)
