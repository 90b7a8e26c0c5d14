"""`evalkit calibrate`'s runs: the config's matrix run(s) it reads, and optionally one cell of the
config run N times (each its own engine start); then what their noise supports, each rule
checked on them (evalkit/verdict/calibrate.py does the judging; this module finds and drives the
runs, which is why it sits with the library's entry points)."""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.api.matrix import MatrixRequest, run_matrix
from evalkit.config import MatrixConfig, resolve_config
from evalkit.config.cells import expand
from evalkit.errors import CalibrationFailed, ConfigError
from evalkit.evals.base import Comparison, MetricSpec
from evalkit.store import read_json, write_json
from evalkit.store.files import check_results_dir, check_run_id, new_run_id, resolve_run
from evalkit.store.records import CellRecord
from evalkit.verdict.calibrate import (
    DEFAULT_ALPHA,
    MetricNoise,
    Suggestion,
    count_noise,
    paired_noise,
    snippet,
    suggest,
)
from evalkit.verdict.calibrate_cells import read_run
from evalkit.verdict.deltas import flat_metrics, marks

if TYPE_CHECKING:
    from evalkit.run.options import Progress


@dataclass(frozen=True)
class Calibration:
    """What calibrate measured and suggests: the matrix runs read, the repeats of a cell (if any),
    the repeats' noise per metric, and the rules as checked on all of them."""

    cell: str | None
    path: Path | None
    """The calibration folder: one run folder per repeat (``repeat-1`` ...) and calibrate.json (None: no repeats)."""
    runs: list[Path]
    repeats: list[Path]
    noises: list[tuple[MetricSpec, MetricNoise]]
    alphas: dict[str, float]
    suggestion: Suggestion
    yaml: str

    def to_dict(self) -> dict[str, Any]:
        """calibrate.json: what `evalkit plan --calibration` reads (per metric its flips between
        healthy runs and its measured level) and every suggested rule with what it was checked on."""
        return {"cell": self.cell, "path": str(self.path) if self.path else None, "runs": [str(r) for r in self.runs],
                "repeats": [str(r) for r in self.repeats],
                "metrics": [asdict(n) | {"mean": n.mean, "sd": n.sd, "alpha": self.alphas.get(s.name, DEFAULT_ALPHA)}
                            for s, n in self.noises],
                "rules": [{"rule": c.rule.fields(), "why": c.rule.why, "healthy": c.healthy, "caught": c.caught,
                           "widened": c.widened, "dropped": c.dropped} for c in self.suggestion.checked],
                "notes": self.suggestion.notes, "checked_on_matrix_runs": self.suggestion.active, "yaml": self.yaml}


def _alpha(config: MatrixConfig, metric: str, default: float | None) -> float:
    """`--alpha`, else the smallest alpha the config's thresholds use for the metric, else 0.01."""
    if default is not None:
        return default
    alphas = [t.alpha for t in config.thresholds if t.metric == metric and t.alpha is not None]
    return min(alphas) if alphas else DEFAULT_ALPHA


def matrix_runs(results_dir: Path, config_path: Path, refs: tuple[str, ...]) -> list[Path]:
    """The matrix runs to measure the cells' spread on: `refs` (ids or paths, each checked), else
    the newest complete run in `results_dir` of the same config file with more than one cell (none:
    an empty list, and the rules print commented out)."""
    if refs:
        return [resolve_run(results_dir, ref) for ref in refs]
    check_results_dir(results_dir)
    found = []
    for path in results_dir.glob("*/run.json") if results_dir.is_dir() else []:
        run = read_json(path)
        if (run.get("status") == "complete" and len(run.get("cells") or []) > 1
                and Path(run.get("config_path") or "").name == config_path.name):
            found.append((run.get("started_at") or "", path.parent))
    return [max(found)[1]] if found else []


