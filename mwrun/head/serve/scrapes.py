"""The metrics endpoint (``metrics: {addr: HOST:PORT}`` in the topology, or ``mwrun
launch --metrics HOST:PORT``): Prometheus scrapes the head at ``/metrics``.

prometheus_client's own HTTP server answers, in its own thread, and makes the text.
What it shows is read in the loop's thread: a scrape writes a byte into a socket pair
the loop's selector watches and waits; the loop reads the moment's families
(observe/metrics.py ``Source``) once for every scrape waiting then, and hands them back.
So no record is read while the loop changes it, every figure is the status document's
of the same moment, and an idle run pays nothing between scrapes. A loop that does not
answer within ASK_WAIT fails the scrape (Prometheus then shows the target down), never
blocks the loop.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric

from mwrun.errors import RunError
from mwrun.plan import ports

ASK_WAIT = 10.0  # seconds a scrape waits for the loop


class MetricsError(RunError):
    """The endpoint cannot listen where it was asked to."""


def split_addr(addr: str) -> tuple[str, int]:
    """("HOST", PORT) of "HOST:PORT" or "[V6]:PORT" (checked by the topology's reader)."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def check(addr: str) -> None:
    """MetricsError, said plainly, where ``addr`` cannot be listened on now (before
    anything starts; the head listens for good once the run starts)."""
    found = ports.bind_error(*split_addr(addr))
    if found is not None:
        raise MetricsError(_why(addr, found))


def _why(addr: str, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"metrics: {addr} is taken by another program; choose another port"
    if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or \
            isinstance(exc, socket.gaierror):
        return (f"metrics: {addr} is no address of this machine (the head serves the"
                " metrics: give one of its addresses, or 0.0.0.0 for all)")
    return f"metrics: cannot listen on {addr}: {exc.strerror or exc}"


class Scrapes:
    """The endpoint: ``families()`` is read in the loop's thread, once per batch of
    scrapes; ``selector``: the loop's, which watches this side's socket."""

    def __init__(self, selector: selectors.BaseSelector, families: Callable[[], list[Metric]]):
        self.families = families
        self._selector = selector
        self._lock = threading.Lock()
        self._asks: list[tuple[threading.Event, dict[str, Any]]] = []
        self._loop_side, self._scrape_side = socket.socketpair()
        self._loop_side.setblocking(False)
        self._scrape_side.setblocking(False)
        self._server: Any = None  # prometheus_client's server, once listening
        selector.register(self._loop_side, selectors.EVENT_READ, (self._answer, None))

    def start(self, addr: str) -> None:
        """Listen on ``addr``; MetricsError, said plainly, where it cannot."""
        host, port = split_addr(addr)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        try:
            self._server, _ = start_http_server(port, host, registry)
        except OSError as exc:
            raise MetricsError(_why(addr, exc)) from None

    def collect(self) -> list[Metric]:
        """prometheus_client's collector: in the scrape's thread, asks the loop."""
        done, slot = threading.Event(), dict[str, Any]()
        with self._lock:
            self._asks.append((done, slot))
        with contextlib.suppress(BlockingIOError):  # a byte waiting already wakes it
            self._scrape_side.send(b"?")
        if not done.wait(ASK_WAIT):
            raise TimeoutError(f"the head did not answer within {ASK_WAIT:g}s")
        if "error" in slot:
            raise RuntimeError(slot["error"])
        return slot["families"]

    def _answer(self, _arg) -> None:
        """In the loop's thread: one reading for every scrape waiting."""
        with contextlib.suppress(BlockingIOError):
            while self._loop_side.recv(4096):
                pass
        with self._lock:
            asks, self._asks = self._asks, []
        if not asks:
            return
        answer: dict[str, Any]
        try:
            answer = {"families": self.families()}
        except Exception as exc:  # a bug must fail the scrape, never the job
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        for done, slot in asks:
            slot.update(answer)
            done.set()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._loop_side)
        self._loop_side.close()
        self._scrape_side.close()
