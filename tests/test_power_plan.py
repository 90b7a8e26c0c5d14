"""`evalkit plan` says what each threshold could detect before anything runs; --limit changes it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from evalkit.cli import main


def power_lines(*args: str) -> list[str]:
    result = CliRunner().invoke(main, ["plan", "--model", "demo", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [line for line in result.output.splitlines() if line.startswith("#   ")]


def test_plan_prints_the_mde_and_the_n_needed_per_threshold_and_limit_changes_them() -> None:
    full, limited = power_lines(), power_lines("--limit", "50")
    drop = next(line for line in full if "max_drop_vs_baseline" in line)
    assert "n 1319, MDE 2.2 points at power 80% (3.0% of questions flipping" in drop and "(assumed)" in drop
    assert "margin 2.0 points needs n 1502; a healthy cell can PASS" in drop
    small = next(line for line in limited if "max_drop_vs_baseline" in line)
    assert "n 50, MDE 24.1 points" in small and small.endswith("INCONCLUSIVE expected on a healthy cell")
    collapse = next(line for line in full if "collapse_rate max_rise_ab" in line)
    assert "n 64, MDE 13.9 points" in collapse and "needs n 180" in collapse


def test_a_calibration_replaces_the_assumed_noise(tmp_path: Path) -> None:
    calibration = tmp_path / "calibrate.json"
    calibration.write_text(json.dumps({"metrics": [
        {"metric": "gsm8k.flexible", "flip_rate": 0.0, "values": [0.94, 0.94]},
        {"metric": "repetition.collapse_rate", "values": [0.05, 0.05], "counts": [3, 3]}]}))
    lines = power_lines("--calibration", str(calibration))
    drop = next(line for line in lines if "max_drop_ab" in line)
    assert "0.0% of questions flipping between healthy runs (measured)" in drop and "MDE 0.8 points" in drop
    assert "base rate 5.0% (measured)" in next(line for line in lines if "collapse_rate max_rise_ab" in line)
