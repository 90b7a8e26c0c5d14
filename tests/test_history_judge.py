"""`evalkit history judge` and `audit`: each night against its own series' noise, each gate against it.

The rules are specified on seeded series whose noise, drops, intermittent failures and shifts are
planted (benchmarks/nightly_judge.py measures their rates); the reading of real data on ATOM's own
dashboard, merged from the git history of its gh-pages branch (tests/data/atom-dashboard.md).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalkit.cli import main
from evalkit.history.db import History
from evalkit.history.imports import import_dashboard
from evalkit.history.judge import Judge
from evalkit.history.series import ACCURACY, Series, SeriesPoint, split_name
from evalkit.history.verdicts import INSUFFICIENT, INTERMITTENT, OK, REGRESSION
from evalkit.stats.noise import diffs, excess_sd
from evalkit.store import write_json
from tests.helpers.runs import CellSpec, summary_of, write_run

ATOM = Path(__file__).parent / "data" / "atom-dashboard.js"
DSPARK = "ATOM::DeepSeek-V4-Pro DSpark accuracy (GSM8K)"


def seeded(name: str, nights: int = 40, seed: int = 0, same: float = 0.002, across: float = 0.004,
           level: float = 0.94) -> list[SeriesPoint]:
    """A healthy series: one commit a night, its level moving by `across`, each run by `same` more; every
    fourth commit re-run."""
    rng = random.Random(seed)
    points = []
    for night in range(nights):
        commit_level = level + rng.gauss(0, across)
        for rerun in range(2 if night % 4 == 0 else 1):
            points.append(SeriesPoint(f"{name}{night:03d}", f"2026-03-{night:03d}-{rerun}",
                                      commit_level + rng.gauss(0, same), f"run-{night}-{rerun}"))
    return points


def judged(points: list[SeriesPoint], others: int = 6) -> Judge:
    batch = [Series("s", "cfg", "model", "accuracy", ACCURACY, "score", True, points)]
    batch += [Series(f"o{i}", f"cfg{i}", "other", "accuracy", ACCURACY, "score", True, seeded(f"o{i}", seed=i + 1))
              for i in range(others)]
    return Judge(batch)


def newest(points: list[SeriesPoint]) -> tuple[str, int | None]:
    verdict, _, first = judged(points).classify(0, len(points) - 1)
    return verdict, first


def low(point: SeriesPoint, points_low: float, commit: str | None = None) -> SeriesPoint:
    return SeriesPoint(commit or point.commit, point.date + "z", point.value - points_low / 100, point.run + "z")


def test_a_healthy_newest_night_is_ok_and_a_short_series_insufficient() -> None:
    assert newest(seeded("a"))[0] == OK
    assert newest(seeded("a", nights=4))[0] == INSUFFICIENT


def test_one_run_far_below_the_noise_is_a_regression_and_one_within_it_is_ok() -> None:
    history = seeded("a")
    assert newest([*history, low(history[-1], 6, commit="new")])[0] == REGRESSION
    assert newest([*history, low(history[-1], 0.2, commit="new")])[0] == OK


def test_a_commit_both_healthy_and_failing_is_intermittent() -> None:
    history = seeded("a")
    healthy = SeriesPoint("new", "2026-04-01", history[-1].value, "run-new-1")
    assert newest([*history, healthy, low(healthy, 6)])[0] == INTERMITTENT


def test_a_fall_that_stays_down_stays_a_regression_since_its_first_commit() -> None:
    """A 4-point fall over three commits is no new normal: each night is judged against the healthy
    level it fell from, and says since which commit and at what level."""
    history = seeded("a")
    dropped = [SeriesPoint(f"bad{k}", f"2026-04-0{k}", 0.90 + k / 1000, f"bad-{k}") for k in range(3)]
    points = [*history, *dropped]
    judge = judged(points)
    verdict, _, first = judge.classify(0, len(points) - 1)
    assert verdict == REGRESSION and first is not None and points[first].commit == "bad0"
    (series,) = judge.judge(only=[0])
    assert series.newest is not None and "since bad0, 3 nights, level 0.901 vs healthy 0.93" in series.newest.why
    assert newest([*history, *dropped[:1]])[0] == REGRESSION


def test_the_noise_is_read_past_the_regressions_in_the_history() -> None:
    clean = seeded("a", nights=120)
    broken = [low(p, 8) if i % 20 == 3 else p for i, p in enumerate(clean)]  # one night in 20, 8 points low
    clean_sd = excess_sd(diffs([(p.commit, p.value, 0.0) for p in clean]).across_commits)
    broken_sd = excess_sd(diffs([(p.commit, p.value, 0.0) for p in broken]).across_commits)
    assert clean_sd is not None and broken_sd is not None
    assert abs(clean_sd - (0.002 ** 2 + 0.004 ** 2) ** 0.5) < 0.0015
    assert broken_sd < clean_sd * 1.25
    assert statistics.stdev(p.value for p in broken) > 3 * statistics.stdev(p.value for p in clean)


def test_a_bench_name_splits_into_its_configuration_and_metric() -> None:
    assert split_name(DSPARK) == ("ATOM::DeepSeek-V4-Pro DSpark", "accuracy (GSM8K)", "accuracy")
    assert split_name("ATOM::DeepSeek-V4-Pro MTP MTP acceptance (%)") == (
        "ATOM::DeepSeek-V4-Pro MTP", "MTP acceptance (%)", "acceptance")
    assert split_name("throughput") == ("throughput", "", "other")


@pytest.fixture(scope="module")
def atom_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ATOM's dashboard export imported twice into one history."""
    db = tmp_path_factory.mktemp("atom") / "history.db"
    result = CliRunner().invoke(main, ["history", "--import", str(ATOM), "--db", str(db)])
    assert result.exit_code == 0, result.output
    with History(db) as store:
        assert import_dashboard(store.db, ATOM) == 4191
    return db


