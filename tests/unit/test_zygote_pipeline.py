"""The zygote forks the next child while those before it set up, and answers in the order
asked: the supervisor pairs each answer with the oldest fork it asked (warmstarts.py)."""

import collections
import json
import os
import socket

from mwrun.host import zygote
from mwrun.host.zygote import Forking


def test_answers_go_in_the_order_asked_whatever_order_the_children_report_in():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pipes = [os.pipe() for _ in range(3)]
    flight = collections.deque(Forking(read) for read, _ in pipes)
    flight.append(Forking(answer={"cold": "1 Python thread running"}))  # known at once
    try:
        for i in (2, 1):  # the later children report first
            os.write(pipes[i][1], json.dumps({"pid": 100 + i}).encode())
            os.close(pipes[i][1])
            while flight[i].answer is None:
                flight[i].take()
        zygote._answer(ours, flight)
        theirs.setblocking(False)
        assert list(_sent(theirs)) == []  # the first is still setting up: all wait for it
        os.write(pipes[0][1], b'{"pid": 100}')
        os.close(pipes[0][1])
        while flight[0].answer is None:
            flight[0].take()
        zygote._answer(ours, flight)
        assert list(_sent(theirs)) == [{"pid": 100}, {"pid": 101}, {"pid": 102},
                                       {"cold": "1 Python thread running"}]
        assert not flight
    finally:
        ours.close()
        theirs.close()


def test_a_child_that_ends_before_it_is_set_up_is_answered_as_such():
    read, write = os.pipe()
    forking = Forking(read)
    os.close(write)  # ended without a word
    forking.take()
    assert forking.answer == {"error": "the forked child ended before it was set up"}


def _sent(sock):
    while True:
        try:
            yield json.loads(sock.recv(1 << 16))
        except BlockingIOError:
            return
