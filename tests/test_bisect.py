"""The commits a bisect searches and the terms it starts and resumes on, from a real throwaway git
repo (no engine started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.bisect.commits import commit_range
from evalkit.errors import ConfigError, LockHeld, SourceError
from evalkit.run.lock import DeviceLock
from tests.helpers.git import add_branch, config_text, git, make_repo


@pytest.fixture
def merged(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """main: root - m1 - merge(feature) - m2; feature (from m1): f1 - f2."""
    repo, root = make_repo(tmp_path)
    shas = {"root": root}
    for name in ("m1",):
        (repo / name).write_text(name)
        git(repo, "add", ".")
        git(repo, "commit", "-qm", f"{name} subject")
        shas[name] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    for name in ("f1", "f2"):
        (repo / name).write_text(name)
        git(repo, "add", ".")
        git(repo, "commit", "-qm", f"{name} subject")
        shas[name] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    shas["merge"] = git(repo, "rev-parse", "HEAD")
    (repo / "m2").write_text("m2")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "m2 subject")
    shas["m2"] = git(repo, "rev-parse", "HEAD")
    return repo, shas


def test_the_range_is_oldest_first_with_the_bad_end_last_and_the_good_end_apart(tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path)
    shas = add_branch(repo, "topic", 6, first_bad=3)
    r = commit_range(str(repo), shas[1][:8], "topic", tmp_path / "cache")
    assert [c.sha for c in r.commits] == shas[2:] and r.good.sha == shas[1] and r.bad.sha == shas[-1]
    assert r.commits[1].subject == "change 3: drop the ca_comm copy-in"
    assert r.commits[1].author_date == "2026-01-01T00:00:03+00:00"


def test_first_parent_by_default_skips_the_merged_branch_and_all_parents_follows_it(merged: tuple[Path, dict[str, str]],
                                                                                     tmp_path: Path) -> None:
    repo, s = merged
    mainline = commit_range(str(repo), s["m1"], "main", tmp_path / "cache")
    assert [c.sha for c in mainline.commits] == [s["merge"], s["m2"]]
    every = commit_range(str(repo), s["m1"], "main", tmp_path / "cache", first_parent=False)
    assert [c.sha for c in every.commits] == [s["f1"], s["f2"], s["merge"], s["m2"]]


def test_a_good_end_only_reached_through_a_merge_needs_all_parents(merged: tuple[Path, dict[str, str]],
                                                                   tmp_path: Path) -> None:
    repo, s = merged
    with pytest.raises(ConfigError, match="not on the first-parent line of --bad main; pass --all-parents"):
        commit_range(str(repo), s["f1"], "main", tmp_path / "cache")
    assert [c.sha for c in commit_range(str(repo), s["f1"], "main", tmp_path / "cache", first_parent=False).commits] \
        == [s["f2"], s["merge"], s["m2"]]


def test_bad_refs_are_one_line_errors_naming_the_option(merged: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    repo, s = merged
    with pytest.raises(SourceError, match=f"^--good nope: no such commit, branch or tag in {repo}$"):
        commit_range(str(repo), "nope", "main", tmp_path / "cache")
    with pytest.raises(ConfigError, match=rf"^--good main \(\w{{12}}\) is not an ancestor of --bad {s['m1']} "):
        commit_range(str(repo), "main", s["m1"], tmp_path / "cache")
    with pytest.raises(ConfigError, match="same commit"):
        commit_range(str(repo), "main", s["m2"], tmp_path / "cache")


def test_the_axis_that_gives_the_commits_must_be_named_when_several_carry_a_source(tmp_path: Path) -> None:
    from evalkit.bisect.driver import BisectRequest, run_bisect

    repo, root = make_repo(tmp_path)
    config = tmp_path / "two.yaml"
    config.write_text(f"""
model: m
engine: {{profile: sim}}
axes:
  engine: {{pinned: {{source: {{repo: "{repo}", ref: main}}}}, stock: {{args: ["--sim-fix", "on"]}}}}
  kernels: {{dev: {{source: {{repo: "{repo}", ref: main}}}}, off: {{args: ["--sim-seed", "1"]}}}}
exclude: [{{engine: pinned, kernels: dev}}]
""")

    def bisect(cell: str, axis: str | None = None) -> None:
        run_bisect(BisectRequest(config_path=config, cell=cell, good=root, bad="main", axis=axis,
                                 results_dir=tmp_path / "results", cache_dir=tmp_path / "cache"))

    with pytest.raises(ConfigError, match="^--axis: axes engine, kernels all carry a source; name the one to bisect$"):
        bisect("pinned-off")
    with pytest.raises(ConfigError, match="^--cell stock-off: its engine value stock has no source to bisect$"):
        bisect("stock-off", axis="engine")
    with pytest.raises(ConfigError, match="^--axis gpu: not an axis"):
        bisect("pinned-off", axis="gpu")
    with pytest.raises(ConfigError, match="same commit"):  # the axis is accepted: on to the commits
        bisect("pinned-off", axis="engine")
    assert not (tmp_path / "results").exists()


def test_a_device_lock_held_by_another_run_is_raised_before_the_bisect_folder_exists(tmp_path: Path) -> None:
    """A bisect starts engines like a matrix: on declared devices it takes the same lock first."""
    from evalkit.bisect.driver import BisectRequest, run_bisect

    repo, root = make_repo(tmp_path)
    shas = add_branch(repo, "topic", 3, first_bad=2)
    config = tmp_path / "bisect.yaml"
    config.write_text(config_text(repo, root) + "devices: {count: 8}\n")
    lock = tmp_path / "devices.lock"
    with DeviceLock(lock, "other-run"), pytest.raises(LockHeld, match=r"\(run other-run\); wait for it or pass --no-lock"):
        run_bisect(BisectRequest(config_path=config, cell="head", good=root, bad=shas[-1], bisect_id="b1",
                                 results_dir=tmp_path / "results", cache_dir=tmp_path / "cache", lock_file=lock))
    assert not (tmp_path / "results").exists()


def test_a_bisect_resumes_only_with_the_config_it_started_with(tmp_path: Path) -> None:
    """Its good end's build fails (no engine starts): the bisect is over and resuming it only
    reports it; once the config file changes, resuming it is refused, naming the file."""
    from evalkit.bisect.driver import BisectRequest, run_bisect

    repo, root = make_repo(tmp_path)
    shas = add_branch(repo, "topic", 3, first_bad=2)
    config = tmp_path / "bisect.yaml"
    text = config_text(repo, root).replace(f'ref: "{root}"}}', f'ref: "{root}", setup: ["false"]}}')
    config.write_text(text)
    terms = {"results_dir": tmp_path / "results", "cache_dir": tmp_path / "cache", "lock": False}
    first = run_bisect(BisectRequest(config_path=config, cell="head", good=root, bad=shas[-1], bisect_id="b1", **terms))
    assert first.record.status == "ends_not_as_claimed" and first.record.good is not None
    assert first.record.good.status == "error"
    again = run_bisect(BisectRequest(resume="b1", **terms))
    assert again.record == first.record
    config.write_text(text.replace("stop_grace: 5", "stop_grace: 6"))
    with pytest.raises(ConfigError, match=rf"^{config}: changed since bisect b1 started; start a new bisect$"):
        run_bisect(BisectRequest(resume="b1", **terms))
