"""A bisect's ends are one cell of one config at two commits: they may differ in their build and
in the questions asked, nothing else (store/comparability.py, the one answer every command asks).
Ends that ran differently (a bisect resumed after a flag or the environment changed) are not as
claimed, with the difference in words, rather than a bad end blamed on the commits.

The ends are hand-made cell folders (tests/helpers/runs.py); nothing is started.
"""

from __future__ import annotations

from pathlib import Path

from evalkit.bisect.ends import judge_ends
from evalkit.store import read_json, write_json
from tests.helpers.runs import CellSpec, write_run


def ends(tmp_path: Path) -> tuple[Path, Path]:
    """The good end right on all 20 questions at one commit, the bad end on 10 at the next."""
    good, _ = write_run(tmp_path, "good", {"dp8-fixoff": CellSpec(source_sha="1" * 40)})
    bad, _ = write_run(tmp_path, "bad", {"dp8-fixoff": CellSpec(right=10, source_sha="2" * 40)})
    return good / "dp8-fixoff", bad / "dp8-fixoff"


def test_ends_at_two_commits_are_judged_as_claimed(tmp_path: Path) -> None:
    good, bad = ends(tmp_path)
    config = write_run(tmp_path, "config", {})[1]
    judged = judge_ends(config, good, bad, alpha=0.01)
    assert judged.bad, judged.reason


def test_ends_that_ran_differently_are_not_as_claimed_and_say_what_differed(tmp_path: Path) -> None:
    good, bad = ends(tmp_path)
    record = read_json(bad / "cell.json")
    record["launch"]["argv"] += ["--max-num-seqs", "128"]
    write_json(bad / "cell.json", record)
    config = write_run(tmp_path, "config", {})[1]
    judged = judge_ends(config, good, bad, alpha=0.01)
    assert not judged.bad
    assert judged.reason == ("the ends ran differently (engine argv: --max-num-seqs 128 in the bad end only): "
                             "not comparable")
