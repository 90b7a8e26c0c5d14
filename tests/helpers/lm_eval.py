"""The real `lm_eval` CLI, run against a server with evalkit's own task file and settings, so a test
can hold evalkit's GSM8K marks to lm-eval's (tests/test_gsm8k_fidelity.py on the simulator,
tests/real_engine on vLLM's CPU build)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from evalkit.evals import gsm8k, lm_eval_adapter
from evalkit.evals.base import Server
from evalkit.evals.gsm8k import GSM8KSettings
from evalkit.store import read_jsonl


def lm_eval_cli(settings: GSM8KSettings, base_url: str, served: str, task_dir: Path, out: Path, *,
                limit: int | None = None, timeout: float = 900) -> list[dict[str, Any]]:
    """`python -m lm_eval run` with evalkit's task (`task_dir`, as `gsm8k.write_task_yaml` wrote it)
    on the first `limit` questions (lm-eval's own --limit; evalkit asks the same with `subset:
    first`), else on every question; its per-sample log. Offline, as evalkit runs lm-eval."""
    args = lm_eval_adapter.model_args(settings, Server(base_url, served))
    backend = "local-completions" if settings.endpoint == "completions" else "local-chat-completions"
    cmd = [sys.executable, "-m", "lm_eval", "run", "--model", backend,
           "--model_args", ",".join(f"{k}={v}" for k, v in args.items()),
           "--tasks", gsm8k.TASK_NAME, "--include_path", str(task_dir),
           "--log_samples", "--output_path", str(out), "--seed", ",".join([str(settings.seed)] * 4)]
    if settings.endpoint == "chat":
        cmd += ["--apply_chat_template", "--fewshot_as_multiturn"]
    if limit:
        cmd += ["--limit", str(limit)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=out.parent,
                          env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    (samples_file,) = out.rglob(f"samples_{gsm8k.TASK_NAME}_*.jsonl")
    return list(read_jsonl(samples_file))
