"""`evalkit plan` says what each threshold could detect before anything runs; --limit changes it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from evalkit.cli import main
from tests.conftest import CONFIGS


def power_lines(*args: str) -> list[str]:
    result = CliRunner().invoke(main, ["plan", "--model", "demo", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [line for line in result.output.splitlines() if line.startswith("#   ")]


def test_plan_prints_the_mde_and_the_n_needed_per_threshold_and_limit_changes_them() -> None:
    full, limited = power_lines(), power_lines("--limit", "50")
    drop = next(line for line in full if "max_drop_vs_baseline" in line)
    assert "n 1319, MDE 2.2 points at power 80% (3.0% of questions flipping" in drop and "(assumed)" in drop
    # a 2-point margin would need more questions than GSM8K has; 2.2 is within 2 x margin: PASS
    assert "margin 2.0 points would need n 1502, more than the 1319 the data holds; a healthy cell can PASS" in drop
    small = next(line for line in limited if "max_drop_vs_baseline" in line)
    assert "n 50, MDE 24.1 points" in small and small.endswith("INCONCLUSIVE expected on a healthy cell")
    # the collapse checks are detect-only: 64 generations see 13.9 points, within the 20 they exist to catch
    collapse = next(line for line in full if "collapse_rate max_rise_ab" in line)
    assert "n 64, MDE 13.9 points" in collapse
    assert collapse.endswith("detect-only, the 20.0 points it exists to catch needs n 44: a healthy cell can PASS")


def test_plan_knows_n_for_every_eval_of_every_shipped_config_and_never_asks_past_the_data() -> None:
    # the configs issue 38 names; vllm-tiny's random model scores GSM8K as noise (its config says so)
    for config in (CONFIGS / f"{name}.yaml" for name in ("demo", "demo-atom", "deepseek-v4", "vllm-deepseek",
                                                          "sglang-deepseek")):
        result = CliRunner().invoke(main, ["plan", "--config", str(config)], catch_exceptions=False)
        lines = [line for line in result.output.splitlines() if line.startswith("#   ")]
        assert result.exit_code == 0 and not [line for line in lines if "n unknown" in line], config
        for line in lines:  # an n asked is at most what the data holds, or says that it is more
            for asked in re.findall(r"needs n (\d+)", line):
                assert int(asked) <= 1319, line
        # issue 38 item 2: every delta check of a shipped config can PASS a healthy cell
        assert not [line for line in lines if "INCONCLUSIVE expected" in line], (config, lines)
    atom = CliRunner().invoke(main, ["plan", "--model", "deepseek-v4"]).output
    assert "repetition.collapse_rate max_rise_ab 0.05 alpha 0.01 detects 0.2: n 72, MDE 12.3 points" in atom


def test_a_calibration_replaces_the_assumed_noise(tmp_path: Path) -> None:
    calibration = tmp_path / "calibrate.json"
    calibration.write_text(json.dumps({"metrics": [
        {"metric": "gsm8k.flexible", "flip_rate": 0.0, "values": [0.94, 0.94]},
        {"metric": "repetition.collapse_rate", "values": [0.05, 0.05], "counts": [3, 3]}]}))
    lines = power_lines("--calibration", str(calibration))
    drop = next(line for line in lines if "max_drop_ab" in line)
    assert "0.0% of questions flipping between healthy runs (measured)" in drop and "MDE 0.8 points" in drop
    assert "base rate 5.0% (measured)" in next(line for line in lines if "collapse_rate max_rise_ab" in line)
