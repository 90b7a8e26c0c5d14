"""Issue 47, item 3: a broken level never becomes normal by repetition; a floor is reported only where
it can act; a young series is judged against its siblings; a series is one comparability key.

Each rule is specified on series built to show it (seeded noise, planted falls and shifts), on ATOM's
own dashboard (tests/data/atom-dashboard.js) and through the CLI on stored runs.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from evalkit.history.accept import Acceptance
from evalkit.history.judge import Judge
from evalkit.history.series import ACCURACY, OTHER, Series, SeriesPoint
from evalkit.history.verdicts import INSUFFICIENT, OK, REGRESSION, SHIFT
from evalkit.store import read_json, write_json
from tests.helpers.cli import evalkit_cli
from tests.helpers.runs import CellSpec, summary_of, write_run

ATOM = Path(__file__).parent / "data" / "atom-dashboard.js"
N = 1319


def nights(count: int, level: float = 0.94, seed: int = 0, n: int | None = N, across: float = 0.003,
           start: int = 0, prefix: str = "c") -> list[SeriesPoint]:
    """`count` healthy nights, one commit each: the commit moves the level by `across` (sd), the
    run scores `n` questions (binomial)."""
    rng = random.Random(seed)
    out = []
    for night in range(start, start + count):
        p = level + rng.gauss(0, across)
        value = sum(rng.random() < p for _ in range(n)) / n if n else p
        out.append(SeriesPoint(f"{prefix}{night:04d}", f"2026-01-01T{night:05d}", value, f"run-{night}", n=n))
    return out


def accuracy(points: list[SeriesPoint], name: str = "m cfg gsm8k.flexible", configuration: str = "m cfg",
             group: str = "m") -> Series:
    return Series(name, configuration, group, "gsm8k.flexible", ACCURACY, "", True, points)


def with_neighbours(series: Series, others: int = 6) -> list[Series]:
    """The series among healthy ones of other models, so the noise priors are those of a real history."""
    return [series, *(accuracy(nights(40, seed=100 + i, prefix=f"o{i}-"), f"o{i} gsm8k.flexible", f"o{i}", f"o{i}")
                      for i in range(others))]


def verdicts(judge: Judge, si: int = 0) -> list[str]:
    return [state.verdict for state in judge.states(si)]


def test_a_fall_to_near_zero_that_stays_down_is_a_regression_every_later_night() -> None:
    """ATOM's public dashboard shape: ~0.94, then ~0.03 for thirty nights. Each of them is a
    regression against the healthy level, and says since which commit and for how many nights."""
    healthy = nights(30)
    fallen = [SeriesPoint(f"f{i:03d}", f"2026-02-01T{i:05d}", 0.03 + 0.002 * (i % 3), f"fall-{i}", n=N) for i in range(30)]
    judge = Judge(with_neighbours(accuracy([*healthy, *fallen])))
    after = verdicts(judge)[30:]
    assert after == [REGRESSION] * 30
    (series,) = judge.judge(every=True, only=[0])
    last = series.judgements[-1]
    assert last.first_bad == "f000" and "since f000, 30 nights, level 0.032 vs healthy 0.9" in last.why


def test_it_recovers_when_the_level_comes_back_and_a_shift_of_2_points_is_named_at_its_first_commit() -> None:
    """Two points below a 1,319-question level (noise ~0.7 points a night) for twelve nights: too small
    for one night's floor, caught by the mean of the last nights and named at the commit it began;
    it stays broken until the level comes back, then the nights are ok again."""
    healthy = nights(40, seed=3)
    shifted = nights(12, level=0.92, seed=4, start=40, prefix="s")
    back = nights(5, seed=5, start=52, prefix="r")
    judge = Judge(with_neighbours(accuracy([*healthy, *shifted, *back])))
    states = judge.states(0)
    caught = next(i for i in range(40, 52) if states[i].verdict == SHIFT)
    assert caught <= 47 and all(state.verdict in (SHIFT, REGRESSION) for state in states[caught:52])
    assert states[51].first == 40  # named at the shift's first commit, s0040
    assert judge.healthy(0)[40:52] == [False] * 12  # the nights ok on their own night no longer make the level
    assert verdicts(judge)[53:] == [OK] * 4


def test_a_level_never_becomes_normal_until_a_person_accepts_it() -> None:
    """Without an acceptance the fallen nights are regressions however many there are; with one from
    the fall's first commit, the nights after it are judged against the new level (and say so)."""
    points = [*nights(30), *nights(25, level=0.90, seed=7, start=30, prefix="new")]
    unaccepted = Judge(with_neighbours(accuracy(points)))
    assert set(verdicts(unaccepted)[30:]) == {REGRESSION}
    why = "new tokenizer: -4 points expected"
    accepted = Judge(with_neighbours(accuracy(points)), accepted=[Acceptance("m cfg gsm8k.flexible", "new0030", why, "2026-03-01")])
    assert verdicts(accepted)[30:] == [OK] * 25
    (series,) = accepted.judge(only=[0])
    assert series.acceptance is not None and series.newest is not None
    assert f"level accepted from new0030 on 2026-03-01: {why}" in series.newest.why
    assert series.reference is not None and abs(series.reference.level - 0.90) < 0.01


