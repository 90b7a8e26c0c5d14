"""One matrix at a time on the same devices: an advisory lock that names its holder.

Two nightly jobs that both start 8-GPU engines on one box would each fail in confusing ways
(out of memory, port clashes, half the GPUs busy). `flock` is released by the kernel when the
holder dies, so a crashed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from types import TracebackType
from typing import IO

from evalkit.errors import LockHeld

DEFAULT_LOCK_FILE = Path("/tmp/evalkit-devices.lock")
"""The device lock every run takes unless told (`--lock-file`): one path, so two runs of any
command, from any directory, see each other."""

class DeviceLock:
    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._file: IO[str] | None = None

    def __enter__(self) -> DeviceLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            try:
                holder = json.loads(f.read() or "{}")
            except json.JSONDecodeError:
                holder = {}
            f.close()
            raise LockHeld(
                f"{self.path}: devices are in use by evalkit pid {holder.get('pid', '?')} "
                f"(run {holder.get('run_id', '?')}); wait for it or pass --no-lock"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "run_id": self.run_id}))
        f.flush()
        self._file = f
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._file is not None:
            self._file.truncate(0)
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None
