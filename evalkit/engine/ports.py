"""Free ports for engines: one the OS says is unused now, and never the same one twice per process.

Cells start side by side in threads, and an engine binds its port only some time after evalkit
picks it; in that window the OS would happily offer the same free port to the next cell. The
`PortBook` remembers what this process has already handed out so that two cells never race for one
port. (Another process can still take a port first: run/cell.py retries on `PortInUse`.)

A host that is not this machine's (a part on another node of a Slurm allocation:
engine/placement.py) cannot be asked from here: its port is one free on this machine, which
the part on the other node then binds, or loses like any race (`PortInUse`).
"""

from __future__ import annotations

import errno
import socket
import threading


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the engine may still lose a race for it: see PortInUse)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        _bind(s, host, 0)
        return int(s.getsockname()[1])


def _bind(s: socket.socket, host: str, port: int) -> None:
    """Bind `s` to `host`, or to every address of this machine when `host` is another's (module docstring)."""
    try:
        s.bind((host, port))
    except OSError as e:
        if e.errno != errno.EADDRNOTAVAIL:
            raise
        s.bind(("0.0.0.0", port))


class PortBook:
    """Free ports handed out by this process, never twice (cells start side by side)."""

    def __init__(self) -> None:
        self._given: set[int] = set()
        self._lock = threading.Lock()

    def take(self, host: str) -> int:
        """A port free on `host` now that this book has not handed out before."""
        with self._lock:
            while True:
                port = free_port(host)
                if port not in self._given:
                    self._given.add(port)
                    return port

    def take_block(self, host: str, span: int = 1) -> int:
        """The first of `span` consecutive ports, each free on `host` now and none handed out
        before (an engine that derives ports from one it is given: SGLang's dist-init address)."""
        while True:
            first = self.take(host)
            rest = range(first + 1, first + span)
            if first + span - 1 <= 65535 and all(self._claim(host, port) for port in rest):
                return first

    def _claim(self, host: str, port: int) -> bool:
        """Hand out `port` if it is free on `host` now and was never handed out."""
        with self._lock:
            if port in self._given or not _bindable(host, port):
                return False
            self._given.add(port)
            return True


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            _bind(s, host, port)
        except OSError:
            return False
    return True