def test_a_young_series_is_judged_against_its_siblings_from_its_first_night() -> None:
    """One run of six configurations of one model, the first of each series: the one 7 points low is a
    regression against the other five; the others are ok; a model with one configuration is
    insufficient, saying how many more nights it needs."""
    values = {"tp8-full": 0.942, "tp8-piecewise": 0.943, "dp8-full": 0.936, "dp8-eager": 0.937, "tp8-eager": 0.942,
              "dp8-piecewise": 0.870}
    batch = [accuracy([SeriesPoint("c1", "2026-01-01", v, "run-1", n=N)], f"demo {cfg} gsm8k.flexible", f"demo {cfg}", "demo")
             for cfg, v in values.items()]
    batch.append(accuracy([SeriesPoint("c1", "2026-01-01", 0.5, "run-2", n=N)], "lone gsm8k.flexible", "lone", "lone"))
    judge = Judge(batch)
    judged = {j.series.name: j.newest for j in judge.judge()}
    broken = judged["demo dp8-piecewise gsm8k.flexible"]
    assert broken is not None and broken.verdict == REGRESSION
    assert "below what its siblings allow: 0.87 vs the median 0.942 of 5 other configurations of demo" in broken.why
    assert all(j is not None and j.verdict == OK for name, j in judged.items() if name.startswith("demo") and j is not broken)
    lone = judged["lone gsm8k.flexible"]
    assert lone is not None and lone.verdict == INSUFFICIENT and lone.needed == 5
    assert lone.why.startswith("5 more earlier points needed")


def test_a_floor_that_cannot_act_is_insufficient_and_says_how_many_nights_would_make_it_act() -> None:
    """A lone series (no neighbours to pool with, no n): six nights give a t limit on two degrees of
    freedom, far past twice a well-known one. The judge says how many more nights it needs; after
    that many more healthy nights, it gives a floor."""
    rng = random.Random(1)
    points = [SeriesPoint(f"c{i}", f"2026-01-{i:02d}", 0.9 + rng.gauss(0, 0.004), f"r{i}") for i in range(1, 7)]
    judge = Judge([accuracy(points)])
    (series,) = judge.judge()
    assert series.reference is None and series.shortfall is not None and series.shortfall.needed
    needed = series.shortfall.needed
    assert "degrees of freedom" in series.shortfall.why
    more = [SeriesPoint(f"d{i}", f"2026-02-{i:02d}", 0.9 + rng.gauss(0, 0.004), f"s{i}") for i in range(needed)]
    (later,) = Judge([accuracy([*points, *more])]).judge()
    assert later.reference is not None and later.shortfall is None
    (short,) = Judge([accuracy([*points, *more[:-1]])]).judge()
    assert short.reference is None  # one night fewer does not do


def test_a_share_floor_below_zero_is_never_reported() -> None:
    """A collapse-rate series that swings between 0 and 40%: its floor for the next night would sit
    outside [0, 1]; the night is insufficient, and no number of nights at this noise would help."""
    points = [SeriesPoint(f"c{i}", f"2026-01-{i:02d}", 0.4 * (i % 2), f"r{i}", n=64) for i in range(1, 30)]
    series = Series("m cfg repetition.collapse_rate", "m cfg", "m", "repetition.collapse_rate", OTHER, "", False, points)
    (judged,) = Judge([series]).judge()
    assert judged.reference is None and judged.newest is not None and judged.newest.verdict == INSUFFICIENT
    assert judged.shortfall is not None and judged.shortfall.needed is None
    assert "outside the metric's range (a share in [0, 1])" in judged.newest.why