def test_importing_a_dashboard_twice_stores_each_point_once(atom_db: Path) -> None:
    with History(atom_db) as store:
        (count,) = store.db.execute("SELECT COUNT(*) FROM dashboard_points").fetchone()
        row = store.db.execute("SELECT commit_sha, date, value, run_url, floor FROM dashboard_points WHERE name = ? "
                               "ORDER BY date DESC LIMIT 1", (DSPARK,)).fetchone()
    assert count == 4191
    assert row == ("2b61f9871e225730131e96ae0c4e21ef34653381", "2026-08-10T09:24:43.431+00:00", 0.7763,
                   "https://github.com/ROCm/ATOM/actions/runs/31371899601", 0.93)


@pytest.fixture(scope="module")
def atom_json(atom_db: Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["history", "judge", "--db", str(atom_db), "--format", "json"])
    return result.exit_code, json.loads(result.output)


def test_judge_json_is_the_issue_39_format_with_units_runs_and_what_was_left_out(
        atom_json: tuple[int, dict[str, Any]]) -> None:
    """Issue 39's JSON, and issue 47's additions: each series' unit and its noise's (points for a
    share), how many more nights an insufficient series needs, its accepted level, each point's run."""
    _, out = atom_json
    assert list(out) == ["series", "left_out"] and len(out["series"]) == 103 and out["left_out"] == []
    for series in out["series"]:
        assert list(series) == ["name", "n", "unit", "noise", "floor", "floor_false_alarm_rate", "suggested_floor",
                                "needed", "accepted", "points"]
        assert list(series["noise"]) == ["unit", "same_commit", "across_commits", "binomial"]
        assert series["noise"]["unit"] == "points" and series["unit"] in ("share", "%")
        assert [list(p) for p in series["points"]] == [["commit", "date", "run", "value", "verdict", "why"]]
        assert len(series["points"][0]["commit"]) == 40 and series["points"][0]["run"]


def test_the_dspark_night_reads_its_acceptance_and_its_controls(atom_json: tuple[int, dict[str, Any]]) -> None:
    code, out = atom_json
    dspark = next(s for s in out["series"] if s["name"] == DSPARK)
    night = dspark["points"][0]
    assert code == 1
    assert (night["value"], night["verdict"]) == (0.7763, REGRESSION)
    assert "speculative acceptance collapsed in the same run: 0" in night["why"]
    assert "2 of 2 other configurations of ATOM::DeepSeek-V4-Pro held in the same run" in night["why"]
    assert dspark["floor"] == 0.93 and 0.9 < dspark["suggested_floor"] < 0.95
    plain = next(s for s in out["series"] if s["name"] == "ATOM::DeepSeek-V4-Pro accuracy (GSM8K)")
    assert plain["points"][0]["verdict"] == OK and 0.2 < plain["noise"]["across_commits"] < 0.6


def test_the_audit_names_floors_above_the_median_and_within_the_noise(atom_db: Path) -> None:
    result = CliRunner().invoke(main, ["history", "audit", "--db", str(atom_db)])
    assert result.exit_code == 0, result.output
    rows = {line.split(" | ")[0].lstrip("| "): line for line in result.output.splitlines() if line.startswith("| ATOM")}
    assert "above the median" in rows["ATOM-vLLM::Qwen3-Next-80B-A3B-Instruct-FP8 TP2 accuracy (GSM8K)"]
    assert "within the noise" in rows["ATOM-vLLM::DeepSeek-R1-0528-MXFP4 TP8 accuracy (GSM8K)"]
    assert "floors sit within the noise or above the median" in result.output


