"""evalkit as a library: the entry points a script, a notebook, a Slurm job or the CLI calls.

`run_matrix(MatrixRequest(...))` runs a config's matrix and writes its verdict and report, like
inspect_ai's `eval()`; `run_one_cell` is what each Slurm job runs; `run_calibration` runs one cell
N times for `evalkit calibrate`. This is the top of the layers: it drives everything below.
"""

from evalkit.api.calibrate import Calibration, run_calibration
from evalkit.api.matrix import MatrixOutcome, MatrixRequest, run_matrix, run_one_cell

__all__ = ["Calibration", "MatrixOutcome", "MatrixRequest", "run_calibration", "run_matrix", "run_one_cell"]
