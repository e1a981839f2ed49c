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
