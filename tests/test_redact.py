"""Secrets scrubbed from a log an engine wrote itself (evalkit/redact.py `scrub_file`): engines print
their environment and arguments, so a cell's engine.log is rewritten with each secret value
replaced, atomically, and left untouched (not even rewritten) when it holds none."""

from __future__ import annotations

import os
from pathlib import Path

from evalkit.redact import REDACTED, scrub_file, secret_values


def test_every_secret_value_in_the_log_is_replaced_and_the_rest_kept(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"env HF_TOKEN=hf_abcdef123 OPENAI_API_KEY=sk-xyz789\nserving on port 8000 \xff\n")
    scrub_file(log, secret_values({"HF_TOKEN": "hf_abcdef123", "OPENAI_API_KEY": "sk-xyz789", "PATH": "/usr/bin"}))
    assert log.read_bytes() == (f"env HF_TOKEN={REDACTED} OPENAI_API_KEY={REDACTED}\n".encode()
                                + b"serving on port 8000 \xff\n")  # bytes that are not UTF-8 kept as they were
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine.log"]  # no temporary file left


def test_a_log_without_secrets_is_not_rewritten_and_a_missing_one_is_no_error(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("nothing secret here\n")
    os.utime(log, ns=(1, 1))
    scrub_file(log, ["hf_abcdef123"])
    assert log.read_text() == "nothing secret here\n" and log.stat().st_mtime_ns == 1
    scrub_file(log, [])
    scrub_file(tmp_path / "never-written.log", ["hf_abcdef123"])
    assert not (tmp_path / "never-written.log").exists()
