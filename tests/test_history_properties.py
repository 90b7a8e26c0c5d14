"""The history judge as a specification over generated histories (hypothesis): mixed keys, planted
drops, a different number of questions per point.

* the judge never says ok for a point it could not judge: an ok night has a reference whose floor
  can act (inside the metric's range, a limit the noise supports) and passes it;
* every judged verdict matches its reference, recomputed from the counts: the night's binomial
  error from its n and the level, the floor from level, z and spread, broken below it;
* a planted lasting drop stays broken every night until a person accepts the new level, and is
  judged against the new level from then on;
* a 5-question point never moves the level or the noise a 1,319-question night is judged with;
* a series is one comparability key: recorded cells of another question set start another series.
"""

from __future__ import annotations

import json
import math
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.evals.units import SHARE
from evalkit.history.accept import Acceptance
from evalkit.history.db import Point
from evalkit.history.judge import Judge
from evalkit.history.reference import MEDIAN_VARIANCE, can_act
from evalkit.history.series import ACCURACY, Series, SeriesPoint, from_runs
from evalkit.history.verdicts import BROKEN, INSUFFICIENT, INTERMITTENT, OK, REGRESSION
from evalkit.stats.noise import binomial_var

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def scored(rng: random.Random, p: float, n: int | None) -> float:
    """A night's score: k of n right at share p (the plain share where n is unknown)."""
    p = min(max(p, 0.0), 1.0)
    return sum(rng.random() < p for _ in range(n)) / n if n else p