def test_on_atom_s_dashboard_a_series_that_fell_and_stayed_down_is_a_regression_every_night(tmp_path: Path) -> None:
    """ATOM::DeepSeek-R1-0528-FP4 MTP fell from ~0.94 to ~0.09, then sat near 0.56 for days: the
    judge before issue 47 called 16 of those nights ok (its level re-read from the fallen nights);
    now each is a regression until the night it came back (2026-04-10T12:24), and each says so."""
    db = tmp_path / "atom.db"
    assert evalkit_cli("history", "--import", str(ATOM), "--db", str(db)).returncode == 0
    ran = evalkit_cli("history", "judge", "--db", str(db), "--all", "--format", "json",
                      "--series", "ATOM::DeepSeek-R1-0528-FP4 MTP accuracy")
    (series,) = json.loads(ran.stdout)["series"]
    night = {p["date"][:16]: p for p in series["points"]}
    fallen = [p for p in series["points"] if "2026-04-05T16:16" <= p["date"] < "2026-04-10T12:24"]
    assert len(fallen) == 25 and {p["verdict"] for p in fallen} == {REGRESSION}
    assert "since be228160f09e, 25 nights" in fallen[-1]["why"] and "vs healthy 0.93" in fallen[-1]["why"]
    assert night["2026-04-10T12:24"]["verdict"] == OK and night["2026-04-10T12:24"]["run"].startswith("https://")


def sha(day: int) -> str:
    """Night `day`'s engine commit."""
    return f"{day:02d}" + "a" * 38


def night(results: Path, run_id: str, day: int, right: int, n: int | None = None) -> None:
    """A stored nightly of one cell (tp8-fixon, 20 questions) at its own engine commit; `n` cuts its
    GSM8K to fewer questions (a `--limit` run: another question set, so another comparability key)."""
    run_path, config = write_run(results, run_id, {"tp8-fixon": CellSpec(
        right=right, long_texts=["fine"] * 4, source_sha=sha(day), started_at=f"2026-11-{day:02d}T02:00:00+00:00")},
        started_at=f"2026-11-{day:02d}T02:00:00+00:00")
    if n is not None:
        cell = read_json(run_path / "tp8-fixon" / "cell.json")
        cell["metrics"]["gsm8k"] |= {"n": n, "flexible": min(right, n) / n, "strict": min(right, n) / n}
        write_json(run_path / "tp8-fixon" / "cell.json", cell)
    write_json(run_path / "summary.json", summary_of(run_path, config))


@pytest.fixture
def fallen(tmp_path: Path) -> Path:
    """Twelve healthy nights of 20 questions (18 or 19 right), then three 30 points down (12, 12, 13)."""
    results = tmp_path / "results"
    for day, right in enumerate([19, 18, 19, 19, 18, 19, 19, 18, 19, 19, 18, 19, 12, 12, 13], start=1):
        night(results, f"night-{day:02d}", day, right)
    assert evalkit_cli("history", "--import", "all", "--results-dir", str(results)).returncode == 0
    return results


SERIES = "sim/test-model tp8-fixon gsm8k.flexible"


def test_a_person_accepts_a_new_level_from_a_commit_and_the_judge_shows_it(fallen: Path) -> None:
    before = evalkit_cli("history", "judge", "--series", SERIES, "--results-dir", str(fallen))
    assert before.returncode == 1 and f"since {sha(13)[:12]}, 3 nights, level 0.6 vs healthy 0.95" in before.stdout
    accepted = evalkit_cli("history", "accept", SERIES, "--from", sha(13)[:10], "--why", "harder prompt set",
                           "--results-dir", str(fallen))
    assert accepted.returncode == 0, accepted.output
    first = accepted.stdout.splitlines()[0]
    assert first.startswith(f"{SERIES}: level accepted from {sha(13)[:12]} on 20") and first.endswith(": harder prompt set")
    assert "newest night now: ok" in accepted.stdout
    after = evalkit_cli("history", "judge", "--series", SERIES, "--results-dir", str(fallen))
    assert after.returncode == 0 and "    level accepted from" in after.stdout and "harder prompt set" in after.stdout
    as_json = json.loads(evalkit_cli("history", "judge", "--series", SERIES, "--format", "json",
                                     "--results-dir", str(fallen)).stdout)
    (row,) = as_json["series"]
    assert row["accepted"]["from"] == sha(13) and row["accepted"]["why"] == "harder prompt set"
    assert row["points"][0]["run"] == "night-15"


@pytest.mark.parametrize(("args", "says"), [
    (["no such series", "--from", "abc", "--why", "x"], "error: no such series: no such series"),
    ([SERIES, "--from", "ffff", "--why", "x"], f"error: --from ffff: no point of {SERIES} ran it"),
    ([SERIES, "--from", "1", "--why", "x"], f"error: --from 1: matches 6 commits of {SERIES}; give more of it"),
    ([SERIES, "--from", sha(13), "--why", " "], "error: --why: say why the new level is right"),
])
def test_accepting_names_what_is_wrong_in_one_line(fallen: Path, args: list[str], says: str) -> None:
    ran = evalkit_cli("history", "accept", *args, "--results-dir", str(fallen))
    assert ran.returncode == 2 and ran.output.startswith(says) and len(ran.output.strip().splitlines()) == 1


