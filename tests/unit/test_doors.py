"""A new head proves itself at every agent's door at once (head/hosts/doors.py): each
challenge is answered as it comes, so a door that is slow to ask (over ssh, a busy
host) never keeps a quick one waiting past the time its agent gives a head to answer
(CI: the local agent closed its door while the head waited on an ssh door)."""

import contextlib
import socket
import threading
import time

import pytest

from mwrun.errors import RunError
from mwrun.head.hosts import doors, remote
from mwrun.host import frames
from mwrun.host.frames import Kind
from mwrun.host.headship import hello_frame

SECRET = "s3cret"


def agent(sock: socket.socket, ask_after: float, answer_within: float, said: list) -> None:
    """An agent's door: a challenge after ``ask_after`` s; its hello if the proof comes
    within ``answer_within`` s, else the door closed."""
    with sock, contextlib.suppress(BrokenPipeError):  # (a head that gave up)
        time.sleep(ask_after)  # (the door's slowness is what is tested)
        sock.sendall(frames.encode({"kind": Kind.CHALLENGE, "nonce": "n"}))
        sock.settimeout(answer_within)
        try:
            answer = frames.Decoder().feed(sock.recv(4096))[0]
        except (TimeoutError, IndexError):
            said.append("closed unanswered")
            return
        ok = answer["proof"] == frames.adoption_proof(SECRET, "n", answer["epoch"])
        said.append("took it" if ok else "refused")
        sock.sendall(frames.encode(hello_frame("h", "/c.sock", adopted={})))
        sock.settimeout(None)
        sock.recv(1)  # until the head lets go


@pytest.fixture
def knocked():
    made: list = []

    def make(ask_after: float, answer_within: float, said: list) -> remote.SocketLink:
        head, door = socket.socketpair()
        thread = threading.Thread(target=agent, args=(door, ask_after, answer_within, said))
        thread.start()
        link = remote.SocketLink(f"h{len(made)}", head, "python3")
        made.append((link, thread))
        return link
    yield make
    for link, thread in made:
        link.abandon()
        thread.join(10)


def test_a_slow_door_never_keeps_a_quick_one_waiting(knocked):
    said: list = []
    links = {"slow": knocked(1.0, 5.0, said), "quick": knocked(0.0, 0.5, said)}
    doors.proven(links, SECRET, 2)  # slow first: one after the other, quick closes
    assert said == ["took it", "took it"]
    assert all(link.hello["adopted"] == {} for link in links.values())


def test_a_door_that_never_asks_is_named_when_the_wait_is_over(knocked, monkeypatch):
    monkeypatch.setattr(doors, "KNOCK_WAIT", 0.5)
    said: list = []
    links = {"quick": knocked(0.0, 5.0, said), "mute": knocked(3.0, 5.0, said)}
    with pytest.raises(RunError, match="host h1's agent did not answer at its door"):
        doors.proven(links, SECRET, 2)
