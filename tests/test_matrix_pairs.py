"""A matrix's pairs (each fix-off cell and its fix-on twin, each cell and the baseline) compare only
what their config declares between them (issue 47 item 1; evalkit/verdict/pairs.py).

What a pair's two cells ran is set against what their axis values declare: anything else that
differs (a flag or variable from elsewhere, another commit of the same declared ref, another
engine version) makes the pair's checks NOT_CHECKED with the difference in words, and `evalkit
plan` names such a pair before any engine starts. The runs are hand-made folders
(tests/helpers/runs.py) whose launches are set here.
"""

from __future__ import annotations

from pathlib import Path

from evalkit.config import EngineSettings, parse_config
from evalkit.config.cells import expand
from evalkit.engine.catalog import CatalogEntry
from evalkit.engine.launch import PORT_PLACEHOLDER, build_launch
from evalkit.store import read_json, write_json
from evalkit.verdict.deltas import summarize_run
from evalkit.verdict.pairs import pair_lines
from evalkit.verdict.summary import CellRow, RunSummary
from tests.helpers.runs import CellSpec, config_dict, write_run

CELLS = ("tp8-fixon", "tp8-fixoff", "dp8-fixon", "dp8-fixoff")
GATES = [{"metric": "gsm8k.flexible", "max_drop_ab": 0.10}, {"metric": "gsm8k.flexible", "max_drop_vs_baseline": 0.10}]


def launched_as_declared(run: Path, port: int = 40000) -> None:
    """Give every cell the launch its config builds (each on its own port), as a real run records it."""
    config = parse_config(read_json(run / "run.json")["config"], "x.yaml")
    for i, cell in enumerate(expand(config)):
        path = run / cell.id / "cell.json"
        if path.is_file():
            launch = build_launch(config, cell, port + i)
            record = read_json(path)
            record["launch"] = launch.display(config.secret_env) | {"port": port + i}
            write_json(path, record)


def judged(run: Path) -> dict[str, CellRow]:
    config = parse_config(read_json(run / "run.json")["config"], "x.yaml")
    summary: RunSummary = summarize_run(run, config)
    return {row.id: row for row in summary.cells}


def outcomes(row: CellRow) -> list[tuple[str, str, str | None]]:
    return [(c.check, c.outcome, c.why) for c in row.checks or []]


def test_cells_that_ran_what_their_axes_declare_are_checked_as_before(tmp_path: Path) -> None:
    """Every cell differs from its twin and the baseline in its axis values only (flags, ports):
    every check is made."""
    run, _ = write_run(tmp_path, "r", dict.fromkeys(CELLS, CellSpec()), config_dict(thresholds=GATES))
    launched_as_declared(run)
    rows = judged(run)
    assert {o for row in rows.values() for _, o, _ in outcomes(row)} == {"PASS"}
    assert [c for c, _, _ in outcomes(rows["dp8-fixoff"])] == ["max_drop_ab", "max_drop_vs_baseline"]


def test_a_twin_launched_with_a_flag_beyond_its_axis_is_not_checked_with_the_flag_named(tmp_path: Path) -> None:
    run, _ = write_run(tmp_path, "r", dict.fromkeys(CELLS, CellSpec()), config_dict(thresholds=GATES))
    launched_as_declared(run)
    record = read_json(run / "dp8-fixoff" / "cell.json")
    record["launch"]["argv"] += ["--max-num-seqs", "128"]
    write_json(run / "dp8-fixoff" / "cell.json", record)
    rows = judged(run)
    why = "ran differently: engine argv: --max-num-seqs 128 in dp8-fixoff only"
    assert outcomes(rows["dp8-fixoff"]) == [("max_drop_ab", "NOT_CHECKED", why),
                                            ("max_drop_vs_baseline", "NOT_CHECKED", why)]
    assert rows["dp8-fixoff"].vs_ab is not None and rows["dp8-fixoff"].delta("vs_ab", "gsm8k.flexible").differs  # type: ignore[union-attr]
    assert [f.message for f in rows["dp8-fixoff"].flags][0] == f"dp8-fixoff: GSM8K flexible not compared with dp8-fixon: {why}"
    assert {o for _, o, _ in outcomes(rows["tp8-fixoff"])} == {"PASS"}  # the other pair is untouched


def test_a_twin_built_from_another_commit_of_the_same_ref_is_not_checked(tmp_path: Path) -> None:
    """A run resumed after its branch moved: both cells declare `main`, but ran other commits."""
    config = config_dict(thresholds=GATES, engine={"profile": "sim", "source": {"repo": "https://x/engine.git",
                                                                                "ref": "main"}})
    cells = {c: CellSpec(source_sha="1" * 40) for c in CELLS} | {"dp8-fixoff": CellSpec(source_sha="2" * 40)}
    run, _ = write_run(tmp_path, "r", cells, config)
    rows = judged(run)
    assert outcomes(rows["dp8-fixoff"])[0] == ("max_drop_ab", "NOT_CHECKED",
                                               f"ran differently: build: source {'2' * 12} vs {'1' * 12}")
    assert {o for _, o, _ in outcomes(rows["tp8-fixoff"])} == {"PASS"}


def test_a_twin_whose_axis_declares_its_source_may_differ_in_its_build(tmp_path: Path) -> None:
    """The fix axis as a commit and its parent: the build is the declared difference."""
    config = config_dict(thresholds=GATES)
    config["axes"]["fix"] = {"fixon": {"source": {"repo": "https://x/engine.git", "ref": "fix"}},
                             "fixoff": {"source": {"repo": "https://x/engine.git", "ref": "fix~1"}}}
    cells = {"tp8-fixon": CellSpec(source_sha="1" * 40), "tp8-fixoff": CellSpec(source_sha="2" * 40)}
    run, _ = write_run(tmp_path, "r", cells, config)
    assert {o for _, o, _ in outcomes(judged(run)["tp8-fixoff"])} == {"PASS"}


def _entry(*args: str) -> CatalogEntry:
    return CatalogEntry(entry="V4", path=".github/benchmark/models_accuracy.json", ref="r", sha=None, fields={},
                        settings=EngineSettings(), args=args, env={})


def test_plan_names_a_pair_whose_launches_differ_beyond_their_axes_before_any_engine_starts() -> None:
    """An engine CI catalog read at each cell's ref can add a flag to one side only: the plan says
    so, with the pair and the flag, and that its checks will be NOT_CHECKED."""
    config = parse_config(config_dict(thresholds=GATES), "x.yaml")
    cells = expand(config)
    plain = {c.id: build_launch(config, c, PORT_PLACEHOLDER) for c in cells}
    assert pair_lines(config, cells, plain) == ["# compared pairs: all 4 differ only in their declared axes"]
    read = {c.id: build_launch(config, c, PORT_PLACEHOLDER,
                               catalog=_entry("--max-model-len", "32768") if c.axes["fix"] == "fixon" else _entry())
            for c in cells}
    assert pair_lines(config, cells, read) == [
        "# compared pairs: 3 of 4 differ beyond their declared axes; their checks will be NOT_CHECKED",
        "#   tp8-fixoff vs its fix-on twin tp8-fixon: engine argv: --max-model-len 32768 in tp8-fixon only",
        "#   dp8-fixoff vs its fix-on twin dp8-fixon: engine argv: --max-model-len 32768 in dp8-fixon only",
        "#   dp8-fixoff vs the baseline: engine argv: --max-model-len 32768 in tp8-fixon only"]
