"""run/lock.py: one matrix at a time on a box's devices; the lock names its holder and dies with it.

The holder in the crash test is a real process that is SIGKILLed: the kernel, not evalkit, must
release the lock, so no stale lock survives a crashed run. The tests with a holder process are in
the `e2e` tier (they ask for `evalkit_process`); the rest hold the lock in this process.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from evalkit.errors import EXIT_LOCKED, EvalkitError, LockHeld
from evalkit.run.lock import DeviceLock

HOLDER = """
import sys
from pathlib import Path
from evalkit.run.lock import DeviceLock
lock = DeviceLock(Path(sys.argv[1]), sys.argv[2])
lock.__enter__()
print("held", flush=True)
sys.stdin.read()  # hold until killed
"""


@contextmanager
def holder_process(path: Path, run_id: str) -> Iterator[subprocess.Popen[str]]:
    """Another evalkit process that holds the lock until it is killed."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), run_id], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "held\n", "the holder exited before taking the lock"
        yield process
    finally:
        process.kill()
        process.wait(timeout=10)


def test_a_second_holder_gets_lock_held_naming_the_first_run(tmp_path: Path) -> None:
    path = tmp_path / "devices.lock"
    with DeviceLock(path, "nightly-1"):
        with pytest.raises(LockHeld) as caught, DeviceLock(path, "nightly-2"):
            pytest.fail("a second holder got the lock")
    assert str(caught.value) == (f"{path}: devices are in use by evalkit pid {os.getpid()} (run nightly-1); "
                                 "wait for it or pass --no-lock")
    assert isinstance(caught.value, EvalkitError) and caught.value.cli_exit_code == EXIT_LOCKED


def test_the_lock_file_names_the_holder_while_held_and_nobody_after(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "devices.lock"  # the folder is made when missing
    with DeviceLock(path, "r1"):
        assert json.loads(path.read_text()) == {"pid": os.getpid(), "run_id": "r1"}
    assert path.read_text() == ""


def test_leaving_the_block_releases_the_lock_even_on_an_error(tmp_path: Path) -> None:
    path = tmp_path / "devices.lock"
    with DeviceLock(path, "r1"):
        pass
    with DeviceLock(path, "r2"):
        assert json.loads(path.read_text())["run_id"] == "r2"
    with pytest.raises(RuntimeError), DeviceLock(path, "r3"):
        raise RuntimeError("a cell crashed the runner")
    with DeviceLock(path, "r4"):
        assert json.loads(path.read_text())["run_id"] == "r4"


def test_a_refused_holder_leaves_the_holders_record_alone(tmp_path: Path) -> None:
    path = tmp_path / "devices.lock"
    with DeviceLock(path, "r1"):
        for _ in range(3):
            with pytest.raises(LockHeld):
                DeviceLock(path, "r2").__enter__()
        assert json.loads(path.read_text()) == {"pid": os.getpid(), "run_id": "r1"}


@pytest.mark.usefixtures("evalkit_process")  # another evalkit process holds the lock: the `e2e` tier
def test_another_process_holding_the_lock_is_named(tmp_path: Path) -> None:
    path = tmp_path / "devices.lock"
    with holder_process(path, "other-run") as holder:
        with pytest.raises(LockHeld, match=rf"in use by evalkit pid {holder.pid} \(run other-run\)"):
            DeviceLock(path, "mine").__enter__()


@pytest.mark.usefixtures("evalkit_process")  # another evalkit process holds the lock: the `e2e` tier
def test_the_lock_is_released_when_its_holder_process_dies(tmp_path: Path) -> None:
    path = tmp_path / "devices.lock"
    with holder_process(path, "crashed-run") as holder:
        with pytest.raises(LockHeld, match=r"run crashed-run"):
            DeviceLock(path, "mine").__enter__()
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=10) == -signal.SIGKILL
    # The dead holder's record is still in the file (it never reached __exit__); the lock is not.
    assert json.loads(path.read_text())["run_id"] == "crashed-run"
    with DeviceLock(path, "mine"):
        assert json.loads(path.read_text()) == {"pid": os.getpid(), "run_id": "mine"}


def test_an_unreadable_holder_record_still_refuses(tmp_path: Path) -> None:
    path = tmp_path / "devices.lock"
    path.write_text("not json at all")
    with path.open("a+") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(LockHeld, match=r"in use by evalkit pid \? \(run \?\)"):
            DeviceLock(path, "mine").__enter__()
