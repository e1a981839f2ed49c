"""What an agent tells a new head of its processes (host/recall.py), the door a new head
proves itself at (host/door.py, real sockets), and an agent's queue to the head that a
new link takes over whole frames of (frames.Outbox)."""

import json
import selectors
import socket
import threading

import pytest

from mwrun.host import frames
from mwrun.host.door import HANDSHAKE, Door, door_path
from mwrun.host.frames import Kind
from mwrun.host.recall import Recall
from mwrun.launchspec import LaunchSpec


def spec(name, incarnation=2, restarts=1, worlds=None):
    worlds = worlds or {"w": {"addr": "127.0.0.1", "port": 1, "size": 2, "generation": 3}}
    return LaunchSpec(name, ("x",), "/", {"MWRUN_INCARNATION": str(incarnation),
                                          "MWRUN_RESTART_COUNT": str(restarts),
                                          "MWRUN_WORLDS": json.dumps(worlds)})


def said(name, pid, verb, **more):
    return {"verb": verb, "process": name, "pid": pid, **more}


def test_a_start_is_reported_with_its_numbers_and_its_librarys_last_words():
    recall = Recall()
    recall.started(spec("a"))
    hello = said("a", 7, "hello", interval=1.0)
    recall.heard(hello)  # before its pid came (a warm start): kept all the same
    recall.spawned("a", 7, True, 123.0)
    assert recall.report() == {"a": {"pid": 7, "incarnation": 2, "restarts": 1, "warm": True,
                                     "generations": {"w": 3}, "t": 123.0}}
    recall.heard(said("a", 7, "world", world="w", generation=3, event="ready"))
    recall.heard(said("a", 7, "world", world="w", generation=3, event="broken"))
    recall.heard(said("a", 7, "world", world="w", generation=4, event="ready"))
    recall.heard(said("a", 6, "world", world="w", generation=9, event="ready"))  # stale
    recall.heard(said("a", 7, "heartbeat"))  # nothing a new head wants again
    assert recall.replay() == [hello, said("a", 7, "world", world="w", generation=4,
                                           event="ready")]
    assert recall.report()["a"]["generations"] == {"w": 4}


def test_a_world_added_later_is_replayed_as_joined_not_as_its_scale_phase():
    """A world the head added says ``ready``, then ``added`` (the scale's phase); a
    drain's world says ``released``. The new head must hear where the member stands."""
    recall = Recall()
    recall.started(spec("a"))
    recall.spawned("a", 7, True, 123.0)
    ready = said("a", 7, "world", world="pair-2", generation=0, event="ready")
    for word in (ready, said("a", 7, "world", world="pair-2", generation=0, event="added"),
                 said("a", 7, "world", world="pair-2", generation=0, event="released")):
        recall.heard(word)
    assert recall.replay() == [ready]


def test_an_exit_is_reported_until_the_head_has_it():
    """Its exit waits in the frames to the head: a new head that takes the link then
    must know that start first (else it would start it again, and take the exit for
    the new start's)."""
    recall = Recall()
    for name in ("a", "b"):
        recall.started(spec(name))
        recall.spawned(name, {"a": 7, "b": 8}[name], False, 1.0)
    recall.ended("b")
    assert set(recall.report()) == {"a", "b"}
    assert [m["process"] for m in recall.replay()] == []  # (none said anything)
    recall.told()  # every frame out: the head has it
    assert set(recall.report()) == {"a"}
    recall.ended("a")
    recall.started(spec("a", incarnation=3))  # its next start, before the head had it
    recall.spawned("a", 9, True, 2.0)
    recall.told()
    assert recall.report()["a"]["pid"] == 9  # the new start stays


def test_a_spec_without_mwrun_numbers_is_a_first_start_in_no_world():
    recall = Recall()
    recall.started(LaunchSpec("plain", ("x",), "/", {"MWRUN_WORLDS": "not json"}))
    recall.spawned("plain", 9, False, 1.0)
    assert recall.report()["plain"] == {"pid": 9, "incarnation": 0, "restarts": 0,
                                        "warm": False, "generations": {}, "t": 1.0}


