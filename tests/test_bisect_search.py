"""The bisect search as a specification: it names the first bad commit in ceil(log2 n) steps, passes
untestable commits over like `git bisect skip`, and says which range it could not split."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.bisect.search import Conclusion, Verdict, conclude, max_steps, next_probe


def bisect(n: int, first_bad: int, untestable: frozenset[int] = frozenset()) -> tuple[Conclusion, list[int]]:
    """Drive the search with a fake oracle: commits from `first_bad` on are bad."""
    verdicts: dict[int, Verdict] = {}
    probes: list[int] = []
    while (i := next_probe(n, verdicts)) is not None:
        assert i not in verdicts and 0 <= i < n - 1  # never the bad end, never twice
        probes.append(i)
        verdicts[i] = "untestable" if i in untestable else ("bad" if i >= first_bad else "good")
    return conclude(n, verdicts), probes


@pytest.mark.parametrize("n", [1, 2, 3, 7, 63, 64, 100])
def test_every_position_of_the_first_bad_commit_is_found_within_ceil_log2_n_steps(n: int) -> None:
    for k in range(n):
        result, probes = bisect(n, k)
        assert (result.status, result.first_bad) == ("found", k)
        assert len(probes) <= math.ceil(math.log2(n)) == max_steps(n)


def test_a_range_of_only_the_bad_end_needs_no_step() -> None:
    assert next_probe(1, {}) is None
    assert conclude(1, {}) == Conclusion("found", 0, 0)


def test_an_untestable_probe_is_passed_over_for_its_neighbour() -> None:
    first = next_probe(64, {})
    assert first == 31
    assert next_probe(64, {31: "untestable"}) in (30, 32)


def test_untestable_commits_just_before_the_first_bad_one_leave_a_range_that_cannot_be_split() -> None:
    result, _ = bisect(64, 40, frozenset({38, 39}))
    assert (result.status, result.lo, result.hi, result.first_bad) == ("untestable", 38, 40, None)


def test_a_range_of_only_untestable_commits_is_not_guessed() -> None:
    result, probes = bisect(10, 9, frozenset(range(9)))
    assert sorted(probes) == list(range(9))
    assert (result.status, result.lo, result.hi) == ("untestable", 0, 9)


def test_searching_until_the_last_probe() -> None:
    assert conclude(64, {}).status == "searching"


def test_a_skip_next_to_the_middle_can_cost_a_level_as_well_as_its_own_probe() -> None:
    """The case hypothesis found: the skipped middle leaves a 3 / 5 split, whichever neighbour is next."""
    result, probes = bisect(8, 6, frozenset({3}))
    assert (result.status, result.first_bad) == ("found", 6)
    assert probes == [3, 2, 4, 5, 6] and len(probes) == max_steps(8) + 1 + 1


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_with_any_untestable_commits_the_answer_is_exact_or_an_honest_range(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 80), label="n")
    k = data.draw(st.integers(0, n - 1), label="first_bad")
    skipped = frozenset(data.draw(st.sets(st.integers(0, max(0, n - 2)), max_size=n // 2), label="untestable"))
    result, probes = bisect(n, k, skipped - {n - 1})
    if k in skipped or (k > 0 and k - 1 in skipped):  # k, or the commit before it, could not be tested
        assert result.status == "untestable"
    if result.status == "found":
        assert result.first_bad == k
    else:
        assert result.status == "untestable"
        assert result.lo <= k <= result.hi
        assert all(i in skipped for i in range(result.lo, result.hi))  # only untestable ones are left
    # A skip costs one extra probe each, and the skips together at most one level more: a skipped
    # commit stays a candidate, so the next split is one off centre. n=8, commit 3 untestable: 3
    # candidates on one side of its neighbour, 5 on the other, and 5 take 3 more probes (hypothesis
    # found first bad 6 taking 5 probes; an exhaustive check of n <= 14 and 60,000 random ranges up
    # to 80 found no case beyond this bound).
    assert len(probes) <= max_steps(n) + len(skipped) + bool(skipped)
