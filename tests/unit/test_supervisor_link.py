"""The library's link to its supervisor: never silently unsupervised."""

import io
import json
import socket
import threading
import time

import pytest

from mwrun.worlds import beats, orders, supervisor_link
from mwrun.worlds.supervisor_link import SupervisorLink
from tests.fakehead import FakeHead

pytestmark = pytest.mark.timeout(60)


def _lines(conn: socket.socket, count: int, timeout: float = 20.0) -> list[dict]:
    conn.settimeout(timeout)
    data = b""
    while data.count(b"\n") < count:
        chunk = conn.recv(65536)
        assert chunk, f"the link closed after {data!r}"
        data += chunk
    return [json.loads(line) for line in data.split(b"\n")[:count]]


def test_a_supervisor_that_answers_late_gets_hello_then_the_held_world_events(
        tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor_link, "SAY_AFTER", 0.2)
    path = str(tmp_path / "control.sock")
    said = io.StringIO()
    link = SupervisorLink(path, "worker-0", 5.0, stderr=said).start()
    try:
        assert not link.connected  # nobody listens yet
        link.world_event("world1", 0, "ready")
        link.world_event("world1", 0, "broken", "a peer left")
        link.send({"verb": "heartbeat", "process": "worker-0"})  # dropped: it is stale
        deadline = time.monotonic() + 20
        while "cannot reach its supervisor" not in said.getvalue():
            assert time.monotonic() < deadline, "it never said it is unsupervised"
            time.sleep(0.05)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(path)
            server.listen(1)
            server.settimeout(20)
            conn, _ = server.accept()
            with conn:
                hello, ready, broken = _lines(conn, 3)
        assert hello["verb"] == "hello" and hello["process"] == "worker-0"
        assert (ready["event"], broken["event"], broken["reason"]) == \
            ("ready", "broken", "a peer left")
        assert said.getvalue().count("cannot reach its supervisor") == 1  # once
    finally:
        link.close()


def test_a_closed_link_stops_trying(tmp_path):
    link = SupervisorLink(str(tmp_path / "none.sock"), "p", 5.0, stderr=io.StringIO()).start()
    link.close()
    assert not link._thread.is_alive()


def test_each_beat_says_when_the_next_is_due_at_the_latest():
    tail = beats.TRAFFIC_TAIL
    # calls moved just now: beats at every check (1 s) for the rate window
    assert beats.next_beat(100.0, 100.0, 5.0, 1.0) == 1.0
    assert beats.next_beat(100.0 + tail - 1.0, 100.0, 5.0, 1.0) == 1.0
    # idle past the window: its own interval
    assert beats.next_beat(100.0 + tail, 100.0, 5.0, 1.0) == 5.0


def test_the_link_reads_the_head_s_lines_while_it_beats(tmp_path):
    """A head may write at any time; the link reads as it beats, never leaving more
    than a little unread (the head drops a client with 1 MiB of its lines unread), and
    hands what it knows to the job, in order, ignoring what it does not."""
    head = FakeHead(str(tmp_path / "control.sock"))
    heard, both = [], threading.Event()

    def follow(order):
        heard.append(order)
        if len(heard) == 2:
            both.set()

    link = SupervisorLink(head.path, "frontend", 0.05, on_order=follow).start()
    try:
        head.expect_verb("hello", process="frontend")
        head.expect_verb("heartbeat")
        head.send("frontend", b"not json\n" + b'{"verb": "explode"}\n')
        # 3 MiB of lines this library does not know: sendall returns only once the
        # link has read all but what the socket buffers hold
        filler = json.dumps({"verb": "news", "text": "x" * 1000}).encode() + b"\n"
        head.send("frontend", filler * (3 * 1024))
        head.send("frontend", {"verb": "add", "world": "pair-0", "spec": {
            "rank": 0, "size": 2, "addr": "127.0.0.1", "port": 29600}})
        head.send("frontend", {"verb": "drain", "world": "pair-0", "generation": 0})
        assert both.wait(20), heard
        assert [type(o).__name__ for o in heard] == ["Add", "Drain"]
        assert heard[0].spec.rank == 0 and heard[1].world == "pair-0"
        head.expect_verb("heartbeat")  # and it beats on
    finally:
        link.close()
        head.close()


def test_a_request_gets_the_reply_with_its_id(tmp_path):
    head = FakeHead(str(tmp_path / "control.sock"))
    link = SupervisorLink(head.path, "frontend", 5.0).start()
    answers = []
    try:
        head.expect_verb("hello")
        asking = threading.Thread(target=lambda: answers.append(
            link.request({"verb": "scale", "target": "worker", "count": "+1"}, 20)))
        asking.start()
        scale = head.expect_verb("scale", target="worker", count="+1")
        head.send("frontend", {"verb": "reply", "id": "someone-else", "ok": False,
                               "error": "not yours"})
        head.send("frontend", {"verb": "reply", "id": scale["id"], "ok": True, "desired": 3})
        asking.join(20)
        assert answers == [orders.Reply(scale["id"], True, None, {"desired": 3})]
        assert link.request({"verb": "scale"}, 0.05) is None  # no answer in time
    finally:
        link.close()
        head.close()


def test_after_the_head_dropped_it_the_link_says_hello_again_and_reads_on(tmp_path):
    head = FakeHead(str(tmp_path / "control.sock"))
    heard = threading.Event()
    link = SupervisorLink(head.path, "frontend", 5.0,
                          on_order=lambda order: heard.set()).start()
    try:
        head.expect_verb("hello")
        head.drop("frontend")
        head.expect_verb("hello")  # a new connection
        head.send("frontend", {"verb": "drain", "world": "w"})
        assert heard.wait(20)
    finally:
        link.close()
        head.close()
    assert not link._thread.is_alive()
