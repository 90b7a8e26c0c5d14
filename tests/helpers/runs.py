"""Hand-made run folders for report and history tests: cheap, exact, and hostile when asked.

A folder written here has the layout the runner writes (run.json, <cell>/cell.json,
gsm8k.samples.jsonl, repetition.samples.jsonl) so the summary comes from the real
verdicts.summarize, not from a copy of its format. Repetition samples come from the real
detector (analyze_text(...).to_dict(), with the `collapsed` flag the runner adds).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from evalkit.config import MatrixConfig, parse_config
from evalkit.evals.detector import analyze_text
from evalkit.store import read_json, write_json, write_jsonl
from evalkit.verdict.deltas import summarize
from evalkit.verdict.summary import RunSummary

QUESTIONS = 20

HOSTILE = ("a | b ` c ``` d </details> </pre> <script>alert(1)</script> \x1b[31mred\x1b[0m \x1b]0;title\x07"
           "& &amp; **bold** [link](http://x) @someone \u202eevil\n\n| x | y |\n|---|---|\n<!-- x -->\r\nend")
"""Model output that tries everything: pipes, fences, closing tags, a script, ANSI and OSC
escapes, entities, markup, a mention, a bidi override, a table of its own, CRLF."""


def config_dict(**overrides: Any) -> dict[str, Any]:
    """A 2 x 2 sim matrix (parallel x fix) with a baseline, an A/B axis and strict thresholds."""
    base: dict[str, Any] = {
        "model": "sim/test-model",
        "engine": {"profile": "sim"},
        "axes": {
            "parallel": {"tp8": {"settings": {"tensor_parallel": 8}},
                         "dp8": {"settings": {"tensor_parallel": 8, "dp_attention": True}}},
            "fix": {"fixon": {"args": ["--sim-fix", "on"]}, "fixoff": {"args": ["--sim-fix", "off"]}},
        },
        "baseline": {"parallel": "tp8", "fix": "fixon"},
        "ab": {"axis": "fix", "on": "fixon", "off": "fixoff"},
        "thresholds": [
            {"metric": "gsm8k.flexible", "min": 0.80},
            {"metric": "gsm8k.flexible", "max_drop_ab": 0.10},
            {"metric": "repetition.collapse_rate", "max_rise_vs_baseline": 0.2, "action": "warn"},
        ],
    }
    return base | overrides


@dataclass
class CellSpec:
    """One hand-made cell: which questions it gets right and what it wrote."""

    right: int = QUESTIONS
    """The first `right` questions are marked correct, the rest wrong."""
    status: str = "ok"
    error: str | None = None
    responses: dict[int, str] = field(default_factory=dict)
    long_texts: list[str] = field(default_factory=list)
    """Long generations for the repetition eval (judged by the real detector)."""
    source_sha: str | None = None
    started_at: str = "2026-12-03T02:00:00+00:00"


def _gsm8k_samples(spec: CellSpec) -> list[dict[str, Any]]:
    rows = []
    for i in range(QUESTIONS):
        ok = i < spec.right
        rows.append({"doc_id": i, "id": f"test-{i}", "target": f"step\n#### {i}",
                     "response": spec.responses.get(i, f" so {i if ok else i + 1}\n#### {i if ok else i + 1}"),
                     "finish_reason": "stop", "strict-match.correct": ok, "flexible-extract.correct": ok,
                     "strict-match.extracted": str(i if ok else i + 1), "flexible-extract.extracted": str(i if ok else i + 1)})
    return rows


def _repetition_samples(texts: list[str]) -> list[dict[str, Any]]:
    out = []
    for i, text in enumerate(texts):
        analysis = analyze_text(text, finish_reason="length")
        out.append({"id": f"long-{i}", "kind": "essay", "token_source": "text_split", "attempts": 1, "text": text,
                    "collapsed": analysis.collapsed, **analysis.to_dict()})
    return out


def cell_record(cell_id: str, axes: dict[str, str], spec: CellSpec) -> dict[str, Any]:
    """What the runner writes as cell.json, metrics included."""
    record: dict[str, Any] = {
        "id": cell_id, "axes": axes, "status": spec.status, "started_at": spec.started_at,
        "finished_at": spec.started_at, "timings": {"total_s": 1.5},
        "source": {"repo": "https://user:hunter2@github.com/ROCm/ATOM.git", "ref": "main", "sha": spec.source_sha}
        if spec.source_sha else None,
        "launch": {"argv": ["python", "-m", "evalkit.sim", "--api-key", "sk-launch-secret"],
                   "env": {"HF_TOKEN": "***", "PLAIN": "env-value-not-for-history"}},
        "metrics": {},
    }
    if spec.status != "ok":
        record["error"] = {"type": "EngineExited", "message": spec.error or "engine died", "log_tail": "tail"}
        return record
    record["metrics"]["gsm8k"] = {"strict": spec.right / QUESTIONS, "flexible": spec.right / QUESTIONS, "n": QUESTIONS}
    if spec.long_texts:
        samples = _repetition_samples(spec.long_texts)
        collapsed = sum(s["verdict"] == "collapsed" for s in samples)
        record["metrics"]["repetition"] = {"collapse_rate": collapsed / len(samples), "collapsed": collapsed,
                                           "n": len(samples)}
    return record


def write_run(results_dir: Path, run_id: str, cells: dict[str, CellSpec], config: dict[str, Any] | None = None,
              started_at: str = "2026-12-03T02:00:00+00:00") -> tuple[Path, MatrixConfig]:
    """A run folder holding `cells` (ids `<parallel>-<fix>`); returns its path and config."""
    raw = config or config_dict()
    matrix = parse_config(raw, "test.yaml")
    run_path = results_dir / run_id
    ids = [f"{p}-{f}" for p in raw["axes"]["parallel"] for f in raw["axes"]["fix"]]
    write_json(run_path / "run.json", {
        "run_id": run_id, "status": "complete", "model": matrix.model, "engine": matrix.engine.profile,
        "simulated": True, "config_path": "configs/demo.yaml", "config": matrix.model_dump(mode="json"),
        "cells": [i for i in ids if i in cells], "limit": QUESTIONS,
        "command": ["evalkit", "matrix", "--model", "demo", "--only", "fix=fixon|fixoff", "--api-key", "sk-cmd-secret"],
        "evalkit_version": "0.1.0", "evalkit_git_sha": "0123456789abcdef", "lm_eval_version": "0.4.13",
        "host": {"hostname": "box", "platform": "linux", "cpus": 4}, "started_at": started_at,
        "finished_at": started_at,
    })
    for cell_id, spec in cells.items():
        parallel, fix = cell_id.split("-")
        cell_dir = run_path / cell_id
        write_json(cell_dir / "cell.json", cell_record(cell_id, {"parallel": parallel, "fix": fix}, spec))
        if spec.status == "ok":
            write_jsonl(cell_dir / "gsm8k.samples.jsonl", _gsm8k_samples(spec))
            if spec.long_texts:
                write_jsonl(cell_dir / "repetition.samples.jsonl", _repetition_samples(spec.long_texts))
    return run_path, matrix


def rerun(run_path: Path, run_id: str) -> Path:
    """A copy of a run folder as another run (`run_id`, beside it): what `compare` needs where a
    test compares a run with an identical one (compare refuses a run with itself)."""
    copy = run_path.parent / run_id
    shutil.copytree(run_path, copy, dirs_exist_ok=True)
    write_json(copy / "run.json", read_json(copy / "run.json") | {"run_id": run_id})
    return copy


def summary_of(run_path: Path, config: MatrixConfig) -> dict[str, Any]:
    return summarize(run_path, config)


_RUN_FIELDS: dict[str, Any] = {
    "run_id": "r", "model": "m", "engine": "sim", "simulated": False, "status": "complete", "started_at": None,
    "finished_at": None, "command": None, "listen_host": None, "baseline": None, "ab": None, "setups": {},
    "failed_cells": 0, "not_run_cells": 0, "broken_thresholds": 0, "warnings": 0, "exit_code": 0}
_CELL_FIELDS: dict[str, Any] = {
    "axes": {}, "metrics": {}, "unmeasured": {}, "setup": {}, "effective_mode": None, "ran_as": None,
    "log_checks": None, "source": None, "imports": None, "engine_version": None, "timings": {}}


def hand_made(summary: dict[str, Any]) -> RunSummary:
    """A hand-made summary (only the fields a test is about) as the model the renderers take: every
    other field a summary must have, empty; a cell without `checks` stays one written before them."""
    cells = [_CELL_FIELDS | cell for cell in summary.get("cells", [])]
    return RunSummary.model_validate(_RUN_FIELDS | summary | {"cells": cells})


def loop_text(unit: str, repeats: int = 120, prefix: str = "A healthy start of an essay. ") -> str:
    """A generation that falls into a loop of `unit` (the detector calls it collapsed)."""
    return prefix + unit * repeats


def gfm() -> MarkdownIt:
    """GitHub-flavoured parsing: tables on, raw HTML on (GitHub passes it through its sanitizer)."""
    return MarkdownIt("gfm-like", {"linkify": False}).enable("table")


@dataclass
class Tables:
    """The GFM tables of a document as header texts and body rows of cell texts."""

    headers: list[list[str]]
    bodies: list[list[list[str]]]


def tables(markdown: str) -> Tables:
    """Parse every table; a cell's text is its inline content as markdown-it sees it."""
    headers: list[list[str]] = []
    bodies: list[list[list[str]]] = []
    row: list[str] | None = None
    section = None
    for token in gfm().parse(markdown):
        if token.type == "table_open":
            headers.append([])
            bodies.append([])
        elif token.type in ("thead_open", "tbody_open"):
            section = token.type
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(token.content)
        elif token.type == "tr_close" and row is not None:
            (headers[-1].extend(row) if section == "thead_open" else bodies[-1].append(row))
            row = None
    return Tables(headers, bodies)
