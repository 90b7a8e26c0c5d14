"""`evalkit calibrate`'s runs: one cell of a config N times, each its own engine start, then what
its noise supports (evalkit/verdict/calibrate.py does the judging; this module only drives the runs
through `run_matrix`, which is why it sits with the library's entry points)."""

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
from evalkit.store.files import check_run_id, new_run_id
from evalkit.store.records import CellRecord
from evalkit.verdict.calibrate import (
    DEFAULT_ALPHA,
    NIGHTLY_CELLS,
    MetricNoise,
    count_noise,
    paired_noise,
    suggested,
    yaml_snippet,
)
from evalkit.verdict.deltas import flat_metrics, marks

if TYPE_CHECKING:
    from evalkit.run.options import Progress


@dataclass(frozen=True)
class Calibration:
    """N runs of one cell and what they support."""

    cell: str
    path: Path
    """The calibration folder: one run folder per repeat (``repeat-1`` ...) and calibrate.json."""
    runs: list[Path]
    noises: list[tuple[MetricSpec, MetricNoise]]
    alphas: dict[str, float]
    yaml: str
    cells: int = NIGHTLY_CELLS
    """Cells of the config's matrix: the nightly the suggested `min` is gated on."""

    def to_dict(self) -> dict[str, Any]:
        return {"cell": self.cell, "path": str(self.path), "runs": [str(r) for r in self.runs],
                "metrics": [asdict(n) | {"mean": n.mean, "sd": n.sd, "alpha": self.alphas[s.name],
                                         "suggested": suggested(n, s, self.alphas[s.name], self.cells)}
                            for s, n in self.noises],
                "yaml": self.yaml}


def _alpha(config: MatrixConfig, metric: str, default: float | None) -> float:
    """`--alpha`, else the smallest alpha the config's thresholds use for the metric, else 0.01."""
    if default is not None:
        return default
    alphas = [t.alpha for t in config.thresholds if t.metric == metric and t.alpha is not None]
    return min(alphas) if alphas else DEFAULT_ALPHA


def run_calibration(request: MatrixRequest, cell_id: str, repeats: int, alpha: float | None = None,
                    name: str | None = None, progress: Progress | None = None) -> Calibration:
    """Run `cell_id` of the request's config `repeats` times (each its own engine start), then
    measure its noise; repeats already finished in the calibration folder are kept (resume)."""

    if repeats < 2:
        raise ConfigError(f"--repeats {repeats}: calibrating needs at least 2 runs of the cell")
    config, config_path = resolve_config(request.model, request.config_path)
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
    records = [r.dump() for r in loaded]  # each repeat's cell as cell.json holds it: what the evals read
    evals = config.evals.evalset
    flats = [flat_metrics(r, evals) for r in records]
    noises, alphas = [], {}
    for spec in evals.metrics(config.evals, records):
        if any(spec.name not in f for f in flats):
            continue
        alphas[spec.name] = _alpha(config, spec.name, alpha)
        if spec.comparison is Comparison.PAIRED:
            ev = evals.eval_of(spec.name)
            per_run = [marks(run / cell.id, spec, evals) for run in runs]
            noises.append((spec, paired_noise(spec, per_run, [f[spec.name] for f in flats], alphas[spec.name],
                                              full_n=ev.size if ev else None)))
        elif spec.comparison is Comparison.COUNT:
            noises.append((spec, count_noise(spec, flats)))
    n = {noise.n for _, noise in noises if noise.flip_rate is not None and noise.n is not None}
    header = [f"evalkit calibrate: {repeats} runs of {cell.id} ({config_path.name}, model {config.model})",
              f"{folder}" + (f"; {', '.join(map(str, sorted(n)))} questions per run" if n else "")]
    cells = len(expand(config))
    snippet = yaml_snippet(header, noises, min(alphas.values(), default=DEFAULT_ALPHA), cells)
    calibration = Calibration(cell.id, folder, runs, noises, alphas, snippet, cells)
    write_json(folder / "calibrate.json", calibration.to_dict())
    return calibration
