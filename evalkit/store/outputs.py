"""Files a command writes outside a run folder (a report's `-o`, a `--plot`, a history database):
checked before any work, and gone again when the command fails.

A command that fails on bad input must leave nothing behind: `history --import` of a missing
file used to leave an empty history.db (and its folder) that the next command then read as "no
series recorded yet"; a `--plot` under a file raised a traceback after the report was printed.

* `check_writable(path, option)`: one line naming the option when `path` cannot be written (a
  folder where the file goes, a file where a folder above it must be), before anything runs.
* `removed_on_failure(path)`: a block after which `path` (and its SQLite side files, and every
  folder above it) is removed again if the block raised and the block made it; what existed
  before is never touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evalkit.errors import ConfigError

SIDE_FILES = ("-journal", "-wal", "-shm")
"""What SQLite writes beside a database file while it is open (removed with it)."""


def check_writable(path: Path, option: str) -> None:
    """A file `option` asks a command to write: ConfigError (one line, exit 2) when it cannot be,
    before the command does any work."""
    if path.is_dir():
        raise ConfigError(f"{option} {path}: a folder, not a file")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{option} {path}: {parent} is a file, not a folder")
            return


@contextmanager
def removed_on_failure(path: Path) -> Iterator[None]:
    """Run the block; if it raises (an error, Ctrl-C), remove the file `path`, its SQLite side files
    and the folders above it, where the block created them, then re-raise. A file or folder that
    existed before the block is kept whatever happens: only what this command made is undone."""
    made = [p for p in (*reversed(path.parents), path) if not p.exists()]  # outermost first
    try:
        yield
    except BaseException:
        if path in made:
            for suffix in ("", *SIDE_FILES):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
        for folder in reversed(made[:-1]):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
