"""The report is generic over the eval registry: a toy eval registered here, with a continuous
metric and a count with events, appears in every table, pivot, legend, details section and CSV
with no edit to render/. Runs are hand-made (tests/helpers/runs.py), plus the toy eval's metrics."""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from evalkit.evals import registry
from evalkit.evals.base import Comparison, Eval, EvalDisplay, EvalSettings, Evidence, MetricDisplay, MetricSpec
from evalkit.evals.recorded import specs_of
from evalkit.render import render, render_compare, table
from evalkit.render.compare_table import compare_columns
from evalkit.render.header import legend
from evalkit.render.table import columns
from evalkit.store import read_json, write_json, write_jsonl
from evalkit.verdict.compare import compare_runs
from evalkit.verdict.summary import Flag, RunSummary
from tests.helpers.runs import CellSpec, config_dict, gfm, rerun, summary_of, tables, write_run


def _crashes(flat: Mapping[str, Any]) -> str:
    return "-" if flat.get("toy.crash_rate") is None else f"{flat['toy.crashed']} of {flat['toy.n']}"


class Toy(Eval):
    """A score per cell and crashed samples out of n."""

    name = "toy"
    settings_model = EvalSettings
    default_enabled = False
    metrics = (
        MetricSpec("toy.score", Comparison.CONTINUOUS,
                   MetricDisplay("toy score", key="score", column="toy score", delta_label="score",
                                 pivot="Toy score by configuration")),
        MetricSpec("toy.crash_rate", Comparison.COUNT,
                   MetricDisplay("crash rate", key="crash", column="crashes", text=_crashes, delta_label="crash",
                                 details=Evidence.EVENTS),
                   higher_is_better=False, count_metric="toy.crashed", n_metric="toy.n", event_field="crashed"),
    )
    display = EvalDisplay(csv_fields=("toy.score", "toy.crash_rate", "toy.crashed", "toy.n"))

    def flat(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        return {"toy.score": raw["score"], "toy.crash_rate": raw["crashed"] / raw["n"], "toy.crashed": raw["crashed"],
                "toy.n": raw["n"]}


TOY = {"tp8-fixon": (10.0, 0), "tp8-fixoff": (9.0, 0), "dp8-fixon": (10.0, 0), "dp8-fixoff": (4.0, 3)}
"""Cell -> (score, crashed of 4 samples): the DP fix-off cell is the toy eval's bug."""


@pytest.fixture
def toy_eval() -> Iterator[Toy]:
    ev = registry.register(Toy())
    yield ev
    registry.unregister(ev.name)


@pytest.fixture
def toy_run(toy_eval: Toy, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The 2 x 2 hand-made matrix with the toy eval's metrics and samples in every cell, and a
    toy threshold that breaks in the bug's cell."""
    raw = config_dict()
    raw["thresholds"] = [*raw["thresholds"], {"metric": "toy.crash_rate", "max_rise_ab": 0.5}]
    run_path, config = write_run(tmp_path / "results", "toy-run", {cell: CellSpec() for cell in TOY}, raw)
    for cell, (score, crashed) in TOY.items():
        record = read_json(run_path / cell / "cell.json")
        record["metrics"]["toy"] = {"score": score, "crashed": crashed, "n": 4}
        write_json(run_path / cell / "cell.json", record)
        write_jsonl(run_path / cell / "toy.samples.jsonl",
                    [{"id": f"s-{i}", "crashed": i < crashed, "text": f"sample {i}"} for i in range(4)])
    return run_path, summary_of(run_path, config)


def test_a_registered_metric_gets_its_value_and_delta_columns_after_the_built_ins(toy_eval: Toy) -> None:
    headers = [c.header for c in columns(registry.builtins().metrics())]
    assert headers[:7] == ["cell", "status", "GSM8K strict", "GSM8K flexible (95% CI)", "collapse rate (k/n)",
                           "tokens/s", "engine TPOT"]
    assert headers[7:] == ["toy score", "crashes", "Δ flexible vs baseline", "Δ flexible vs twin",
                           "Δ collapse vs baseline", "Δ collapse vs twin", "Δ score vs baseline", "Δ score vs twin",
                           "Δ crash vs baseline", "Δ crash vs twin"]


def test_a_broken_threshold_is_marked_in_its_metric_s_column(toy_eval: Toy) -> None:
    specs = registry.builtins().metrics()
    cols = columns(specs)

    def flag_column(flag: dict) -> str:  # a flag always carries its action and words (verdict/summary.py Flag)
        return table.flag_column(Flag.model_validate({**flag, "action": "fail", "message": "broke"}), specs, cols)

    assert flag_column({"metric": "toy.crash_rate", "check": "max"}) == "crash"
    assert flag_column({"metric": "toy.crash_rate", "check": "max_rise_ab"}) == "crash_vs_ab"
    assert flag_column({"metric": "toy.score", "check": "max_drop_vs_baseline"}) == "score_vs_baseline"
    assert flag_column({"metric": "gsm8k.strict", "check": "max_drop_ab"}) == "cell"  # strict has no delta column
    assert flag_column({"metric": "nosuch.metric", "check": "min"}) == "cell"


def test_the_markdown_shows_the_toy_eval_in_the_matrix_pivot_legend_and_details(toy_run: tuple[Path, dict]) -> None:
    run_path, summary = toy_run
    md = render(summary, "markdown", run_path)
    assert md is not None
    found = tables(md)
    at = found.headers.index([c.header for c in columns(specs_of(summary))])
    matrix = dict(zip(found.headers[at], found.bodies[at][3]))  # dp8-fixoff
    assert matrix["toy score"] == "4.000" and matrix["crashes"] == "3 of 4"
    assert matrix["Δ crash vs twin"] == "**+75.0 (p=0.071)** ❌"  # Fisher, one-sided: 3/4 vs 0/4
    assert matrix["cell"] == "**dp8-fixoff** ❌"
    assert "#### Toy score by configuration" in md
    assert found.bodies[1] == [["tp8", "10.000", "9.000", "-1.000"],  # continuous: the difference, no test
                               ["dp8", "10.000", "4.000", "-6.000"]]
    assert "one-sided Fisher exact (collapse rise), one-sided Fisher exact (crash rise)." in legend(RunSummary.model_validate(summary))
    assert "#### Crash evidence" in md and "dp8-fixoff: 3 of 4 samples crashed" in md
    assert "`toy-run/dp8-fixoff/toy.samples.jsonl`" in md
    assert "**s-0**" in md and "**s-2**" in md and "**s-3**" not in md  # the crashed samples, from its samples file
    html = gfm().render(md)
    # no question flipped: the fold under the paste, the checks in it, and the crashes
    assert html.count("<details>") == html.count("</details>") == 3


def test_an_eval_names_its_kind_of_evidence_or_its_word_and_a_misspelt_word_fails_where_it_is_defined() -> None:
    assert MetricDisplay("crash rate", details="events").details is Evidence.EVENTS
    with pytest.raises(ValueError, match="'event' is not a valid Evidence"):
        MetricDisplay("crash rate", details="event")  # type: ignore[arg-type]


def test_a_kind_of_evidence_this_evalkit_does_not_know_is_shown_as_none(toy_run: tuple[Path, dict]) -> None:
    """A summary from a newer evalkit may record a kind this one lacks: the report renders, with no
    section for it, as for a metric that asks for none."""
    run_path, summary = toy_run
    for record in summary["metrics"]:
        if record["name"] == "toy.crash_rate":
            record["details"] = "from_the_future"
    md = render(summary, "markdown", run_path) or ""
    assert "dp8-fixoff" in md and "#### Crash evidence" not in md and "**s-0**" not in md


def test_the_csv_has_the_toy_fields_and_a_diff_and_p_value_per_reference(toy_run: tuple[Path, dict]) -> None:
    _, summary = toy_run
    frame = pd.read_csv(io.StringIO(render(summary, "csv") or ""))
    row = frame.set_index("cell").loc["dp8-fixoff"]
    assert (row["toy.score"], row["toy.crashed"], row["toy.n"]) == (4.0, 3, 4)
    assert row["vs_ab.toy.score.diff"] == pytest.approx(-6.0)
    assert row["vs_ab.toy.crash_rate.diff"] == pytest.approx(0.75)
    assert row["vs_baseline.toy.crash_rate.p_value"] == pytest.approx(1 / 14)


def test_compare_shows_the_toy_eval_beside_the_built_ins(toy_run: tuple[Path, dict]) -> None:
    run_path, summary = toy_run
    assert [c.header for c in compare_columns(specs_of(summary))] == [
        "cell", "flexible A", "flexible B", "Δ flexible B − A", "Δ strict B − A", "collapse A", "collapse B",
        "Δ collapse B − A", "Δ tokens/s B − A", "Δ TPOT B − A", "score A", "score B", "Δ score B − A", "crash A", "crash B", "Δ crash B − A",
        "paired n", "flipped →wrong / →right"]
    result = compare_runs(run_path, rerun(run_path, "again"))
    md = render_compare(result, "markdown") or ""
    assert dict(zip(tables(md).headers[0], tables(md).bodies[0][3]))["crash B"] == "3 of 4"
    assert "two-sided Fisher exact (collapse), two-sided Fisher exact (crash)." in md
    frame = pd.read_csv(io.StringIO(render_compare(result, "csv") or ""))
    assert list(frame["b.toy.n"]) == [4] * 4 and list(frame["delta.toy.score"]) == [0.0] * 4
