"""The judging step: stored cells in, verdicts out.

`deltas` (a run's cells -> deltas between cells, twins and baseline; summary.json), `checks` (each
threshold on each cell: PASS, FAIL or INCONCLUSIVE), `summary` (summary.json's typed models, and a comparison's),
`compare` (run B judged against run A), `plan` (what `evalkit plan` says each threshold can see),
`calibrate` (the gates a cell's measured noise supports). It reads the store and the statistics
(evalkit/stats/) and never the engine or the renderers, which read what it writes.
"""

from evalkit.verdict.compare import compare_runs
from evalkit.verdict.deltas import exit_code, flat_metrics, strict_exit_code, summarize_run
from evalkit.verdict.summary import SUMMARY_SCHEMA_VERSION, RunComparison, RunSummary

__all__ = [
    "SUMMARY_SCHEMA_VERSION",
    "RunComparison",
    "RunSummary",
    "compare_runs",
    "exit_code",
    "flat_metrics",
    "strict_exit_code",
    "summarize_run",
]
