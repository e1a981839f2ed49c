"""The control socket's clients on a real selector and real sockets: a client dropped
by one callback can still be reported by the same select(), and must then be let be."""

import selectors
import socket

import pytest

from mwrun.head.serve.control import Clients

pytestmark = pytest.mark.timeout(30)


def served(selector):
    """Run the callbacks of one select(), as the loop's turn does."""
    for key, _ in selector.select(timeout=5):
        callback, arg = key.data
        callback(arg)


@pytest.fixture
def setup():
    selector = selectors.DefaultSelector()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("")  # Linux autobinds a unique abstract name
    listener.listen()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(listener.getsockname())
    clients = Clients(selector, lambda line, connection: {"ok": True})
    clients.accept(listener)
    yield selector, clients, client
    client.close()
    listener.close()
    selector.close()


def connection_of(selector):
    (key,) = selector.get_map().values()
    return key.data[1]


def test_a_client_dropped_earlier_in_the_same_turn_is_let_be(setup):
    selector, clients, client = setup
    connection = connection_of(selector)
    client.close()  # the member was killed: its end is readable (EOF) and unwritable
    events = selector.select(timeout=5)
    assert events, "the closed client is reported readable"
    clients.push(connection, {"order": "stacks"})  # an earlier callback drops it
    assert connection.closed and not selector.get_map()
    for key, _ in events:  # the same turn's stale event comes after
        callback, arg = key.data
        callback(arg)
    assert connection.closed and not selector.get_map()


def test_a_request_is_answered_and_a_client_gone_is_dropped(setup):
    selector, _, client = setup
    client.sendall(b'{"verb": "status"}\n')
    served(selector)
    assert client.recv(100) == b'{"ok": true}\n'
    client.close()
    served(selector)
    assert not selector.get_map()
