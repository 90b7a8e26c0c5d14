"""The simulator's ATOM speculative-decoding log (evalkit/sim/mtp.py), in this process.

ATOM serves no /metrics at the refs evalkit tests: its scheduler logs `[MTP Stats ...]` lines,
which evalkit's atom profile reads back (profiles/atom.py `read_mtp_log`). These tests pin the
lines the simulator writes (to stderr, as ATOM's logger does) and the counts behind them; the
simulator as a process, with those lines in a cell's engine log, is tests/test_atom_spec.py's.
"""

from __future__ import annotations

import re

import pytest

from evalkit.profiles.atom import read_mtp_log
from evalkit.sim.mtp import LOG_INTERVAL, MtpLog, MtpStats

STATS = re.compile(r"^\[atom \d\d:\d\d:\d\d\] \[MTP Stats (Interval|        )\] Average toks/fwd: ([\d.]+), "
                   r"Accepted/Total Draft tokens: (\d+)/(\d+), Acceptance rate: ([\d.]+)%, "
                   r"Accepted tokens distribution: \{.*\}$")


def test_a_scheduler_logs_an_interval_and_a_total_line_every_thousand_steps_of_k_drafts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two lines at each multiple of 1000 x K draft tokens (the interval since the last log, then
    the cumulative figures), none in between, as ATOM's `SpecStats` does."""
    stats = MtpStats(k=3)
    for step in range(2 * LOG_INTERVAL - 1):
        stats.update(accepted_tokens=1 + step % 4)  # 0..3 drafts accepted, in turn
        if step == LOG_INTERVAL - 2:
            assert capsys.readouterr().err == ""
    first = capsys.readouterr().err.splitlines()
    stats.update(accepted_tokens=4)
    second = capsys.readouterr().err.splitlines()
    assert len(first) == 2 and len(second) == 2
    parsed = [STATS.match(line) for line in first + second]
    assert all(parsed), first + second
    interval, total = parsed[0], parsed[1]
    assert interval is not None and total is not None
    assert (interval.group(1), total.group(1)) == ("Interval", "        ")
    # 1000 steps of 3 drafts, accepting 0, 1, 2, 3 in turn: 1500 of 3000, 2.50 tokens per forward
    assert (interval.group(3), interval.group(4), interval.group(5), interval.group(2)) == ("1500", "3000", "50.00", "2.50")
    again = parsed[3]
    assert again is not None and (again.group(1), again.group(3), again.group(4)) == ("        ", "3000", "6000")
    assert stats.distribution == {0: 500, 1: 500, 2: 500, 3: 500}


def test_a_generation_takes_its_first_token_from_prefill_and_never_accepts_past_its_end() -> None:
    log = MtpLog(k=4, acceptance=1.0, ranks=1, seed=0)
    log.generation(tokens=12)  # 11 decoded: two steps of 4 drafts + bonus (10), then one of the bonus alone
    [stats] = log.ranks
    assert sum(stats.distribution.values()) == 3
    assert stats.distribution == {0: 1, 1: 0, 2: 0, 3: 0, 4: 2}
    assert stats.total_draft_tokens == 3 * 4


def test_each_generation_goes_to_the_next_rank_in_turn() -> None:
    log = MtpLog(k=2, acceptance=0.0, ranks=3, seed=0)
    for tokens in (5, 3, 2, 4):
        log.generation(tokens)
    assert [sum(r.distribution.values()) for r in log.ranks] == [4 + 3, 2, 1]  # rank 0 got the 1st and the 4th


def test_the_acceptance_drawn_follows_the_cell_s_share_and_its_seed() -> None:
    """Each draft is accepted with probability p from a generator seeded by --sim-seed: the same
    seed gives the same steps, and over many steps the share accepted is p."""

    def accepted_share(seed: int, p: float) -> tuple[float, dict[int, int]]:
        log = MtpLog(k=3, acceptance=p, ranks=1, seed=seed)
        for _ in range(200):
            log.generation(tokens=257)
        [stats] = log.ranks
        steps = sum(stats.distribution.values())
        accepted = sum(k * v for k, v in stats.distribution.items())
        return accepted / (steps * 3), stats.distribution

    share, distribution = accepted_share(7, 0.46)
    assert share == pytest.approx(0.46, abs=0.02)
    assert accepted_share(7, 0.46)[1] == distribution and accepted_share(8, 0.46)[1] != distribution
    assert accepted_share(7, 0.0)[0] == 0.0


def test_evalkit_reads_back_the_counts_the_simulator_logged(capsys: pytest.CaptureFixture[str]) -> None:
    """What the atom profile reads from an engine log is what the simulator's schedulers counted up
    to each one's last line (two ranks, whose lines interleave as ATOM's DP ranks' do)."""
    log = MtpLog(k=3, acceptance=0.5, ranks=2, seed=1)
    while min(r.total_draft_tokens for r in log.ranks) < 2 * LOG_INTERVAL * 3:
        log.generation(tokens=64)
    counts = read_mtp_log(capsys.readouterr().err)
    logged = LOG_INTERVAL * 3
    assert counts is not None
    assert counts.lines == sum(r.total_draft_tokens // logged for r in log.ranks) >= 4
    assert counts.draft_tokens == sum(r.total_draft_tokens // logged * logged for r in log.ranks)
    assert counts.drafts == counts.draft_tokens // 3
    assert 0.45 < counts.accepted_tokens / counts.draft_tokens < 0.55
