"""The figures of scripts/gpu-run.sh's runs as one JSON object (issue 31 part 5).

    python3 scripts/gpu_run_summary.py RESULTS_DIR [LOG]

Per run folder under RESULTS_DIR: run.json's `gpus` (provenance), the report header's GPU line,
and per cell its status, error, timings, `gpu` record (UUIDs, memory before, the release wait, telemetry)
and the UUIDs its GPU workers printed (evalkit/sim/gpu.py). With LOG (gpu-run.sh's log.txt): the
`###` step lines, which hold each step's exit code and duration.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

WORKER = re.compile(r"^sim-gpu: worker \d+ pid \d+ .*$", re.MULTILINE)


def cell(folder: Path) -> dict[str, Any]:
    record = json.loads((folder / "cell.json").read_text())
    log = folder / "engine.log"
    return {"status": record.get("status"), "error": record.get("error"), "gpu": record.get("gpu"),
            "timings": record.get("timings"),
            "worker_lines": WORKER.findall(log.read_text(errors="replace")) if log.is_file() else []}


def run(folder: Path) -> dict[str, Any]:
    meta = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
    table = folder / "table.md"
    header = [line for line in table.read_text().splitlines() if "driver" in line] if table.is_file() else []
    return {"gpus": meta.get("gpus"), "status": meta.get("status"), "header": header,
            "cells": {c.name: cell(c) for c in sorted(folder.iterdir()) if (c / "cell.json").is_file()}}


def main(argv: list[str]) -> None:
    results = Path(argv[0])
    out: dict[str, Any] = {"runs": {r.name: run(r) for r in sorted(results.iterdir()) if r.is_dir()}
                           if results.is_dir() else {}}
    if len(argv) > 1 and Path(argv[1]).is_file():
        out["steps"] = [line for line in Path(argv[1]).read_text().splitlines() if line.startswith("### ")]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
