"""`evalkit matrix --bisect-on-regression`: a nightly that names the breaking commit by itself.

After a run, each cell that breaks a failing threshold is compared with the same cell in the
previous finished run of the same config (the newest run folder before this one whose run.json
names the same config file). When that earlier cell passed every failing threshold and both runs
recorded the engine source SHA the cell ran, `evalkit bisect` runs for that cell between the two
SHAs, with the earlier run's cell folder as the good end (`--good-run`), so the good end is not
run again. Each finding, bisected or not and why, is one entry of the run's `regressions.json`,
which summary.json, every report and the step summary carry (verdict.deltas.summarize reads it). A
bisect never changes the run's verdict or exit code: it only says where the change came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.bisect.driver import BisectRequest, run_bisect
from evalkit.config import MatrixConfig, load_config
from evalkit.config.cells import expand
from evalkit.errors import EvalkitError
from evalkit.run.options import Progress
from evalkit.store import REGRESSIONS_FILE, read_json, write_json
from evalkit.verdict.summary import CellRow, RunSummary


def _fails(row: CellRow) -> bool:
    return any(flag.action == "fail" for flag in row.flags)


def previous_run(results_dir: Path, run_path: Path) -> Path | None:
    """The newest finished run folder started before `run_path`'s run, of the same config file."""
    this = read_json(run_path / "run.json")
    best: tuple[str, Path] | None = None
    for folder in results_dir.iterdir() if results_dir.is_dir() else ():
        if folder == run_path or not (folder / "summary.json").is_file() or not (folder / "run.json").is_file():
            continue
        info = read_json(folder / "run.json")
        started = info.get("started_at") or ""
        if (info.get("config_path") == this.get("config_path") and info.get("status") == "complete"
                and started < (this.get("started_at") or "") and (best is None or started > best[0])):
            best = (started, folder)
    return best[1] if best else None


def _source_axis(config: MatrixConfig, cell_id: str) -> str | None:
    """The axis whose value gives this cell its source (None: `engine.source`)."""
    cell = next((c for c in expand(config) if c.id == cell_id), None)
    if cell is None:
        return None
    return next((axis for axis, value in cell.axes.items() if config.axes[axis][value].source is not None), None)


def findings(run_path: Path, summary: RunSummary, results_dir: Path) -> list[dict[str, Any]]:
    """Each failing cell of this run that passed in the previous run: what can be bisected, or why not."""
    failing = [row for row in summary.cells if row.status == "ok" and _fails(row)]
    if not failing:
        return []
    before = previous_run(results_dir, run_path)
    earlier = {row.id: row for row in RunSummary.load(before / "summary.json").cells} if before else {}
    out = []
    for row in failing:
        found: dict[str, Any] = {"cell": row.id, "previous_run": before.name if before else None}
        old = earlier.get(row.id)
        good = old.source.sha if old is not None and old.source is not None else None
        bad = row.source.sha if row.source is not None else None
        found |= {"good": good, "bad": bad}
        if before is None:
            found["message"] = "no earlier finished run of this config to compare with"
        elif old is None or old.status != "ok":
            found["message"] = f"the cell did not run in {before.name}"
        elif _fails(old):
            found["message"] = f"the cell already failed in {before.name}: not a new regression"
        elif not good or not bad:
            found["message"] = "the engine source SHA is not recorded in both runs (the cell runs an installed engine)"
        elif good == bad:
            found["message"] = (f"both runs ran engine commit {bad[:12]}: the change is not in the engine's "
                                f"source (model, eval set-up, machine?)")
        else:
            found["bisect"] = True
        out.append(found)
    return out


def bisect_regressions(run_path: Path, summary: RunSummary, results_dir: Path, cache_dir: Path,
                       lock_file: Path, lock: bool, progress: Progress) -> list[dict[str, Any]]:
    """Find and bisect this run's new regressions; write regressions.json (also when none could be
    bisected) and return its entries. A bisect that cannot start is that entry's message."""
    info = read_json(run_path / "run.json")
    entries = findings(run_path, summary, results_dir)
    config_path = Path(info["config_path"])
    for entry in entries:
        if not entry.pop("bisect", False):
            continue
        try:
            config = load_config(config_path)
            request = BisectRequest(
                config_path=config_path, cell=entry["cell"], good=entry["good"], bad=entry["bad"],
                axis=_source_axis(config, entry["cell"]), good_run=str(results_dir / entry["previous_run"]),
                limit=info.get("limit"), bisect_id=f"{info['run_id']}-{entry['cell']}", results_dir=results_dir,
                cache_dir=cache_dir, lock_file=lock_file, lock=lock,
                command_line=("evalkit", "matrix", "--bisect-on-regression"),
            )
            outcome = run_bisect(request, progress)
        except EvalkitError as e:
            entry["message"] = f"bisect could not start: {e}"
            continue
        record = outcome.record
        entry |= {"bisect_id": record.bisect_id, "status": record.status, "first_bad": record.first_bad,
                  "message": record.message}
        if record.first_bad:
            commit = next((c for c in record.commits if c.sha == record.first_bad), None)
            entry["subject"] = commit.subject if commit else None
    write_json(run_path / REGRESSIONS_FILE, entries)
    return entries

