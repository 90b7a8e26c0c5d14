"""store/files.py: run folders written whole, read in plan order, named safely, found again.

What a kill or an error at any moment may leave behind: each file is either absent or complete
(temp files are dot-named `.tmp` and readers never take them for the real thing).
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from evalkit.errors import ConfigError
from evalkit.store import (
    RunStore,
    atomic_write_text,
    check_run_id,
    jsonl_writer,
    new_run_id,
    once_per_file_state,
    read_json,
    read_jsonl,
    resolve_run,
    write_json,
    write_jsonl,
)
from evalkit.store.records import read_run_records


def leftovers(folder: Path, keep: str) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name != keep)


# --- atomic writes ---------------------------------------------------------------------------


def test_a_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    """While a file is rewritten over and over, every read is one whole version."""
    path = tmp_path / "cell.json"
    versions = ["a" * 256_000 + "\n", "b" * 300_000 + "\n"]
    atomic_write_text(path, versions[0])
    done = threading.Event()
    seen: list[str] = []

    def writer() -> None:
        try:
            for i in range(40):
                atomic_write_text(path, versions[i % 2])
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    while not done.is_set() or len(seen) < 20:
        seen.append(path.read_text(encoding="utf-8"))
    thread.join()
    assert {text for text in seen} <= set(versions)
    assert leftovers(tmp_path, "cell.json") == []


def test_a_failed_write_keeps_the_old_file_and_leaves_only_a_dot_named_temp(tmp_path: Path) -> None:
    path = tmp_path / "table.md"
    atomic_write_text(path, "old\n")
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(path, "new \ud800 text")  # a lone surrogate: utf-8 refuses it mid-write
    assert path.read_text(encoding="utf-8") == "old\n"
    assert all(name.startswith(".table.md.") and name.endswith(".tmp") for name in leftovers(tmp_path, "table.md"))


def test_write_json_round_trips_creates_parents_and_refuses_nan(tmp_path: Path) -> None:
    path = tmp_path / "run" / "cell" / "cell.json"
    write_json(path, {"id": "tp8", "metrics": {"gsm8k": {"flexible": 0.5}}, "when": Path("x")})
    assert read_json(path) == {"id": "tp8", "metrics": {"gsm8k": {"flexible": 0.5}}, "when": "x"}
    with pytest.raises(ValueError):
        write_json(path, {"flexible": float("nan")})  # NaN is not JSON: refused, not written
    assert read_json(path)["id"] == "tp8"


def test_jsonl_file_appears_under_its_name_only_once_complete(tmp_path: Path) -> None:
    path = tmp_path / "cell" / "gsm8k.samples.jsonl"
    with jsonl_writer(path) as f:
        f.write(json.dumps({"id": "test-0"}) + "\n")
        f.flush()
        assert not path.exists()
        (tmp,) = os.listdir(path.parent)
        assert tmp.startswith(".gsm8k.samples.jsonl.") and tmp.endswith(".tmp")
        f.write(json.dumps({"id": "test-1"}) + "\n")
    assert [row["id"] for row in read_jsonl(path)] == ["test-0", "test-1"]
    assert leftovers(path.parent, path.name) == []


def test_an_exception_inside_jsonl_writer_leaves_no_file_under_its_name(tmp_path: Path) -> None:
    path = tmp_path / "repetition.samples.jsonl"
    with pytest.raises(RuntimeError, match="eval failed"), jsonl_writer(path) as f:
        f.write('{"id": "long-0"}\n')
        raise RuntimeError("eval failed")
    assert not path.exists()
    assert all(name.startswith(".") and name.endswith(".tmp") for name in os.listdir(tmp_path))


def test_a_failed_rewrite_of_a_jsonl_file_keeps_the_complete_old_one(tmp_path: Path) -> None:
    path = tmp_path / "gsm8k.samples.jsonl"
    write_jsonl(path, [{"id": "test-0"}, {"id": "test-1"}])

    def rows():
        yield {"id": "new-0"}
        raise RuntimeError("client died")

    with pytest.raises(RuntimeError):
        write_jsonl(path, rows())
    assert [row["id"] for row in read_jsonl(path)] == ["test-0", "test-1"]


def test_read_jsonl_skips_blank_lines_and_keeps_unicode(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    write_jsonl(path, [{"text": "Grüße ☃"}, {"text": "b"}])
    path.write_text(path.read_text(encoding="utf-8") + "\n   \n", encoding="utf-8")
    assert list(read_jsonl(path)) == [{"text": "Grüße ☃"}, {"text": "b"}]


# --- reading a file once per state -----------------------------------------------------------


def test_a_file_is_parsed_once_per_state_and_again_after_each_write(tmp_path: Path) -> None:
    parses: list[tuple[str, ...]] = []

    @once_per_file_state(maxsize=4)
    def ids(path: Path, field: str) -> list[str]:
        parses.append((path.name, field))
        return [row[field] for row in read_jsonl(path)]

    path = tmp_path / "a.samples.jsonl"
    write_jsonl(path, [{"id": "q1"}])
    assert ids(path, "id") == ids(path, "id") == ["q1"] and parses == [("a.samples.jsonl", "id")]
    write_jsonl(path, [{"id": "q1"}, {"id": "q2"}])  # written whole: a new state
    assert ids(path, "id") == ["q1", "q2"] and len(parses) == 2
    write_jsonl(path, [{"id": "q1"}, {"id": "q2"}, {"id": "q3"}])
    assert ids(path=path, field="id") == ["q1", "q2", "q3"] and len(parses) == 3  # by name too


def test_what_an_absent_file_means_is_the_functions_to_say(tmp_path: Path) -> None:
    @once_per_file_state(maxsize=4)
    def rows_or_none(first: Path, second: Path) -> int | None:
        try:
            return len(list(read_jsonl(first))) + len(list(read_jsonl(second)))
        except FileNotFoundError:
            return None

    @once_per_file_state(maxsize=4)
    def strict(path: Path) -> int:
        return len(list(read_jsonl(path)))

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl(a, [{"id": 1}])
    assert rows_or_none(a, b) is None
    write_jsonl(b, [{"id": 2}, {"id": 3}])  # the second file appears: the pair has a new state
    assert rows_or_none(a, b) == 3
    with pytest.raises(FileNotFoundError):
        strict(tmp_path / "c.jsonl")
    write_jsonl(tmp_path / "c.jsonl", [{"id": 4}])
    assert strict(tmp_path / "c.jsonl") == 1


# --- reading a run's cells -------------------------------------------------------------------


RUN = {"run_id": "r1", "status": "complete", "model": "m", "engine": "sim", "config_path": "c.yaml", "config": {}}


def test_read_run_records_follows_the_plan_and_fills_in_cells_never_written(tmp_path: Path) -> None:
    store = RunStore(tmp_path, "r1")
    store.create()
    store.write_run(RUN | {"cells": ["tp8-fixon", "dp8-fixon", "dp8-fixoff"]})
    store.write_cell("dp8-fixoff", {"id": "dp8-fixoff", "axes": {"p": "dp8"}, "status": "ok", "metrics": {"gsm8k": {"n": 3}}})
    store.write_cell("tp8-fixon", {"id": "tp8-fixon", "axes": {"p": "tp8"}, "status": "error", "metrics": {}})
    store.write_cell("stray", {"id": "stray", "axes": {}, "status": "ok", "metrics": {}})  # not in the plan
    # A kill while dp8-fixon's record was being written leaves only its temp file.
    store.cell_dir("dp8-fixon").mkdir()
    (store.cell_dir("dp8-fixon") / ".cell.json.4242.tmp").write_text('{"id": "dp8-fixon", "sta')
    run, cells = read_run_records(store.path)
    assert run.run_id == "r1"
    assert [(c.id, c.status, c.metrics) for c in cells] == [
        ("tp8-fixon", "error", {}), ("dp8-fixon", "not run", {}), ("dp8-fixoff", "ok", {"gsm8k": {"n": 3}})]
    # a written cell reads back as it was written; a cell never written has no axes
    assert cells[2].dump() == {"id": "dp8-fixoff", "axes": {"p": "dp8"}, "status": "ok", "metrics": {"gsm8k": {"n": 3}},
                               "schema_version": 1}
    assert cells[1].dump() == {"id": "dp8-fixon", "axes": {}, "status": "not run", "metrics": {}, "schema_version": 1}


def test_a_run_json_without_cells_has_none(tmp_path: Path) -> None:
    write_json(tmp_path / "run.json", RUN)
    run, cells = read_run_records(tmp_path)
    assert (run.run_id, cells) == ("r1", [])


def test_a_cell_json_that_is_not_a_record_is_refused_by_name(tmp_path: Path) -> None:
    write_json(tmp_path / "run.json", RUN | {"cells": ["c"]})
    write_json(tmp_path / "c" / "cell.json", {"id": "c", "axes": {}, "status": "finished"})
    with pytest.raises(ConfigError, match=r"c/cell.json: not a CellRecord \(\('status',\)"):
        read_run_records(tmp_path)


# --- run ids ---------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["r1", "20261203-020000-deepseek-ai-DeepSeek-V4", "nightly_2.5", "A-b.c_d"])
def test_check_run_id_accepts_plain_names(run_id: str) -> None:
    assert check_run_id(run_id) == run_id


@pytest.mark.parametrize("run_id", ["a/b", "../r1", "..", "a..b", ".hidden", "", "-r", "r 1", "/abs", "r\\x", "r\n"])
def test_check_run_id_refuses_paths_and_odd_names(run_id: str) -> None:
    with pytest.raises(ConfigError, match=r"use letters, digits, '-', '_' and '\.' only \(no '/' or '\.\.'\)"):
        check_run_id(run_id)


@pytest.mark.parametrize(
    ("model", "tail"),
    [("deepseek-ai/DeepSeek-V4", "-deepseek-ai-DeepSeek-V4"), ("Qwen/Qwen2.5-7B", "-Qwen-Qwen2.5-7B"),
     ("../../etc", "-etc"), ("", "-run"), ("☃", "-run"), (".hidden/", "-hidden"),
     ("demo..v2", "-demo.v2")],
)
def test_new_run_id_is_a_timestamp_and_a_valid_id_from_any_model_name(model: str, tail: str) -> None:
    run_id = new_run_id(model)
    stamp, rest = run_id[:15], run_id[15:]
    assert stamp[:8].isdigit() and stamp[8] == "-" and stamp[9:].isdigit()
    assert rest == tail
    assert check_run_id(run_id) == run_id


# --- creating a run folder -------------------------------------------------------------------


def test_create_makes_the_folder_and_cells_round_trip(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "results" / "nested", "r1")
    store.create()
    assert store.path == tmp_path / "results" / "nested" / "r1" and store.path.is_dir()
    assert os.listdir(store.path.parent) == ["r1"]  # the write probe is gone
    assert store.read_cell("tp8") is None
    store.write_cell("tp8", {"id": "tp8", "status": "ok"})
    store.write_run({"run_id": "r1", "status": "running"})
    assert store.read_cell("tp8") == {"id": "tp8", "status": "ok"}
    assert store.read_run() == {"run_id": "r1", "status": "running"}
    assert store.cell_dir("tp8") == store.path / "tp8"


def test_create_refuses_an_existing_run_folder_and_names_resume(tmp_path: Path) -> None:
    first = RunStore(tmp_path, "nightly")
    first.create()
    first.write_run({"run_id": "nightly", "status": "complete"})
    with pytest.raises(ConfigError, match=r"run folder exists already \(use --resume nightly\)"):
        RunStore(tmp_path, "nightly").create()
    assert first.read_run() == {"run_id": "nightly", "status": "complete"}


def test_a_run_id_with_a_path_in_it_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no '/' or '..'"):
        RunStore(tmp_path / "results", "../escape")
    assert not (tmp_path / "results").exists() and not (tmp_path / "escape").exists()


def test_a_results_dir_that_cannot_be_made_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("a file, not a folder")
    for results_dir, words in ((blocker, "results folder is a file, not a folder (--results-dir)"),
                               (blocker / "sub", "results folder is under a file, not a folder (--results-dir)")):
        with pytest.raises(ConfigError, match=re.escape(words)) as caught:
            RunStore(results_dir, "r1").create()
        assert str(caught.value).startswith(f"{results_dir}: ")
        assert isinstance(caught.value.__cause__, OSError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_results_dir_is_a_config_error(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="results folder is not writable"):
            RunStore(results, "r1").create()
    finally:
        results.chmod(0o700)


# --- finding a run again ---------------------------------------------------------------------


def make_run(results: Path, run_id: str, mtime: float) -> Path:
    write_json(results / run_id / "run.json", {"run_id": run_id})
    os.utime(results / run_id / "run.json", (mtime, mtime))
    return results / run_id


def test_latest_is_the_run_whose_run_json_changed_last(tmp_path: Path) -> None:
    make_run(tmp_path, "b-older", 1_000_000)
    newest = make_run(tmp_path, "a-newest", 3_000_000)
    make_run(tmp_path, "c-middle", 2_000_000)
    (tmp_path / "z-no-run-json").mkdir()
    (tmp_path / "z-no-run-json" / "cell.json").write_text("{}")
    assert resolve_run(tmp_path, "latest") == newest
    os.utime(tmp_path / "b-older" / "run.json", (4_000_000, 4_000_000))  # e.g. a resumed run finished
    assert resolve_run(tmp_path, "latest") == tmp_path / "b-older"


def test_latest_breaks_a_tie_by_run_id(tmp_path: Path) -> None:
    make_run(tmp_path, "20261203-a", 1_000_000)
    make_run(tmp_path, "20261203-b", 1_000_000)
    assert resolve_run(tmp_path, "latest").name == "20261203-b"


def test_latest_without_runs_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no runs yet"):
        resolve_run(tmp_path / "missing", "latest")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "half-made").mkdir()
    with pytest.raises(ConfigError, match=f"{tmp_path / 'empty'}: no runs yet"):
        resolve_run(tmp_path / "empty", "latest")


def test_a_run_is_found_by_id_or_by_path(tmp_path: Path) -> None:
    results = tmp_path / "results"
    by_id = make_run(results, "r1", 1_000_000)
    elsewhere = make_run(tmp_path / "copied", "r2", 1_000_000)
    assert resolve_run(results, "r1") == by_id
    assert resolve_run(results, str(elsewhere)) == elsewhere
    assert resolve_run(results, str(by_id)) == by_id


def test_a_ref_that_is_not_a_run_is_a_config_error(tmp_path: Path) -> None:
    results = tmp_path / "results"
    make_run(results, "r1", 1_000_000)
    (results / "half").mkdir()
    (results / "half" / ".run.json.4242.tmp").write_text('{"run_id": "ha')  # killed while writing run.json
    with pytest.raises(ConfigError, match=rf"^half: not a run \(no run\.json in {results / 'half'}\)$"):
        resolve_run(results, "half")
    with pytest.raises(ConfigError, match=rf"^nope: no such run \(no folder {results / 'nope'}\)$"):
        resolve_run(results, "nope")
    (results / "a-file").write_text("{}")
    with pytest.raises(ConfigError, match=rf"^a-file: {results / 'a-file'} is a file, not a run folder$"):
        resolve_run(results, "a-file")
    for path in (str(tmp_path / "nowhere"), "../nowhere/r1"):  # a path is only ever that folder
        with pytest.raises(ConfigError, match=rf"^{re.escape(path)}: no such run \(no folder {re.escape(path)}\)$"):
            resolve_run(results, path)
    with pytest.raises(ConfigError, match="no '/' or '..'"):
        resolve_run(results, "..")
