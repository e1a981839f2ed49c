"""Unix sockets that only their owner can reach: the head's control socket, and an
agent's socket for the processes on its host."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path

from mwrun.errors import RunError

# Every process of a host connects once, all at about the same moment. A backlog of 64
# left the 65th of 128 unsupervised while the head was busy forking the others.
BACKLOG = 4096


def private_folder(path: str | os.PathLike) -> Path:
    """Make ``path`` (mode 0700), or check that it is ours alone; RunError if not.

    The control socket's folder decides who can move the socket aside and answer in
    the supervisor's place: one another user made (or can write to, or that is a
    link) is refused rather than used.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
        os.chmod(path, 0o700)  # whatever the umask left
    info = os.lstat(path)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and mode == 0o700:
        return path
    what = "a link" if stat.S_ISLNK(info.st_mode) else \
        f"owned by uid {info.st_uid} with mode {mode:04o}"
    raise RunError(f"{path} is {what}; mwrun keeps control sockets only in a folder that is"
                   f" yours alone (uid {os.getuid()}, mode 0700): remove it, or set"
                   " MWRUN_HOME to a shorter path")


def somaxconn() -> int:
    """The kernel's cap on any listen backlog (net.core.somaxconn)."""
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return socket.SOMAXCONN


def listen(path: str, backlog: int = BACKLOG) -> socket.socket:
    """A listening Unix socket at ``path``, in a folder that is ours alone, born
    owner-only (no window of 0755), non-blocking. ``backlog``: connections that may
    wait while the loop is busy (every process of a big job connects at once while the
    head forks the rest); the kernel caps it at ``somaxconn()``."""
    private_folder(os.path.dirname(path))  # RunError if someone else can write there
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    sock.listen(min(backlog, somaxconn()))
    sock.setblocking(False)
    return sock
