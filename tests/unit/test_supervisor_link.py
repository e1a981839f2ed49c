"""The library's link to its supervisor: never silently unsupervised."""

import io
import json
import socket
import time

from mwrun.worlds import supervisor_link
from mwrun.worlds.supervisor_link import SupervisorLink


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
    tail = supervisor_link.TRAFFIC_TAIL
    # calls moved just now: beats at every check (1 s) for the rate window
    assert supervisor_link.next_beat(100.0, 100.0, 5.0, 1.0) == 1.0
    assert supervisor_link.next_beat(100.0 + tail - 1.0, 100.0, 5.0, 1.0) == 1.0
    # idle past the window: its own interval
    assert supervisor_link.next_beat(100.0 + tail, 100.0, 5.0, 1.0) == 5.0