def test_a_new_link_takes_whole_frames_only():
    box = frames.Outbox()
    for i in range(3):
        box.put({"kind": "x", "i": i})
    taken = bytearray()

    def write(data):
        if len(taken) >= 20:
            raise BlockingIOError
        taken.extend(data[:7])
        return 7
    assert not box.flush(write)  # the first frame half written, then the link closed
    first = len(frames.encode({"kind": "x", "i": 0}))
    assert box.cut() == first - len(taken) + (len(taken) // first) * first
    box.put_first([{"kind": "hello"}])
    out = bytearray()
    assert box.flush(lambda data: out.extend(data) or len(data))
    assert frames.Decoder().feed(bytes(out)) == [{"kind": "hello"}, {"kind": "x", "i": 1},
                                                 {"kind": "x", "i": 2}]
    assert box.cut() == 0  # nothing half written: nothing to drop


@pytest.fixture
def door(tmp_path):
    path = door_path(str(tmp_path / "control-1.sock"))
    selector = selectors.DefaultSelector()
    taken = []
    door = Door(path, "s3cret", selector, lambda sock, epoch: taken.append((sock, epoch)))
    door.listen()
    yield door, selector, taken
    for sock, _ in taken:
        sock.close()
    door.close()
    selector.close()


def attempt(door, selector, taken, secret, epoch):
    """A head knocking with ``secret`` for ``epoch``: the agent's refusal, or None when
    it took the head (its end of the new link is closed here: the head reads that)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(door.path)
    answers = []

    def head():
        decoder = frames.Decoder()
        challenge = decoder.feed(sock.recv(4096))[0]
        sock.sendall(frames.encode({"kind": Kind.ADOPT, "epoch": epoch, "proof":
                                    frames.adoption_proof(secret, challenge["nonce"], epoch)}))
        data = sock.recv(4096)
        answers.append(decoder.feed(data)[0] if data else None)
    thread = threading.Thread(target=head)
    thread.start()
    before = len(taken)
    while thread.is_alive():  # the agent's turns: the challenge, then answer and verdict
        turn(selector)
        if len(taken) > before:
            taken[-1][0].close()
    thread.join(10)
    sock.close()
    return answers[0]


def turn(selector, wait=0.05):
    for key, _ in selector.select(wait):
        callback, arg = key.data
        callback(arg)


def knock(door, selector) -> tuple[socket.socket, str]:
    """A head at the door: its socket, and the challenge's nonce (the agent's turn)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(door.path)
    turn(selector, 5)
    return sock, frames.Decoder().feed(sock.recv(4096))[0]["nonce"]


def test_a_knock_is_never_waited_for_and_one_left_unanswered_is_closed(tmp_path):
    """The agent's loop goes on while a head has yet to answer (a turn returns at once);
    two heads knock, the later answers first and is obeyed; the silent one is closed
    once HANDSHAKE has passed."""
    now = [100.0]
    selector, taken = selectors.DefaultSelector(), []
    door = Door(door_path(str(tmp_path / "control-1.sock")), "s3cret", selector,
                lambda sock, epoch: taken.append((sock, epoch)), clock=lambda: now[0])
    door.listen()
    silent, _ = knock(door, selector)
    late, nonce = knock(door, selector)
    try:
        turn(selector, 0)  # nothing to read: nothing waited for
        assert len(door.knocks) == 2 and not taken
        odd, _ = knock(door, selector)  # a proof compare_digest cannot take: dropped
        odd.sendall(frames.encode({"kind": Kind.ADOPT, "epoch": 2, "proof": "é"}))
        turn(selector, 5)
        assert odd.recv(4096) == b"" and len(door.knocks) == 2
        odd.close()
        late.sendall(frames.encode({"kind": Kind.ADOPT, "epoch": 2,
                                    "proof": frames.adoption_proof("s3cret", nonce, 2)}))
        turn(selector, 5)
        assert [epoch for _, epoch in taken] == [2] and len(door.knocks) == 1
        door.tick(now[0] + HANDSHAKE - 0.1)
        assert len(door.knocks) == 1
        door.tick(now[0] + HANDSHAKE)
        assert not door.knocks and silent.recv(4096) == b""  # closed on it
    finally:
        for sock in [silent, late] + [sock for sock, _ in taken]:
            sock.close()
        door.close()
        selector.close()


def test_a_head_that_proves_the_secret_with_a_newer_epoch_is_obeyed(door):
    door, selector, taken = door
    wrong = attempt(door, selector, taken, "wrong", 2)
    assert wrong["kind"] == Kind.REFUSED and "secret was not proven" in wrong["why"]
    assert attempt(door, selector, taken, "s3cret", 2) is None
    assert [epoch for _, epoch in taken] == [2] and door.epoch == 2
    for epoch in (2, 1):  # the head it obeys now, or an older one: stale
        stale = attempt(door, selector, taken, "s3cret", epoch)
        assert stale["kind"] == Kind.REFUSED and "a newer head (epoch 2)" in stale["why"]
    assert attempt(door, selector, taken, "s3cret", 3) is None
    assert [epoch for _, epoch in taken] == [2, 3]


def test_a_start_not_made_yet_is_reported_with_no_pid():
    """Asked, its fork under way: a new head must know it is coming (else it starts a
    second copy); its pid follows."""
    recall = Recall()
    recall.started(spec("a"))
    assert recall.report() == {"a": {"pid": None, "incarnation": 2, "restarts": 1,
                                     "warm": False, "generations": {"w": 3}, "t": None}}
