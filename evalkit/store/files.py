"""The results store: `results/<run-id>/` with one folder per cell, every file written whole.

Layout::

    results/<run-id>/run.json            config snapshot, versions, host, status, start/end
    results/<run-id>/summary.json        the machine-readable verdict (docs/results.md)
    results/<run-id>/table.md            the GitHub-markdown table
    results/<run-id>/<cell>/cell.json    status, timings, launch (redacted), metrics
    results/<run-id>/<cell>/engine.log   the engine's stdout and stderr
    results/<run-id>/<cell>/*.samples.jsonl  per-sample records of each eval

Every file goes through a temp file and `os.replace`, so a kill at any moment leaves each file
either absent or complete; readers skip the temp files (`.*.tmp`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, ParamSpec, TypeVar

from evalkit.errors import ConfigError

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_RESULTS_DIR = Path("results")
"""Where run folders go unless told (`--results-dir`, MatrixRequest, BisectRequest): the one default."""
DEFAULT_CACHE_DIR = Path(".evalkit-cache")
"""Where engine source worktrees are checked out and built unless told (`--cache-dir`; engine/sources.py).
Kept here, with the results default, so the CLI reads both without importing the engine package."""
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A whole run id (fullmatch: `$` would accept a trailing newline)."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so that no reader ever sees a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # only left when the write failed


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    """A JSON file evalkit wrote; one that does not parse (edited by hand, cut short by a full disk)
    is a ConfigError naming the file and where, not a traceback."""
    with path.open(encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e.msg}, line {e.lineno} column {e.colno})") from e


@contextmanager
def jsonl_writer(path: Path) -> Iterator[IO[str]]:
    """A JSONL file that appears under its name only once it is complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # only left when the block or the write failed


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with jsonl_writer(path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def check_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(run_id) or ".." in run_id:
        raise ConfigError(f"run id {run_id!r}: use letters, digits, '-', '_' and '.' only (no '/' or '..')")
    return run_id


def new_run_id(model: str) -> str:
    safe = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.-]+", "-", model)).strip("-.") or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}"


class RunStore:
    """One run's folder."""

    def __init__(self, results_dir: Path, run_id: str) -> None:
        self.results_dir = results_dir
        self.run_id = check_run_id(run_id)
        self.path = results_dir / run_id

    def create(self) -> None:
        """Make the run folder; refuses to reuse one (that is what `--resume` is for)."""
        try:
            self.results_dir.mkdir(parents=True, exist_ok=True)
            probe = self.results_dir / f".write-probe.{os.getpid()}.tmp"
            probe.write_text("")
            probe.unlink()
        except FileExistsError as e:
            raise ConfigError(f"{self.results_dir}: results folder is a file, not a folder (--results-dir)") from e
        except NotADirectoryError as e:
            raise ConfigError(f"{self.results_dir}: results folder is under a file, not a folder (--results-dir)") from e
        except OSError as e:
            raise ConfigError(f"{self.results_dir}: results folder is not writable ({e.strerror})") from e
        try:
            self.path.mkdir()
        except FileExistsError as e:
            raise ConfigError(f"{self.path}: run folder exists already (use --resume {self.run_id})") from e

    def cell_dir(self, cell_id: str) -> Path:
        return self.path / cell_id

    def write_run(self, data: dict[str, Any]) -> None:
        write_json(self.path / "run.json", data)

    def read_run(self) -> dict[str, Any]:
        run: dict[str, Any] = read_json(self.path / "run.json")
        return run

    def write_cell(self, cell_id: str, data: dict[str, Any]) -> None:
        write_json(self.cell_dir(cell_id) / "cell.json", data)

    def read_cell(self, cell_id: str) -> dict[str, Any] | None:
        path = self.cell_dir(cell_id) / "cell.json"
        return read_json(path) if path.is_file() else None


def resolve_run(results_dir: Path, ref: str) -> Path:
    """`latest`, a run id, or a path -> the run folder (must hold run.json). Each way it can fail
    is one line naming the real cause: the results folder missing or a file, the ref no folder, a
    file, or a folder without run.json."""
    if ref == "latest":
        check_results_dir(results_dir)
        runs = [p for p in results_dir.glob("*/run.json")] if results_dir.is_dir() else []
        if not runs:
            raise ConfigError(f"{results_dir}: no runs yet" + ("" if results_dir.exists() else " (no such folder)"))
        return max(runs, key=lambda p: (p.stat().st_mtime, p.parent.name)).parent
    as_path = Path(ref)
    if as_path.is_absolute() or len(as_path.parts) > 1 or "/" in ref:  # a path (./run too): only that folder
        candidates = [as_path]
    else:  # an id: the results folder first, so a same-named folder in the cwd never shadows it
        candidates = [results_dir / check_run_id(ref), as_path]
    for candidate in candidates:
        if (candidate / "run.json").is_file():
            return candidate
    if len(candidates) > 1:
        check_results_dir(results_dir)
    found = next((c for c in candidates if c.exists()), None)
    if found is None:
        raise ConfigError(f"{ref}: no such run (no folder {candidates[0]})")
    if not found.is_dir():
        raise ConfigError(f"{ref}: a file, not a run folder" if found == as_path else f"{ref}: {found} is a file, not a run folder")
    raise ConfigError(f"{ref}: not a run (no run.json in {found})")


def check_results_dir(results_dir: Path) -> None:
    """A --results-dir that is a file is the cause of what fails next, said as such (not "no runs
    yet", not a run missing from it)."""
    if results_dir.exists() and not results_dir.is_dir():
        raise ConfigError(f"{results_dir}: results folder is a file, not a folder (--results-dir)")


REGRESSIONS_FILE = "regressions.json"
"""A run's regressions bisected by `matrix --bisect-on-regression` (evalkit/bisect/on_regression.py)."""


def read_regressions(run_path: Path) -> list[dict[str, Any]] | None:
    """The run's regressions.json entries, or None when the run did not look for regressions."""
    path = run_path / REGRESSIONS_FILE
    return list(read_json(path)) if path.is_file() else None


FileState = tuple[int, int] | None
"""A file's (mtime in ns, size), None while it is absent: a file written whole (`atomic_write_text`)
gets a new state with every write, so what was read from one state holds until the next."""


def file_state(path: Path) -> FileState:
    """What `once_per_file_state` keys on: one stat, no read."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size


def once_per_file_state(maxsize: int) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Cache `fn(*args)` by its arguments and the state of every `Path` among them: the one way
    evalkit reads a file once per state (a summary compares each cell with the baseline and its
    twin, so one samples file is asked for again and again; data files are hashed per cell).
    `maxsize` results are kept (least recently used go first): a parse of tens of MB wants few.
    An absent file has a state too (None), so `fn` decides what absence means; what it raises is
    never cached. The arguments must be hashable, as for `functools.lru_cache`."""
    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        call: Callable[..., T] = fn

        @functools.lru_cache(maxsize=maxsize)
        def at(states: tuple[FileState, ...], args: tuple[Any, ...], kwargs: tuple[tuple[str, Any], ...]) -> T:
            return call(*args, **dict(kwargs))

        @functools.wraps(fn)
        def cached(*args: P.args, **kwargs: P.kwargs) -> T:
            named = tuple(sorted(kwargs.items()))
            states = tuple(file_state(a) for a in (*args, *(v for _, v in named)) if isinstance(a, Path))
            return at(states, args, named)

        return cached

    return decorate


@once_per_file_state(maxsize=32)
def file_hash(*paths: Path) -> str:
    """SHA-256 (16 hex) of the files' bytes, once per state of the files (data files are 4 MB)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