@st.composite
def histories(draw: st.DrawFn) -> list[Series]:
    """One to four series of one model (siblings in each run), each with its own level, n (known or
    not, 5-question nights mixed in), re-runs of some commits, and maybe a planted drop: one night,
    or lasting."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    count = draw(st.integers(1, 4))
    nights = draw(st.integers(1, 45))
    out = []
    for si in range(count):
        level = draw(st.floats(0.3, 0.97))
        n = draw(st.sampled_from([None, 200, 1319]))
        drop_at = draw(st.integers(0, nights))
        drop = draw(st.sampled_from([0.0, 0.02, 0.1, 0.6]))
        lasting = draw(st.booleans())
        points = []
        for night in range(nights):
            dropped = night == drop_at or (lasting and night >= drop_at)
            p = level + rng.gauss(0, 0.003) - (drop if dropped else 0.0)
            night_n = 5 if n and rng.random() < 0.1 else n
            for rerun in range(2 if rng.random() < 0.15 else 1):
                points.append(SeriesPoint(f"c{night:03d}", f"2026-01-01T{night:03d}{rerun}", scored(rng, p, night_n),
                                          f"run-{night}-{rerun}", n=night_n))
        out.append(Series(f"m cfg{si} gsm8k.flexible", f"m cfg{si}", "m", "gsm8k.flexible", ACCURACY, "", True, points))
    return out


@given(histories())
@SETTINGS
def test_no_night_is_ok_without_a_reference_that_can_act_and_that_it_passes(batch: list[Series]) -> None:
    judge = Judge(batch)
    for si, s in enumerate(batch):
        for pi, state in enumerate(judge.states(si)):
            ref = state.reference
            if state.verdict == INSUFFICIENT:
                assert ref is None and state.shortfall is not None
            if state.verdict == OK and state.acceptance is None:
                assert ref is not None and can_act(ref, True, SHARE) is None
                assert s.points[pi].value >= ref.floor(True) - 1e-12
            if state.verdict in BROKEN:
                assert ref is not None and can_act(ref, True, SHARE) is None
        for judged in judge.judge(every=True, only=[si]):
            for judgement in judged.judgements:
                if judgement.verdict == OK:
                    assert judgement.reference is not None and not judgement.why.startswith(("no number", "1 more", "2 more"))


@given(histories())
@SETTINGS
def test_every_verdict_matches_its_reference_recomputed_from_the_counts(batch: list[Series]) -> None:
    judge = Judge(batch)
    for si, s in enumerate(batch):
        states = judge.states(si)
        for pi, state in enumerate(states):
            ref, point = state.reference, s.points[pi]
            if ref is None:
                continue
            assert math.isclose(ref.binomial ** 2, binomial_var(ref.level, point.n), rel_tol=1e-9, abs_tol=1e-15)
            assert math.isclose(ref.sd ** 2, ref.tau ** 2 + ref.binomial ** 2, rel_tol=1e-9, abs_tol=1e-15)
            floor = ref.level - ref.z * ref.sd * math.sqrt(1 + MEDIAN_VARIANCE / ref.window)
            assert math.isclose(ref.floor(True), floor, rel_tol=1e-9, abs_tol=1e-12)
            below = point.value < floor
            fresh = state.first == pi  # a fall that begins tonight (a fallen series' later nights may sit within it)
            if state.verdict == INTERMITTENT or (state.verdict == REGRESSION and fresh):
                assert below
            if state.verdict == OK:
                assert not below


@given(st.integers(0, 2**32 - 1), st.integers(12, 30), st.integers(1, 20), st.floats(0.15, 0.9))
@SETTINGS
def test_a_planted_lasting_drop_stays_broken_until_a_person_accepts_it(seed: int, healthy: int, fallen: int,
                                                                       drop: float) -> None:
    rng = random.Random(seed)
    level = 0.94
    points = [SeriesPoint(f"h{i:03d}", f"2026-01-{i:03d}", scored(rng, level + rng.gauss(0, 0.003), 1319), f"h-{i}", n=1319)
              for i in range(healthy)]
    points += [SeriesPoint(f"f{i:03d}", f"2026-02-{i:03d}", scored(rng, level - drop, 1319), f"f-{i}", n=1319)
               for i in range(fallen)]
    others = [Series(f"o{k}", f"o{k}", f"o{k}", "gsm8k.flexible", ACCURACY, "", True,
                     [SeriesPoint(f"o{k}{i:03d}", f"2026-01-{i:03d}", scored(rng, 0.9, 1319), f"o{k}-{i}", n=1319)
                      for i in range(30)]) for k in range(3)]
    series = Series("m cfg gsm8k.flexible", "m cfg", "m", "gsm8k.flexible", ACCURACY, "", True, points)
    judge = Judge([series, *others])
    assert all(state.verdict in BROKEN for state in judge.states(0)[healthy:])
    acceptance = Acceptance(series.name, "f000", "new level", "2026-02-01")
    after = Judge([series, *others], accepted=[acceptance]).states(0)[healthy:]
    assert after[0].verdict == OK and after[0].reference is None  # the accepted level starts here
    for state in after[1:]:  # judged against the new level (where a floor can act there), never the one it fell from
        assert state.acceptance == acceptance
        if state.verdict != INSUFFICIENT:
            assert state.reference is not None and abs(state.reference.level - (level - drop)) < 0.06  # 4 binomial sds
            assert state.first is None or state.first > healthy


@given(st.integers(0, 2**32 - 1), st.integers(6, 40), st.lists(st.tuples(st.integers(0, 39), st.integers(0, 5)), max_size=8))
@SETTINGS
def test_a_5_question_point_never_moves_what_a_1319_question_night_is_judged_with(
        seed: int, nights: int, inserted: list[tuple[int, int]]) -> None:
    rng = random.Random(seed)
    full = [SeriesPoint(f"c{i:03d}", f"2026-01-{i:03d}", scored(rng, 0.94 + rng.gauss(0, 0.003), 1319), f"r{i}", n=1319)
            for i in range(nights)]
    mixed = list(full[:-1])
    for at, right in sorted(inserted, reverse=True):
        at = min(at, len(mixed))
        mixed.insert(at, SeriesPoint(f"q{at:03d}{right}", f"2026-01-{at:03d}x", right / 5, f"q{at}-{right}", n=5))
    mixed.append(full[-1])

    def last(points: list[SeriesPoint]) -> tuple[str, object]:
        series = Series("m cfg gsm8k.flexible", "m cfg", "m", "gsm8k.flexible", ACCURACY, "", True, points)
        verdict, ref, _ = Judge([series]).classify(0, len(points) - 1)
        return verdict, ref

    assert last(mixed) == last(full)


@given(st.lists(st.sampled_from([20, 10]), min_size=1, max_size=12), st.lists(st.booleans(), min_size=12, max_size=12))
@SETTINGS
def test_a_series_is_one_comparability_key(questions: list[int], legacy: list[bool]) -> None:
    """Cells recorded with another question set (a `--limit` run) start another series, whether the
    cell's whole key was recorded or only its row (n and set-up, before m006); exactly one series of
    the cell's metric is judged: the key that ran last."""
    points = []
    for night, n in enumerate(questions):
        key = None if legacy[night] else json.dumps({
            "evals": [{"name": "gsm8k", "setup": "s1", "fields": [], "questions": n, "limited": True}],
            "model": "m", "engine": "sim", "argv": ["sha256:a"], "env": [["sha256", "b"]]})
        points.append(Point(f"night-{night:02d}", "tp8-fixon", f"2026-01-{night + 1:02d}T02:00:00", "m", "sim", "ok",
                            f"{night:040x}", {"gsm8k.flexible": 0.9, "gsm8k.n": float(n)},
                            setups={"gsm8k": {"hash": "s1", "fields": {}}}, key=key))
    series = [s for s in from_runs(points) if s.metric == "gsm8k.flexible"]
    assert sorted(len(s.points) for s in series) == sorted(questions.count(n) for n in set(questions))
    assert all(len({p.n for p in s.points}) == 1 for s in series)
    judged = [s for s in series if s.replaced is None]
    assert len(judged) == 1 and judged[0].points[-1].run == f"night-{len(questions) - 1:02d}"
    assert all("gsm8k question set" in (s.replaced or "") for s in series if s is not judged[0])
