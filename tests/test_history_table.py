"""`evalkit history`'s trend table at the widths people read it: 80 and 120 columns.

The table once printed 427 lines of two-character columns at 80 columns: rich folded every cell
to fit. Now it reads as `report` does: columns are left out, least telling first, and said in a
line under the table; a value (a run id, a number, a commit) is never split, and the cell, the run
and the headline metric are always there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.cells import cell_len

from evalkit.store import write_json
from tests.helpers.cli import evalkit_cli
from tests.helpers.runs import CellSpec, config_dict, summary_of, write_run

PARALLEL = {"tp8": {"settings": {"tensor_parallel": 8}}, "dp8": {"settings": {"tensor_parallel": 8, "dp_attention": True}},
            "ep8": {"settings": {"tensor_parallel": 8}}}
RUNS = [f"2026120{day}-020000-sim-deepseek-v4" for day in range(1, 4)]
"""Run ids as `evalkit matrix` names them: 31 characters, the widest value of the table."""


@pytest.fixture(scope="module")
def nightlies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three nights of a 3 x 2 matrix with their summaries (so each run has its checks), imported."""
    results = tmp_path_factory.mktemp("nightlies") / "results"
    config = config_dict(axes={"parallel": PARALLEL, "fix": config_dict()["axes"]["fix"]})
    for day, run_id in enumerate(RUNS, start=1):
        cells = {f"{p}-{f}": CellSpec(right=19 - (day if (p, f) == ("dp8", "fixoff") else 0), long_texts=["fine"] * 4,
                                      source_sha=f"{day:040x}", started_at=f"2026-12-0{day}T02:00:00+00:00")
                 for p in PARALLEL for f in ("fixon", "fixoff")}
        run_path, matrix = write_run(results, run_id, cells, config, started_at=f"2026-12-0{day}T02:00:00+00:00")
        write_json(run_path / "summary.json", summary_of(run_path, matrix))
    assert evalkit_cli("history", "--import", "all", "--results-dir", str(results)).returncode == 0
    return results


def table_at(results: Path, width: int) -> list[str]:
    shown = evalkit_cli("history", "--model", "demo", "--results-dir", str(results), env={"COLUMNS": str(width)})
    assert shown.returncode == 0, shown.output
    return shown.stdout.splitlines()


@pytest.mark.parametrize("width", [80, 120])
def test_the_trend_fits_the_terminal_and_never_splits_a_value(nightlies: Path, width: int) -> None:
    """Every line fits; each run id and each cell id is whole on one line; one line per run (the
    six cells x three nights are 18 rows, not hundreds of folded lines)."""
    lines = table_at(nightlies, width)
    assert max(cell_len(line) for line in lines) <= width
    for run_id in RUNS:
        assert sum(run_id in line for line in lines) == 6  # one row per cell, the id never broken
    for cell in ("tp8-fixon", "dp8-fixoff", "ep8-fixoff"):
        assert any(cell in line for line in lines)
    rows = [line for line in lines if any(run_id in line for run_id in RUNS)]
    assert len(rows) == 18 and len(lines) < 18 * 2 + 20
    header = next(line for line in lines if "cell" in line and "run" in line)
    assert "flexible" in header  # the headline metric is never left out


def test_at_80_columns_the_left_out_columns_are_named_and_120_keeps_more(nightlies: Path) -> None:
    narrow, wide = table_at(nightlies, 80), table_at(nightlies, 120)
    note = " ".join(line.strip() for line in narrow[narrow.index(next(ln for ln in narrow if ln.startswith("left out"))):])
    assert note.startswith("left out at 80 columns: run started (UTC), source")
    assert note.endswith("a wider terminal or --format csv shows them")
    narrow_header = next(line for line in narrow if "cell" in line and "run" in line)
    wide_header = next(line for line in wide if "cell" in line and "run" in line)
    hidden_wide = next((line for line in wide if line.startswith("left out")), "")
    for column in ("status", "n", "checks"):
        assert f" {column} " not in narrow_header and f" {column} " in wide_header
    assert "Δ flexible" in narrow_header and "Δ flexible" in wide_header
    assert len(hidden_wide) < len(note)  # fewer columns left out at 120
    dropped = [line for line in narrow if "dp8-fixoff" in line]
    assert dropped and "-5.0" in " ".join(narrow)  # the headline's change survives at 80: dp8-fixoff lost a question (of 20) a night


def test_a_wide_terminal_shows_every_column(nightlies: Path) -> None:
    lines = table_at(nightlies, 240)
    assert not any(line.startswith("left out") for line in lines)
    header = next(line for line in lines if "cell" in line and "run" in line)
    for column in ("run started (UTC)", "source", "status", "strict", "flexible", "Δ flexible", "collapse", "n", "checks"):
        assert column in header
