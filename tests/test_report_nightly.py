"""examples/nightly.sh against a stand-in `evalkit`: exit codes, the report, notify, signals."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "examples" / "nightly.sh"
FAKE = """#!/usr/bin/env bash
# Stand-in for evalkit: `matrix` exits with $FAKE_EXIT (or waits for SIGTERM), `report` prints.
echo "$*" >> "$FAKE_LOG"
case "$1" in
  matrix)
    if [ "${FAKE_WAIT:-0}" = 1 ]; then
      trap 'kill $sleeper; echo "matrix got TERM" >> "$FAKE_LOG"; exit 130' TERM
      sleep 30 &
      sleeper=$!
      touch "$FAKE_LOG.started"
      wait $sleeper
    fi
    exit "${FAKE_EXIT:-0}" ;;
  report)
    case "$*" in
      *"--format headline"*) echo "1 of 12 cells broke: dp8-piecewise-fixoff" ;;
      *) echo "### evalkit report for $2" ;;
    esac
    exit "${FAKE_REPORT_EXIT:-0}" ;;
  history) echo "REGRESSION s"; exit "${FAKE_JUDGE_EXIT:-0}" ;;
esac
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "bin" / "evalkit"
    fake.parent.mkdir()
    fake.write_text(FAKE)
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "FAKE_LOG": str(tmp_path / "calls.log"),
            "RESULTS_DIR": str(tmp_path / "results"), "MODEL": "demo"}


def run(env: dict[str, str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], env={**env, **extra}, capture_output=True, text=True,
                          timeout=60, check=False)


def calls(env: dict[str, str]) -> list[str]:
    return Path(env["FAKE_LOG"]).read_text().splitlines()


def reports(env: dict[str, str]) -> list[Path]:
    return sorted(Path(env["RESULTS_DIR"]).glob("nightly-*-demo.md"))


@pytest.mark.parametrize("code", [0, 1, 3, 130])
def test_exit_code_is_evalkit_s_and_the_report_is_written(env: dict[str, str], code: int) -> None:
    Path(env["RESULTS_DIR"]).mkdir()
    done = run(env, "--limit", "5", FAKE_EXIT=str(code))
    assert done.returncode == code, done.stderr
    matrix, report, html, *rest = calls(env)
    judge = [call for call in rest if call.startswith("history ")]
    (headline,) = [call for call in rest if call.startswith("report ")]
    run_id = matrix.split("--run-id ")[1].split(" ")[0]
    assert matrix == f"matrix --model demo --run-id {run_id} --results-dir {env['RESULTS_DIR']} --quiet --limit 5"
    assert report == f"report {run_id} --results-dir {env['RESULTS_DIR']} --format markdown"
    assert html == f"report {run_id} --results-dir {env['RESULTS_DIR']} --format html -o {env['RESULTS_DIR']}/{run_id}.html"
    assert headline == f"report {run_id} --results-dir {env['RESULTS_DIR']} --format headline"
    assert f"exit {code} " in done.stderr and "1 of 12 cells broke: dp8-piecewise-fixoff" in done.stderr
    (md,) = reports(env)
    assert md.read_text() == f"### evalkit report for {run_id}\n"
    assert judge == ([] if code == 130 else [f"history judge --results-dir {env['RESULTS_DIR']}"])


def test_a_series_broken_against_its_history_fails_a_clean_matrix(env: dict[str, str]) -> None:
    Path(env["RESULTS_DIR"]).mkdir()
    done = run(env, FAKE_EXIT="0", FAKE_JUDGE_EXIT="1")
    assert done.returncode == 1 and "a series broke against its own history" in done.stderr
    (verdicts,) = Path(env["RESULTS_DIR"]).glob("nightly-*-demo.judge.txt")
    assert verdicts.read_text() == "REGRESSION s\n"
    assert run(env, FAKE_EXIT="0", FAKE_JUDGE_EXIT="1", JUDGE="off").returncode == 0


@pytest.mark.parametrize("code", [2, 4])
def test_bad_input_or_a_held_lock_exits_without_a_report(env: dict[str, str], code: int) -> None:
    done = run(env, FAKE_EXIT=str(code))
    assert done.returncode == code and len(calls(env)) == 1 and "nothing was started" in done.stderr


def test_notify_runs_on_failure_with_the_verdict_in_its_environment(env: dict[str, str], tmp_path: Path) -> None:
    Path(env["RESULTS_DIR"]).mkdir()
    note = tmp_path / "note.txt"
    notify = (f'echo "$EVALKIT_EXIT_CODE $EVALKIT_VERDICT $EVALKIT_RUN_ID" > {note}; echo "$EVALKIT_HEADLINE" >> {note}; '
              f'cat "$EVALKIT_REPORT" >> {note}')
    assert run(env, FAKE_EXIT="1", NOTIFY=notify).returncode == 1
    first, headline, report = note.read_text().splitlines()
    assert first.startswith("1 threshold broken nightly-") and report.startswith("### evalkit report for nightly-")
    assert headline == "1 of 12 cells broke: dp8-piecewise-fixoff"  # the mail subject a team reads


def test_notify_skips_success_unless_asked_and_its_failure_keeps_the_code(env: dict[str, str], tmp_path: Path) -> None:
    note = tmp_path / "note.txt"
    assert run(env, FAKE_EXIT="0", NOTIFY=f"touch {note}").returncode == 0 and not note.exists()
    assert run(env, FAKE_EXIT="0", NOTIFY=f"touch {note}", NOTIFY_ON="always").returncode == 0 and note.exists()
    failing = run(env, FAKE_EXIT="3", NOTIFY="exit 9")
    assert failing.returncode == 3 and "NOTIFY failed" in failing.stderr


def test_sigterm_reaches_evalkit_and_the_run_ends_interrupted_with_a_report(env: dict[str, str]) -> None:
    Path(env["RESULTS_DIR"]).mkdir()
    process = subprocess.Popen(["bash", str(SCRIPT)], env={**env, "FAKE_WAIT": "1"}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    started = Path(env["FAKE_LOG"] + ".started")
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert "matrix got TERM" in calls(env) and "got TERM, stopping evalkit" in stderr
    assert len(reports(env)) == 1
