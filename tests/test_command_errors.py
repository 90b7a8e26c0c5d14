"""Every command's exit code and errors as a new user meets them (issue 47, item 7).

A nightly job and a PR gate automate `report`, `cell`, `bisect` and `history` beside `matrix`:
each must exit with the code it prints, say the real cause of a failure in one line (a clone
that failed is not an unknown ref; a missing file is not "not a run"; a results folder that is a
file is not "no runs yet"), and leave nothing behind when it fails: no empty history database,
no empty cache folder, no half-written plot after a printed report.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from evalkit.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_THRESHOLD, ConfigError
from evalkit.store import check_writable, read_json, removed_on_failure
from tests.helpers.cli import evalkit_cli
from tests.helpers.git import config_text, make_repo


def _one_error_line(stderr: str) -> str:
    """The single `error: ...` line a failed command prints (a traceback or a usage block fails)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0].removeprefix("error: ")


def _tree(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


# report ----------------------------------------------------------------------------------------


def test_report_exits_with_the_code_it_prints_and_ends_with_the_headline(demo_runs: dict[str, Path]) -> None:
    """Run A broke a threshold: its report says `exit 1` and now exits 1 (it exited 0), and its last
    line is the headline, as `matrix` ends, so a CI log's last line is the verdict."""
    summary = read_json(demo_runs["a"] / "summary.json")
    assert summary["exit_code"] == EXIT_THRESHOLD
    done = evalkit_cli("report", "run-a", "--results-dir", str(demo_runs["results"]), env={"COLUMNS": "1000"})
    assert done.returncode == EXIT_THRESHOLD, done.stderr
    lines = done.stdout.rstrip("\n").splitlines()
    assert f"; exit {EXIT_THRESHOLD}" in done.stdout
    assert lines[-1].startswith("NOT OK ") and lines[-1] == lines[0]


def test_a_report_document_keeps_stdout_to_itself_and_says_the_headline_on_stderr(demo_runs: dict[str, Path]) -> None:
    """`--format json` on stdout stays parseable; the headline goes to stderr, as `matrix --json`
    does, and the exit code is the run's all the same."""
    import json

    done = evalkit_cli("report", "run-a", "--format", "json", "--results-dir", str(demo_runs["results"]))
    assert done.returncode == EXIT_THRESHOLD
    assert json.loads(done.stdout) == read_json(demo_runs["a"] / "summary.json")
    assert done.stderr.strip().splitlines()[-1].startswith("NOT OK ")


def test_report_with_a_file_as_its_results_folder_says_it_is_a_file(tmp_path: Path) -> None:
    """`--results-dir FILE` said "no runs yet", as if the folder were merely empty."""
    (tmp_path / "notes.txt").write_text("not a folder\n")
    done = evalkit_cli("report", "--results-dir", "notes.txt", cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert _one_error_line(done.stderr) == "notes.txt: results folder is a file, not a folder (--results-dir)"
    done = evalkit_cli("report", "some-run", "--results-dir", "notes.txt", cwd=tmp_path)
    assert _one_error_line(done.stderr) == "notes.txt: results folder is a file, not a folder (--results-dir)"


@pytest.mark.parametrize(("ref", "said"), [
    ("latest", "{results}: no runs yet (no such folder)"),
    ("no-such-run", "no-such-run: no such run (no folder {results}/no-such-run)"),
    ("notes.txt", "notes.txt: a file, not a run folder"),
    ("./half", "./half: not a run (no run.json in half)"),
])
def test_a_run_that_is_not_there_is_named_for_what_it_is(tmp_path: Path, ref: str, said: str) -> None:
    """Missing results, a missing id, a file, a folder without run.json: four causes, four lines."""
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "half").mkdir()
    done = evalkit_cli("report", ref, "--results-dir", "results", cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert _one_error_line(done.stderr) == said.format(results="results")


def test_a_run_json_that_does_not_parse_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """A run.json cut short (a full disk, an edit by hand) was a JSONDecodeError traceback; one
    without its config snapshot a KeyError."""
    (tmp_path / "results" / "cut").mkdir(parents=True)
    (tmp_path / "results" / "cut" / "run.json").write_text('{"run_id": "cut", ')
    (tmp_path / "results" / "bare").mkdir()
    (tmp_path / "results" / "bare" / "run.json").write_text('{"run_id": "bare"}')
    cut = evalkit_cli("report", "cut", cwd=tmp_path)
    assert cut.returncode == EXIT_BAD_INPUT
    assert re.fullmatch(r"results/cut/run\.json: not valid JSON \(.+, line 1 column \d+\)", _one_error_line(cut.stderr))
    bare = evalkit_cli("report", "bare", cwd=tmp_path)
    assert _one_error_line(bare.stderr) == ("results/bare/run.json: no config snapshot (config): not a run.json "
                                            "evalkit wrote")


def test_report_outputs_that_cannot_be_written_are_refused_before_anything_prints(demo_runs: dict[str, Path],
                                                                                   tmp_path: Path) -> None:
    """A `--plot` under a file raised FileExistsError after the report was printed; `-o` with the
    terminal format printed a usage block. Each is one line, exit 2, and nothing on stdout."""
    (tmp_path / "notes.txt").write_text("x")
    results = str(demo_runs["results"])
    for args, said in [
        (("--plot", "notes.txt/deltas.png"), "--plot notes.txt/deltas.png: notes.txt is a file, not a folder"),
        (("--format", "markdown", "-o", "notes.txt/r.md"), "-o/--output notes.txt/r.md: notes.txt is a file, not a folder"),
        (("-o", "r.txt"), "-o/--output needs a document format: --format "),
    ]:
        done = evalkit_cli("report", "run-a", "--results-dir", results, *args, cwd=tmp_path)
        assert done.returncode == EXIT_BAD_INPUT and done.stdout == ""
        assert _one_error_line(done.stderr).startswith(said)
    assert _tree(tmp_path) == {Path("notes.txt")}


# cell ------------------------------------------------------------------------------------------


def test_cell_of_a_run_that_is_not_there_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """`cell --run latest` read `results/latest/run.json` and printed a 40-line traceback; its own
    --help example, run where that run does not exist, must fail as cleanly."""
    done = evalkit_cli("cell", "--run", "latest", "--cell", "tp8-full-fixon", cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert _one_error_line(done.stderr) == "results: no runs yet (no such folder)"
    helped = evalkit_cli("cell", "--help").stdout
    examples = [line.strip().removeprefix("evalkit ").split() for line in helped.splitlines()
                if line.strip().startswith("evalkit cell ")]
    assert any("latest" in example for example in examples), helped
    for example in examples:
        done = evalkit_cli(*example, cwd=tmp_path)
        assert done.returncode == EXIT_BAD_INPUT, (example, done.stderr)
        _one_error_line(done.stderr)
    assert _tree(tmp_path) == set()


def test_cell_latest_runs_a_cell_of_the_newest_run(demo_runs: dict[str, Path], tmp_path: Path,
                                                   engine_processes: None) -> None:
    """`latest` resolves as `report` resolves it (the run whose run.json changed last): the cell
    runs again there (its engine started and stopped) and its cell.json is rewritten."""
    results = tmp_path / "results"
    shutil.copytree(demo_runs["a"], results / "run-a")
    cell_json = results / "run-a" / "tp8-full-fixon" / "cell.json"
    before = read_json(cell_json)["started_at"]
    done = evalkit_cli("cell", "--run", "latest", "--cell", "tp8-full-fixon", "--results-dir", str(results),
                       cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr[-3000:]
    after = read_json(cell_json)
    assert after["status"] == "ok" and after["started_at"] != before


# bisect ----------------------------------------------------------------------------------------


def test_bisect_whose_clone_fails_says_the_clone_failed_and_leaves_no_cache(tmp_path: Path) -> None:
    """Offline (or a wrong URL), bisect said "--good v1: not a commit of URL", sending the user to
    check a ref that was never looked at; and the failed clone left an empty cache folder."""
    missing = f"file://{tmp_path}/nowhere/engine.git"
    (tmp_path / "bisect.yaml").write_text(config_text(missing))  # type: ignore[arg-type]
    done = evalkit_cli("bisect", "--config", "bisect.yaml", "--cell", "head", "--good", "v1", "--bad", "main", "-q",
                       cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    said = _one_error_line(done.stderr)
    assert said.startswith(f"source {missing}: cannot clone: fatal: ") and "does not appear to be a git repository" in said
    assert _tree(tmp_path) == {Path("bisect.yaml")}


def test_bisect_with_an_unknown_ref_says_the_ref_is_not_in_the_repo(tmp_path: Path) -> None:
    """A repo that is reached but lacks the ref: that, and which option gave it."""
    repo, _ = make_repo(tmp_path)
    (tmp_path / "bisect.yaml").write_text(config_text(repo))
    done = evalkit_cli("bisect", "--config", "bisect.yaml", "--cell", "head", "--good", "v9.9", "--bad", "main", "-q",
                       cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert _one_error_line(done.stderr) == f"--good v9.9: no such commit, branch or tag in {repo}"
    assert not (tmp_path / "results").exists() and not (tmp_path / ".evalkit-cache").exists()


# history ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "said"), [
    (("--import", "data.js"), "data.js: no such file (--import reads a dashboard's data.js or its JSON, or a run)"),
    (("--import", "nightly.json"), "nightly.json: no such file (--import reads a dashboard's data.js or its JSON, or a run)"),
    (("--import", "no-such-run"), "no-such-run: no such run (no folder results/no-such-run)"),
    (("--import", "notes.txt"), "notes.txt: not a github-action-benchmark data.js or JSON"),
    (("--import", "all", "--results-dir", "notes.txt"), "notes.txt: results folder is a file, not a folder (--results-dir)"),
    ((), "give --model NAME; recorded models: none yet"),
    (("--db", "nightly/h.db"), "give --model NAME; recorded models: none yet"),
    (("--model", "demo"), "history: no recorded cells for model 'demo'"),
    (("judge",), "results/history.db: no history database (record a run, or --import a dashboard, first)"),
    (("judge", "--db", "nightly/h.db"), "nightly/h.db: no history database (record a run, or --import a dashboard, first)"),
])
def test_a_failed_history_command_says_why_and_leaves_no_database(tmp_path: Path, args: tuple[str, ...],
                                                                   said: str) -> None:
    """`history --import data.js` of a missing file said "not a run" and left an empty
    results/history.db behind, which the next `history judge` read as "no series recorded yet":
    every failure here names its cause and the folder is as it was."""
    (tmp_path / "notes.txt").write_text("not a dashboard\n")
    done = evalkit_cli("history", *args, cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert _one_error_line(done.stderr).startswith(said)
    assert _tree(tmp_path) == {Path("notes.txt")}


def test_a_failed_history_command_keeps_a_database_that_was_there(tmp_path: Path) -> None:
    """Only what the failed command made is removed: an existing history survives bad input."""
    from evalkit.history import History

    db = tmp_path / "results" / "history.db"
    with History(db):
        pass
    before = db.read_bytes()
    done = evalkit_cli("history", "--model", "demo", cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT and db.read_bytes() == before


@pytest.mark.parametrize(("args", "option"), [
    (("history", "--model", "demo", "--plot", "notes.txt/trend.png"), "--plot"),
    (("matrix", "--model", "demo", "--history-db", "notes.txt/h.db"), "--history-db"),
    (("matrix", "--model", "demo", "--junit", "notes.txt/junit.xml"), "--junit"),
])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(tmp_path: Path, args: tuple[str, ...],
                                                                    option: str) -> None:
    """A file an option asks for under a path that is a file was a traceback after the table
    (`--plot`) or a warning after the last cell (`--history-db`): now one line naming the option,
    exit 2, before a database, a run folder or an engine exists."""
    (tmp_path / "notes.txt").write_text("a file, not a folder\n")
    done = evalkit_cli(*args, cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert _one_error_line(done.stderr) == f"{option} {args[-1]}: notes.txt is a file, not a folder"
    assert _tree(tmp_path) == {Path("notes.txt")}


# the helpers -----------------------------------------------------------------------------------


def test_removed_on_failure_undoes_only_what_the_block_made(tmp_path: Path) -> None:
    """A file, its SQLite side files and the folders made for it go when the block raises; they
    stay when it succeeds; a file that was there before stays either way."""
    made = tmp_path / "a" / "b" / "h.db"
    with pytest.raises(ConfigError), removed_on_failure(made):
        made.parent.mkdir(parents=True)
        made.write_text("x")
        made.with_name("h.db-wal").write_text("x")
        raise ConfigError("bad input")
    assert _tree(tmp_path) == set()
    with removed_on_failure(made):
        made.parent.mkdir(parents=True)
        made.write_text("kept")
    assert made.read_text() == "kept"
    with pytest.raises(KeyboardInterrupt), removed_on_failure(made):
        raise KeyboardInterrupt
    assert made.read_text() == "kept"


def test_check_writable_names_the_option_and_the_cause(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match=r"^--plot .*/f/deep/x\.png: .*/f is a file, not a folder$"):
        check_writable(tmp_path / "f" / "deep" / "x.png", "--plot")
    with pytest.raises(ConfigError, match=r"^-o/--output .*/d: a folder, not a file$"):
        check_writable(tmp_path / "d", "-o/--output")
    check_writable(tmp_path / "new" / "deeper" / "x.png", "--plot")
    assert not (tmp_path / "new").exists()
