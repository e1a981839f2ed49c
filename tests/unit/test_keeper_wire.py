"""The head's line to its keeper: messages arrive whole and in order, each with the
descriptors it carries, however many (the kernel passes at most 253 at once; a job
has hundreds of worlds' listeners); the other side's end is seen."""

import os
import socket
import threading

import pytest

from mwrun.keeper import wire

pytestmark = pytest.mark.timeout(30)


def test_a_message_gets_exactly_its_descriptors_however_many():
    head, keeper = socket.socketpair()
    listeners = [socket.socket() for _ in range(wire.FDS_AT_ONCE + 60)]
    sender = threading.Thread(target=lambda: (
        wire.send(head, {"worlds": [s.fileno() for s in listeners]},
                  [s.fileno() for s in listeners]),
        wire.send(head, {"do": "mark_broken"}),
        head.close()))
    sender.start()
    reader, got = wire.Reader(keeper), []
    while not reader.ended:
        got += reader.read()
    sender.join()
    (first, fds), (second, none) = got
    assert second == {"do": "mark_broken"} and none == []
    assert len(fds) == len(listeners) == len(first["worlds"])
    # Each is a copy of the one sent in its place: the same socket, another descriptor.
    for fd, sent in zip(fds, listeners, strict=True):
        assert os.fstat(fd).st_ino == os.fstat(sent.fileno()).st_ino
        os.close(fd)
    for sock in listeners:
        sock.close()
    keeper.close()


def test_descriptors_no_message_took_are_closed_when_the_other_side_ends():
    head, keeper = socket.socketpair()
    read, write = os.pipe()
    socket.send_fds(head, [b"\n"], [read])  # as a message's first part; its line never came
    head.close()
    open_before = len(os.listdir("/proc/self/fd"))
    reader = wire.Reader(keeper)
    while not reader.ended:
        assert reader.read() == []
    assert not reader.fds and len(os.listdir("/proc/self/fd")) == open_before
    os.close(write)
    os.close(read)  # ours: the copy the reader got was closed, not this one
    keeper.close()


def test_the_keeper_obeys_a_new_head_only_with_a_newer_epoch(tmp_path):
    """keeper/door.py: a head's first message is its epoch; what it says after it is
    handed on; an older (or the same) epoch is told why and closed."""
    from mwrun.keeper.door import Door

    door = Door(str(tmp_path / "keeper-door.sock"))  # the launch's head: epoch 1
    try:
        answers = []
        for epoch in (1, 2, 2):
            head = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            head.connect(door.path)
            wire.send(head, {"adopt": epoch})
            wire.send(head, {"do": "open_next", "world": "w", "args": [3, [1, 1]]})
            taken = door.take()
            if taken is None:
                reader = wire.Reader(head)
                said = []
                while not reader.ended:
                    said += reader.read()
                answers.append(said[0][0] if said else None)
            else:
                sock, _reader, after = taken
                answers.append(("taken", door.epoch, [m for m, _ in after]))
                sock.close()
            head.close()
        refused = "a newer head (epoch {}) has the stores"
        assert answers[0]["refused"].startswith(refused.format(1))
        assert answers[1] == ("taken", 2, [{"do": "open_next", "world": "w",
                                            "args": [3, [1, 1]]}])
        assert answers[2]["refused"].startswith(refused.format(2))
    finally:
        door.close()
    assert not os.path.exists(door.path)