def test_a_run_of_another_question_set_starts_its_own_series_and_the_replaced_one_is_said_once(tmp_path: Path) -> None:
    """Ten nights of 20 questions, then two of a 10-question cut: another comparability key, so
    another series (named with its key), judged against its sibling-less first nights as insufficient
    rather than against the 20-question level; the 20-question series is left out, said once."""
    results = tmp_path / "results"
    for day in range(1, 11):
        night(results, f"night-{day:02d}", day, 19)
    for day in (11, 12):
        night(results, f"night-{day:02d}", day, 19, n=10)
    assert evalkit_cli("history", "--import", "all", "--results-dir", str(results)).returncode == 0
    ran = evalkit_cli("history", "judge", "--series", "tp8-fixon gsm8k.flexible", "--results-dir", str(results))
    lines = ran.stdout.splitlines()
    left_out = [line for line in lines if line.startswith("left out:")]
    assert len(left_out) == 1 and f"{SERIES} (replaced by {SERIES} #" in left_out[0]
    assert "from run night-11 on: gsm8k question set: 20 vs 10" in left_out[0]
    judged = json.loads(evalkit_cli("history", "judge", "--series", "tp8-fixon gsm8k.flexible", "--format", "json",
                                    "--results-dir", str(results)).stdout)
    (current,) = judged["series"]
    assert current["name"].startswith(f"{SERIES} #") and current["n"] == 2
    assert [row["name"] for row in judged["left_out"]] == [SERIES]


def test_model_floors_are_the_judge_s_next_night_boundaries_of_the_current_keys_only(tmp_path: Path) -> None:
    """What `calibrate --from-history` reads (history.judge.model_floors): a model's series of the
    key that ran last, each with the floor the judge holds its next night to; a replaced key's
    series is not offered, and a series whose floor cannot act offers none, saying why."""
    from evalkit.history.db import History
    from evalkit.history.judge import model_floors

    results = tmp_path / "results"
    for day in range(1, 13):
        night(results, f"night-{day:02d}", day, 19 if day % 3 else 18)
    night(results, "night-13", 13, 19, n=10)
    assert evalkit_cli("history", "--import", "all", "--results-dir", str(results)).returncode == 0
    with History(results / "history.db") as store:
        judge, judged = model_floors(store, "demo", "tp8-fixon")
        _, everything = model_floors(store, "demo")
    flexible = [j for j in judged if j.series.metric == "gsm8k.flexible"]
    assert [j.series.name for j in flexible] == [f"{SERIES} #{flexible[0].series.name.split('#')[1]}"]
    (young,) = flexible  # one night of 10 questions: no floor yet, and why
    assert young.reference is None and young.shortfall is not None and young.shortfall.needed
    assert {j.series.name for j in everything} >= {j.series.name for j in judged}
    old = next(s for s in judge.series if s.name == SERIES)
    assert old.replaced is not None and SERIES not in {j.series.name for j in everything}


def test_real_demo_runs_of_another_question_set_are_another_series(demo_runs: dict[str, Path], tmp_path: Path) -> None:
    """The session's real demo runs: run-b scored dp8-piecewise-fixoff on 30 questions with another
    simulator seed, run-a on 40. Recorded in one history, they are two series of that cell (their
    keys, from the real cell.json files, differ beyond the build), the older one left out and said
    once; the cells run-a alone ran are one series each."""
    db = tmp_path / "h.db"
    for run in (demo_runs["a"], demo_runs["b"]):
        assert evalkit_cli("history", "--import", str(run), "--db", str(db)).returncode == 0
    ran = evalkit_cli("history", "judge", "--db", str(db), "--format", "json", "--series", "gsm8k.flexible")
    out = json.loads(ran.stdout)
    fixoff = [row for row in out["left_out"] if "dp8-piecewise-fixoff gsm8k.flexible" in row["name"]]
    assert len(fixoff) == 1 and fixoff[0]["why"].endswith("gsm8k question set: 40 (stratified) vs 30 (stratified); "
                                                          "engine arguments differ")  # the seed flag, hashed
    judged = {row["name"].split(" #")[0].split(" ", 1)[1]: row for row in out["series"]}
    assert set(judged) == {"tp8-full-fixon gsm8k.flexible", "tp8-full-fixoff gsm8k.flexible",
                           "dp8-piecewise-fixon gsm8k.flexible", "dp8-piecewise-fixoff gsm8k.flexible"}
    assert judged["dp8-piecewise-fixoff gsm8k.flexible"]["points"][0]["run"] == "run-b"
    assert all(row["n"] == 1 for row in judged.values())