def _repeat(request: MatrixRequest, config_path: Path, config: MatrixConfig, cell_id: str, repeats: int,
            name: str | None, progress: Progress | None) -> tuple[Path, list[Path], list[CellRecord]]:
    """Run `cell_id` `repeats` times (each its own engine start) in a calibration folder; repeats
    already finished there are kept (resume)."""
    if repeats < 2:
        raise ConfigError(f"--repeats {repeats}: calibrating needs at least 2 runs of the cell")
    cell = next((c for c in expand(config) if c.id == cell_id), None)
    if cell is None:
        raise ConfigError(f"--cell {cell_id}: not a cell of {config_path} (cells: {', '.join(c.id for c in expand(config))})")
    folder = request.results_dir / check_run_id(name or new_run_id(f"calibrate-{config_path.stem}-{cell_id}"))
    selection = ",".join(f"{axis}={value}" for axis, value in cell.axes.items())
    runs, loaded = [], []
    for i in range(1, repeats + 1):
        run_id = f"repeat-{i}"
        done = folder / run_id / "summary.json"
        if not (done.is_file() and read_json(done).get("status") == "complete"):
            if (folder / run_id).exists():
                shutil.rmtree(folder / run_id)  # an interrupted repeat is run again whole
            run_matrix(replace(request, config_path=config_path, model=None, only=(selection,) if selection else (),
                               run_id=run_id, resume=None, results_dir=folder, history=False), progress)
        record = CellRecord.load(folder / run_id / cell.id / "cell.json")
        if record.status != "ok":
            raise CalibrationFailed(f"{folder / run_id}: cell {cell.id} did not run ({record.message or record.status}); "
                                    "calibrate on a cell that runs")
        runs.append(folder / run_id)
        loaded.append(record)
    return folder, runs, loaded


def _noises(config: MatrixConfig, cell_id: str, runs: list[Path], loaded: list[CellRecord], alpha: float | None,
            alphas: dict[str, float]) -> list[tuple[MetricSpec, MetricNoise]]:
    """How the repeated cell moved between its runs, per share metric."""
    records = [r.dump() for r in loaded]  # each repeat's cell as cell.json holds it: what the evals read
    evals = config.evals.evalset
    flats = [flat_metrics(r, evals) for r in records]
    noises = []
    for spec in evals.metrics(config.evals, records):
        if any(spec.name not in f for f in flats):
            continue
        alphas[spec.name] = _alpha(config, spec.name, alpha)
        if spec.comparison is Comparison.PAIRED:
            ev = evals.eval_of(spec.name)
            per_run = [marks(run / cell_id, spec, evals) for run in runs]
            noises.append((spec, paired_noise(spec, per_run, [f[spec.name] for f in flats], alphas[spec.name],
                                              full_n=ev.size if ev else None)))
        elif spec.comparison is Comparison.COUNT:
            noises.append((spec, count_noise(spec, flats)))
    return noises


def run_calibration(request: MatrixRequest, cell_id: str | None, repeats: int, alpha: float | None = None,
                    name: str | None = None, progress: Progress | None = None,
                    runs: tuple[str, ...] = ()) -> Calibration:
    """Measure the config's matrix run(s) (`runs`, else its newest in the results folder) and, with
    `cell_id`, that cell `repeats` times; suggest the rules their noise supports, each checked on
    them. Neither a matrix run nor a cell: bad input (nothing to measure)."""
    config, config_path = resolve_config(request.model, request.config_path)
    matrix = matrix_runs(request.results_dir, config_path, runs)
    if cell_id is None and not matrix:
        raise ConfigError(f"--cell: no matrix run of {config_path.name} in {request.results_dir} to measure; run "
                          "`evalkit matrix` first, pass --run RUN, or give --cell to repeat")
    folder, repeat_runs, loaded = (_repeat(request, config_path, config, cell_id, repeats, name, progress)
                                   if cell_id else (None, [], []))
    alphas: dict[str, float] = {}
    noises = _noises(config, cell_id, repeat_runs, loaded, alpha, alphas) if cell_id else []
    measured = [read_run(path, f"run {path.name}", config) for path in matrix]
    repeated = [read_run(path, path.name, config) for path in repeat_runs]
    specs = list({s.name: s for run in (*measured, *repeated) for s in run.specs}.values())
    for spec in specs:
        alphas.setdefault(spec.name, _alpha(config, spec.name, alpha))
    suggestion = suggest(config, specs, measured, repeated, dict((s.name, n) for s, n in noises), alphas)
    header = [f"evalkit calibrate: {config_path.name}, model {config.model}"
              + (f"; {repeats} runs of {cell_id} in {folder}" if cell_id else "")]
    text = snippet(header, noises, suggestion, min(alphas.values(), default=DEFAULT_ALPHA))
    calibration = Calibration(cell_id, folder, matrix, repeat_runs, noises, alphas, suggestion, text)
    if folder is not None:
        write_json(folder / "calibrate.json", calibration.to_dict())
    return calibration
