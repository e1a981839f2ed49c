"""The zygote forks the next child while those before it set up, and answers in the order
asked: the supervisor pairs each answer with the oldest fork it asked (warmstarts.py)."""

import collections
import json
import os
import socket

import psutil

from mwrun.host import child, zygote
from mwrun.host.zygote import Forking
from tests.helpers import settle


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


def test_the_requests_waiting_together_are_taken_up_to_a_batch_and_a_close_ends_it():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        for i in range(zygote.BATCH + 2):
            read, write = os.pipe()
            zygote.send(theirs, {"n": i}, (write,))
            os.close(write)
            os.close(read)
        first = zygote.waiting(ours)
        assert [message["n"] for message, _ in first] == list(range(zygote.BATCH))
        assert all(len(fds) == 1 for _, fds in first)
        second = zygote.waiting(ours)
        assert [message["n"] for message, _ in second] == [zygote.BATCH, zygote.BATCH + 1]
        read, write = os.pipe()
        zygote.send(theirs, {"n": "last"}, (write,))
        theirs.close()  # the supervisor gone: what it asked last is dropped, fds closed
        os.close(write)
        assert zygote.waiting(ours) is None
        os.set_blocking(read, False)  # an end of file now, not a wait: no copy is left
        assert os.read(read, 1) == b""
        os.close(read)
        for _, fds in first + second:
            for fd in fds:
                os.close(fd)
    finally:
        ours.close()
        theirs.close()


def test_one_middle_forks_a_child_per_request_each_with_only_its_own_descriptors():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    outputs = [os.pipe() for _ in range(3)]
    batch = [({"n": i}, [os.dup(write)]) for i, (_, write) in enumerate(outputs)]
    for _, write in outputs:
        os.close(write)
    in_child, forked = zygote.fork(ours, batch, os.getpid())
    if in_child:  # a child: says what it holds on its own output, and goes
        try:
            [output] = forked["fds"]
            others = {fd for _, fds in batch for fd in fds if fd != output}
            os.write(output, json.dumps({"n": forked["n"], "others": sorted(
                others & child.open_fds())}).encode())
            os.write(forked["report"], json.dumps({"pid": os.getpid()}).encode())
        finally:
            os._exit(0)
    try:
        while any(f.answer is None for f in forked):
            for f in forked:
                if f.answer is None:
                    f.take()
        pids = [f.answer["pid"] for f in forked]
        assert len(set(pids)) == 3 and len({f.middle for f in forked}) == 1  # one middle
        told = [json.loads(_read_all(read)) for read, _ in outputs]
        assert told == [{"n": i, "others": []} for i in range(3)]
        assert settle(lambda: [p for p in pids if _alive(p)]) == []  # each ended
    finally:
        ours.close()
        theirs.close()
        for read, _ in outputs:
            os.close(read)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    return data
