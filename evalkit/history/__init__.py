"""The history: every finished cell of every run in one self-migrating SQLite file (`db`), the
memory a nightly judges itself against. It sits above the runs it records and below the judging
and rendering that read it.
"""

from evalkit.history.db import (
    DB_NAME,
    History,
    Point,
    by_cell,
    cell_recorder,
    default_db_path,
    parse_since,
    record_finished_run,
    run_folders,
)

__all__ = [
    "DB_NAME",
    "History",
    "Point",
    "by_cell",
    "cell_recorder",
    "default_db_path",
    "parse_since",
    "record_finished_run",
    "run_folders",
]