def test_a_file_that_is_no_dashboard_is_one_line_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "data.js"
    bad.write_text("window.BENCHMARK_DATA = {\"entries\": {\"Benchmark\": [{\"benches\": []}]}}")
    result = CliRunner().invoke(main, ["history", "--import", str(bad), "--db", str(tmp_path / "h.db")])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {bad}: entries.Benchmark[0]: expected commit.id, date (ms) and benches")


def night(results: Path, day: int, right: int) -> None:
    """A stored nightly of one cell (tp8-fixon), its engine at its own commit, with its summary (its checks)."""
    run_path, config = write_run(results, f"night-{day:02d}", {"tp8-fixon": CellSpec(
        right=right, long_texts=["fine"] * 4, source_sha=f"{day:040x}", started_at=f"2026-11-{day:02d}T02:00:00+00:00")},
        started_at=f"2026-11-{day:02d}T02:00:00+00:00")
    write_json(run_path / "summary.json", summary_of(run_path, config))


def test_calibrate_from_history_suggests_the_floor_the_judge_holds_the_next_night_to(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for day, right in enumerate([19, 18, 19, 19, 18, 19, 19, 18, 19, 19, 18, 19], start=1):
        night(results, day, right)
    runner = CliRunner()
    assert runner.invoke(main, ["history", "--import", "all", "--results-dir", str(results)]).exit_code == 0
    snippet = runner.invoke(main, ["calibrate", "--model", "demo", "--cell", "tp8-fixon", "--from-history",
                                   "--results-dir", str(results)])
    assert snippet.exit_code == 0, snippet.output
    floor = float(snippet.output.split("{metric: gsm8k.flexible, min: ")[1].split(", gate: point}")[0])
    assert "(now 0.8)" in snippet.output  # the config's min, from the runs' checks
    series = "tp8-fixon gsm8k.flexible"
    for right, verdict, code in ((math.ceil(floor * 20), OK, 0), (math.ceil(floor * 20) - 1, REGRESSION, 1)):
        night(results, 13, right)  # re-importing night 13 replaces it
        runner.invoke(main, ["history", "--import", "night-13", "--results-dir", str(results)])
        judged = runner.invoke(main, ["history", "judge", "--series", series, "--format", "json",
                                      "--results-dir", str(results)])
        (row,) = json.loads(judged.output)["series"]
        assert (row["points"][0]["value"], row["points"][0]["verdict"], judged.exit_code) == (right / 20, verdict, code)


def test_judge_says_in_words_which_series_broke_and_why(atom_db: Path) -> None:
    result = CliRunner().invoke(main, ["history", "judge", "--db", str(atom_db), "--series", "DeepSeek-V4-Pro DSpark"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("evalkit history judge: 2 series, newest points: 2 regression")
    assert f"REGRESSION   {DSPARK}  (n=7, noise 0.40 same commit, 0.56 across commits (points))" in lines
    assert any(line.startswith("    2b61f9871e22 2026-08-10T09:24 regression: below what the noise allows: 0.7763")
               for line in lines)
    assert lines[-1].startswith("2 series broke at their newest point")


def test_bad_choices_are_one_line_naming_the_option(atom_db: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # in a folder of its own: the checkout's results/ holds the README demo's run once a reader ran it
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    unmatched = runner.invoke(main, ["history", "judge", "--db", str(atom_db), "--series", "no such series"])
    assert unmatched.exit_code == 2 and unmatched.output.startswith("error: --series no such series: no series matches")
    missing = runner.invoke(main, ["history", "audit", "--db", str(tmp_path / "none.db")])
    assert missing.exit_code == 2 and "none.db: no history database" in missing.output
    no_cell = runner.invoke(main, ["calibrate", "--model", "demo"])
    assert no_cell.exit_code == 2 and no_cell.output.startswith("error: --cell: no matrix run of demo.yaml in results")


def test_a_series_that_never_moved_still_catches_a_collapse() -> None:
    """Ten nights of no collapse out of 64 generations: noise is one event's worth, and 21 events are far past it."""
    calm = [SeriesPoint(f"c{i}", f"2026-05-{i:02d}", 0.0, f"r{i}", n=64) for i in range(1, 11)]
    collapsed = SeriesPoint("c11", "2026-05-11", 21 / 64, "r11", n=64)
    steady = SeriesPoint("c11", "2026-05-11", 1 / 64, "r11", n=64)
    for last, verdict in ((collapsed, REGRESSION), (steady, OK)):
        series = Series("collapse", "cfg", "model", "repetition.collapse_rate", "other", "", False, [*calm, last])
        assert Judge([series]).classify(0, 10)[0] == verdict
