"""The forming guard's connection: it can cut only the one socket that making it added
to the store's port; where making it added two (another thread connected meanwhile, or
the client opened two), it is not cuttable, and says how many it found."""

import socket
import threading

import pytest

from mwrun.worlds.formguard import Connection


@pytest.fixture
def listener():
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


def _connections(port: int, count: int, kept: list):
    def make():
        for _ in range(count):
            kept.append(socket.create_connection(("127.0.0.1", port)))
        return object()
    return make


@pytest.mark.parametrize("count,cuttable", [(1, True), (2, False), (0, False)])
def test_only_the_one_new_socket_to_the_store_is_cut(listener, count, cuttable):
    port = listener.getsockname()[1]
    kept: list = []
    connection = Connection(_connections(port, count, kept), port, threading.RLock())
    try:
        assert connection.found == count
        assert connection.cuttable is cuttable
        if cuttable:
            peer, _ = listener.accept()
            with peer:
                connection.cut()
                assert peer.recv(1) == b""  # shut down: the store sees it end
    finally:
        connection.forget()
        for sock in kept:
            sock.close()
