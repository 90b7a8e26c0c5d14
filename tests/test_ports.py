"""Ports for engines: free now, and never handed out twice by one process (cells start side by side)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from evalkit.engine import ports
from evalkit.engine.ports import PortBook, free_port

HOST = "127.0.0.1"


def test_a_free_port_can_be_bound() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, free_port(HOST)))


def test_a_port_in_use_is_not_handed_out() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind((HOST, 0))
        busy.listen()
        taken = busy.getsockname()[1]
        book = PortBook()
        assert taken not in {free_port(HOST) for _ in range(200)}
        assert taken not in {book.take(HOST) for _ in range(200)}


def test_distinct_ports_across_threads() -> None:
    book = PortBook()
    got: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        for _ in range(25):
            port = book.take(HOST)
            with lock:
                got.append(port)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 200 and len(set(got)) == 200


def test_a_port_the_os_offers_again_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OS may offer a port again once nobody listens on it; the engine given it may not bind it yet."""
    offers: Iterator[int] = iter([5001, 5001, 5002, 5001, 5002, 5003])
    monkeypatch.setattr(ports, "free_port", lambda host: next(offers))
    book = PortBook()
    assert [book.take(HOST) for _ in range(3)] == [5001, 5002, 5003]



def test_a_host_of_another_machine_gets_a_port_free_on_this_one() -> None:
    elsewhere = "192.0.2.1"  # TEST-NET-1: never an address of this machine (a part on another node)
    book = PortBook()
    first = book.take_block(elsewhere, 3)
    for port in (first, first + 1, first + 2):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("0.0.0.0", port))
