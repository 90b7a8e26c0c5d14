"""evalkit: one command that tells whether a change broke model accuracy in any serving configuration.

The public API, for scripts and notebooks (what `evalkit matrix` calls)::

    import evalkit
    outcome = evalkit.run_matrix(evalkit.MatrixRequest(model="demo", limit=50))
    outcome.exit_code, outcome.summary.cells, outcome.run_path

`import evalkit` stays cheap: the API's names are loaded on first use (api/matrix.py), so nothing
heavy (lm-eval, scipy, pandas) is imported until a run needs it.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["MatrixOutcome", "MatrixRequest", "__version__", "run_matrix", "run_one_cell"]

_API = frozenset({"MatrixOutcome", "MatrixRequest", "run_matrix", "run_one_cell"})
"""Names re-exported from evalkit.api.matrix on first access (PEP 562)."""


def __getattr__(name: str) -> Any:
    if name in _API:
        from evalkit.api import matrix as api

        return getattr(api, name)
    raise AttributeError(f"module 'evalkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
