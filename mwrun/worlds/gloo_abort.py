"""Abort for gloo process groups, which stock torch does not offer.

``ProcessGroupGloo.abort()`` and ``shutdown()`` exist in torch 2.13 but, measured, leave
a recv or all_reduce blocked in ``Work.wait()`` waiting for the timeout (backends.py
prefers them on a torch where they work), and such a thread cannot be woken from
outside. Waiting for gloo's completion
on a Python-level condition instead would cost a thread hand-off per call (measured
here: +40-200 % on a 1 KiB all_reduce), so mwrun keeps the caller in the plain
``wait()`` and makes the wait *fail* when the world breaks: it shuts down the TCP
connections of that one process group. Gloo then fails every pending operation on
them at once ("Connection closed by peer"), on this side and on the peer's.

Each ``ProcessGroupGloo`` runs its own event loop, an epoll instance in which gloo
registers its listener and one socket per peer. We find that epoll among the file
descriptors the construction created, keep a duplicate of it (so its number can never
be reused under us), and at abort read its registrations from
``/proc/self/fdinfo``: each names a descriptor and the inode it had when registered.
A socket is shut down only if a fresh duplicate of that descriptor still has that
inode, so a number gloo closed and the program reused is never touched. The listener
is left alone: gloo treats a failed ``accept`` as fatal. Each gloo device has its
own loop, and mwrun gives every process group a device of its own. Off Linux, or if the epoll
cannot be told apart, there is no abort and a blocked call ends at the world's
timeout instead; backends.py then logs one warning per process saying so.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading

_construct_lock = threading.Lock()  # one device at a time, so the fd diff is ours
_EPOLL = "anon_inode:[eventpoll]"


def fd_targets() -> dict[int, str]:
    """What each descriptor of this process is now ("socket:[INODE]", a path...). A
    change is seen by its target, not its number: the listing's own descriptor is
    closed by the time a new one is made, which may then take its number."""
    targets: dict[int, str] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return targets
    for name in names:
        # OSError: closed meanwhile, or the listing's own descriptor.
        with contextlib.suppress(OSError):
            targets[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return targets


def registrations(epoll_fd: int) -> list[tuple[int, int]]:
    """(fd, inode) of every descriptor registered in an epoll instance."""
    regs = []
    try:
        with open(f"/proc/self/fdinfo/{epoll_fd}") as info:
            for line in info:
                if line.startswith("tfd:"):
                    fields = line.split()
                    ino = next(f for f in fields if f.startswith("ino:"))
                    regs.append((int(fields[1]), int(ino[4:], 16)))
    except (OSError, StopIteration, ValueError):
        pass
    return regs


def _is_inet_listener(fd: int) -> bool:
    try:
        dup = os.dup(fd)
    except OSError:
        return False
    try:
        if not stat.S_ISSOCK(os.fstat(dup).st_mode):
            return False
        sock = socket.socket(fileno=dup)
        dup = -1  # the socket object owns it now
        with sock:
            return (sock.family in (socket.AF_INET, socket.AF_INET6)
                    and bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)))
    except OSError:
        return False
    finally:
        if dup >= 0:
            os.close(dup)


class GlooSockets:
    """The connections of one gloo process group, which ``abort()`` shuts down."""

    def __init__(self, epoll_dup: int):
        self._epoll = epoll_dup
        self._lock = threading.Lock()

    def abort(self) -> int:
        """Shut down every connected socket of the group; returns how many."""
        count = 0
        with self._lock:
            if self._epoll < 0:
                return 0
            for fd, inode in registrations(self._epoll):
                count += _shutdown_if_same(fd, inode)
        return count

    def close(self) -> None:
        with self._lock:
            if self._epoll >= 0:
                os.close(self._epoll)
                self._epoll = -1


def _shutdown_if_same(fd: int, inode: int) -> int:
    try:
        dup = os.dup(fd)
    except OSError:
        return 0
    try:
        info = os.fstat(dup)
        if not stat.S_ISSOCK(info.st_mode) or info.st_ino != inode:
            return 0
        sock = socket.socket(fileno=dup)
        dup = -1  # the socket object owns it now
        try:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                return 0
            sock.shutdown(socket.SHUT_RDWR)
            return 1
        except OSError:
            return 0
        finally:
            sock.close()
    finally:
        if dup >= 0:
            os.close(dup)


def device(create):
    """Run ``create()`` (which makes a gloo Device); returns (device, GlooSockets | None).

    A gloo device owns its event loop and listener, and its process groups' peer
    sockets register in that loop, so the epoll is found here, where creating it takes
    microseconds; the slow rendezvous that builds the group runs outside the lock.
    """
    with _construct_lock:
        before = fd_targets()
        created = create()
        after = fd_targets()
    new = {fd for fd, target in after.items() if before.get(fd) != target}
    candidates = []
    for fd in new:
        if after[fd] != _EPOLL:
            continue
        regs = registrations(fd)
        # gloo's loop: its wake pipe and its listener, both new.
        if regs and all(r in new for r, _ in regs) and any(_is_inet_listener(r) for r, _ in regs):
            candidates.append(fd)
    if len(candidates) != 1:
        return created, None
    try:
        return created, GlooSockets(os.dup(candidates[0]))
    except OSError:
        return created, None
