"""The results store: run folders written atomically (files.py) and the SQLite history (history.py)."""

from evalkit.store.files import (
    DEFAULT_CACHE_DIR,
    DEFAULT_RESULTS_DIR,
    REGRESSIONS_FILE,
    RunStore,
    atomic_write_text,
    check_results_dir,
    check_run_id,
    file_hash,
    jsonl_writer,
    new_run_id,
    once_per_file_state,
    read_json,
    read_jsonl,
    read_regressions,
    resolve_run,
    write_json,
    write_jsonl,
)
from evalkit.store.outputs import check_writable, removed_on_failure

__all__ = ["DEFAULT_CACHE_DIR", "DEFAULT_RESULTS_DIR", "REGRESSIONS_FILE", "RunStore", "atomic_write_text", "check_results_dir", "check_run_id", "check_writable", "file_hash", "jsonl_writer", "new_run_id", "once_per_file_state", "read_json", "read_jsonl", "read_regressions",
           "removed_on_failure", "resolve_run", "write_json", "write_jsonl"]
