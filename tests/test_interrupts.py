"""Ctrl-C or SIGTERM at any moment of a run (issue 36 item 1): evalkit says at once what it stops,
stops the engine, exits 130 within seconds with its verdict last, leaves no process and keeps what
finished; a second signal stops at once.

Each moment is a phase of a real two-cell run on the simulator (one line of its progress starts the
phase) plus a seeded delay, and one or two signals. The `e2e` tier tries a few moments (each test
asks for `engine_processes`); the whole sweep, every phase several times, is `slow` and prints its
figures.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

CONFIG = """
model: sim/interrupts
served_name: paced
engine: {profile: sim, args: [--sim-seed, '1', --sim-startup-seconds, '1', --sim-tokens-per-second, '100']}
axes:
  case:
    first: {args: [--sim-fault, ignore-sigterm]}
    second: {args: [--sim-seed, '2']}
evals:
  gsm8k: {num_fewshot: 3}
  repetition: {count: 4, max_tokens: 256, concurrency: 4}
  divergence: {count: 4, max_tokens: 128}
  consistency: {count: 4, copies: 2, max_tokens: 64}
timeouts: {startup: 60, stop_grace: STOP_GRACE}
"""
"""Every eval; the first cell's engine ignores SIGTERM, so stopping it takes `stop_grace` (its
teardown lasts that long, and only SIGKILL ends it)."""

EXIT_WITHIN_S = 15.0
"""From the first signal to the exit: the engine's stop (2 s of grace for the first cell), the
verdict and the report, on a shared 2-core machine."""
AFTER_VERDICT = re.compile(r"Traceback|Task exception|never retrieved|Exception ignored|Error in atexit")

PHASES: dict[str, tuple[str, float]] = {
    # phase -> (the progress line that starts it, the longest delay after that line)
    "engine start": (r"first\s+starting port \d+", 0.8),
    "gsm8k setup": (r"first\s+gsm8k", 1.0),
    "gsm8k requests": (r"first\s+gsm8k 1/\d+", 0.6),
    "repetition": (r"first\s+repetition", 1.5),
    "divergence": (r"first\s+divergence", 0.3),
    "consistency": (r"first\s+consistency", 0.5),
    "teardown": (r"first\s+consistency (\d+)/\1$", 1.5),
    "next cell": (r"second\s+(starting port \d+|gsm8k|repetition)", 1.0),
    "report": (r"second\s+ok", 1.0),
}


@dataclass
class Moment:
    phase: str
    delay_s: float
    signals: tuple[signal.Signals, ...]
    gap_s: float = 0.3
    """Between a first and a second signal."""


@dataclass
class Outcome:
    moment: Moment
    delivered: bool
    """False when the run ended before the moment came."""
    code: int | None = None
    exit_s: float = 0.0
    output: str = ""
    seen: list[str] = field(default_factory=list)
    """The progress lines printed before the first signal."""
    left: list[int] = field(default_factory=list)
    """Processes of the run still alive after evalkit exited."""


def interrupt(tmp_path: Path, moment: Moment, stop_grace: float = 2, apart: bool = False) -> Outcome:
    """Run CONFIG, send `moment`'s signals, wait for the exit; what came of it. `apart`: the cell's
    evals take turns (`run.evals: apart`) instead of running in one wave, so each eval's progress
    line starts a phase of its own (PHASES)."""
    text = CONFIG.replace("STOP_GRACE", f"{stop_grace:g}") + ("run: {evals: apart}\n" if apart else "")
    (tmp_path / "cfg.yaml").write_text(text)
    argv = [sys.executable, "-m", "evalkit.cli", "matrix", "--config", "cfg.yaml", "--run-id", "r",
            "--results-dir", "results", "--limit", "8"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    started = threading.Event()
    trigger, _ = PHASES[moment.phase]

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if re.search(rf"\]\s+{trigger}\s*$", line.rstrip()):
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 240
    while not started.wait(0.05) and proc.poll() is None and time.monotonic() < deadline:
        pass
    time.sleep(moment.delay_s)
    if proc.poll() is not None or not started.is_set():
        proc.wait()
        return Outcome(moment, delivered=False, code=proc.returncode, output="".join(lines))
    seen = list(lines)
    family = {proc.pid} | {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    sent = time.monotonic()
    for i, sig in enumerate(moment.signals):
        if i:
            time.sleep(moment.gap_s)
        if proc.poll() is None:
            proc.send_signal(sig)
    code = proc.wait(timeout=120)
    exit_s = time.monotonic() - sent
    reader.join(10)
    left = [pid for pid in family - {proc.pid} if _alive(pid)]
    return Outcome(moment, True, code, exit_s, "".join(lines), seen, left)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def problems(tmp_path: Path, out: Outcome) -> list[str]:
    """What is wrong with an interrupted run, in words (nothing: it stopped as it should)."""
    if not out.delivered:
        return []
    found = []
    run_done = any(re.search(r"\]\s+second\s+ok", line) for line in out.seen)
    if out.code != 130 and not (run_done and out.code == 0 and "results: results/r" in out.output):
        found.append(f"exit {out.code}, not 130")
    if out.exit_s > EXIT_WITHIN_S:
        found.append(f"exited {out.exit_s:.1f} s after the signal")
    if match := AFTER_VERDICT.search(out.output):
        found.append(f"printed {match.group(0)!r}")
    lines = out.output.rstrip().splitlines() or [""]
    last, before = lines[-1], (lines[-2] if len(lines) > 1 else "")
    # the verdict ends with where the results are, then the headline (OK / NOT OK ...), or `interrupted`
    verdict_last = last == "interrupted" or last.startswith("results: ") or (
        before.startswith("results: ") and last.startswith(("OK ", "NOT OK ")))
    if not verdict_last:
        found.append(f"the last line is {last!r}, not the verdict's")
    if not run_done and out.code == 130 and not re.search(r"\]\s+run\s+interrupted SIG(INT|TERM): stopping ", out.output):
        found.append("no line said at once what stops")
    if out.left:
        found.append(f"processes left: {out.left}")
    run_dir = tmp_path / "results" / "r"
    if any(re.search(r"\]\s+first\s+ok", line) for line in out.seen):
        if json.loads((run_dir / "first" / "cell.json").read_text())["status"] != "ok":
            found.append("the finished cell was not kept")
    if not run_done and json.loads((run_dir / "run.json").read_text())["status"] != "interrupted":
        found.append("run.json is not `interrupted`")
    if list(run_dir.parent.rglob(".*.tmp")):
        found.append("a temp file was left")
    return found


@pytest.mark.usefixtures("engine_processes")
@pytest.mark.parametrize(("phase", "delay_s", "sig"), [("teardown", 0.3, signal.SIGINT), ("report", 0.05, signal.SIGTERM)])
def test_a_signal_in_this_phase_stops_the_run_cleanly(tmp_path: Path, phase: str, delay_s: float,
                                                      sig: signal.Signals) -> None:
    """Ctrl-C while an engine that ignores SIGTERM is being stopped (2 s of grace), and SIGTERM (a CI
    runner's timeout) while the verdict is written: soon enough after the last cell, on a quiet
    box, for the run not to have ended."""
    out = interrupt(tmp_path, Moment(phase, delay_s, (sig,)))
    assert out.delivered, out.output[-2000:]
    assert problems(tmp_path, out) == [], out.output[-3000:]


@pytest.mark.usefixtures("engine_processes")
def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    """The issue's case, SIGTERM while lm-eval's GSM8K requests run; the first cell's engine ignores
    it and has 60 s of grace, so this run would wait for it; a Ctrl-C after it kills the engine
    and the run exits."""
    out = interrupt(tmp_path, Moment("gsm8k requests", 0.2, (signal.SIGTERM, signal.SIGINT), gap_s=1.0), stop_grace=60)
    assert out.delivered, out.output[-2000:]
    assert problems(tmp_path, out) == [], out.output[-3000:]  # exit within EXIT_WITHIN_S, not 60 s


SWEEP_SEED = 36
SWEEP_PER_PHASE = 4


def _sweep() -> dict[str, list[Moment]]:
    """Each phase's seeded moments: delays, one or two signals and their gap, drawn in one
    sequence from SWEEP_SEED, so a phase's moments do not depend on which phases run."""
    rnd = random.Random(SWEEP_SEED)
    return {phase: [Moment(phase, rnd.uniform(0, longest), (rnd.choice([signal.SIGINT, signal.SIGTERM]),) * rnd.choice([1, 1, 2]),
                           gap_s=rnd.uniform(0.05, 0.5)) for _ in range(SWEEP_PER_PHASE)]
            for phase, (_, longest) in PHASES.items()}


SWEEP = _sweep()


@pytest.mark.slow  # 4 seeded moments, each a run of its own: ~1 min per phase, 9 phases that xdist spreads
@pytest.mark.timeout(900)
@pytest.mark.parametrize("phase", list(PHASES))
def test_signals_at_seeded_moments_of_each_phase_stop_every_run_cleanly(tmp_path: Path, phase: str) -> None:
    """Every moment whose signal came before the run ended stops cleanly (`problems`). In every
    phase but the report, at most one moment may come too late; the report's often come after
    the run ended (it takes well under its longest delay), and a signal in it is the e2e test's."""
    outcomes, failures = [], []
    for i, moment in enumerate(SWEEP[phase]):
        (tmp_path / str(i)).mkdir()
        # the evals take turns, so every phase of PHASES is a moment of its own (in a wave they overlap)
        out = interrupt(tmp_path / str(i), moment, apart=True)
        outcomes.append(out)
        found = problems(tmp_path / str(i), out)
        failures += [f"{moment}: {p}" for p in found]
        print(f"{moment.phase:<13} +{moment.delay_s:.2f} s {'+'.join(s.name for s in moment.signals):<15} "
              + (f"exit {out.code} after {out.exit_s:.2f} s, {len(out.left)} left {found or ''}" if out.delivered
                 else "the run ended first"))
    tried = [o for o in outcomes if o.delivered]
    if tried:
        print(f"\n{phase}: moments tried {len(tried)} of {len(outcomes)} (seed {SWEEP_SEED}); double signals: "
              f"{sum(len(o.moment.signals) == 2 for o in tried)}; slowest exit: {max(o.exit_s for o in tried):.2f} s; "
              f"processes left: {sum(len(o.left) for o in tried)}")
    assert failures == []
    if phase != "report":
        assert len(tried) >= SWEEP_PER_PHASE - 1, "most moments came before the run ended"
