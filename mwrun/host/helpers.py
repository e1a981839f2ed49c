"""Processes of an agent's own, not the job's: the worlds' stores' keeper (the head
asks for it, host/asks.py) and, while the head is away, a breaker per world of a member
that exited (host/breaks.py). Each is forked warm from a zygote that imports what it
needs (torch: no second import), else started cold; its output goes to a log, and it
is reaped with this host's orphans (host/warm.py reap_orphans)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
from collections.abc import Callable

from mwrun.host.hands import Hands

Started = Callable[[int, bool], None]  # (pid, forked warm)
Failed = Callable[[str], None]  # why it could not start


def start(hands: Hands, argv: list[str], how: tuple, modules: tuple[str, ...], env: dict,
          log_path: str, started: Started, failed: Failed) -> None:
    """``argv`` (run warm as ``how``: ("module", NAME, ARGS)) from the zygote of
    ``modules`` for ``env`` when there is one, else the ordinary way; ``started`` or
    ``failed`` is told, now or once the zygote answers."""
    try:
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        failed(str(exc))
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        def forked(pid: int | None) -> None:
            if pid is None:  # the zygote could not: the ordinary way, then
                _cold(argv, env, log_path, started, failed)
            else:
                started(pid, True)

        if not modules or not hands.fork(argv, modules, how, env, (null, log), forked):
            _cold(argv, env, log_path, started, failed)
    finally:
        os.close(null)
        os.close(log)


class Running:
    """Helpers started and not yet seen to end (by pidfd: never a process that took a
    pid again): SIGKILLed when their agent ends, so that none outlives the job."""

    def __init__(self):
        self.fds: list[int] = []

    def add(self, pid: int, warm: bool = False) -> None:
        ended, _, _ = select.select(self.fds, [], [], 0) if self.fds else ([], [], [])
        for fd in ended:  # readable: that one has ended
            os.close(fd)
            self.fds.remove(fd)
        with contextlib.suppress(OSError):  # gone already
            self.fds.append(os.pidfd_open(pid))

    def end(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
        self.fds = []


def _cold(argv: list[str], env: dict, log_path: str, started: Started, failed: Failed) -> None:
    try:
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, env=env, cwd="/",
                                     start_new_session=True)
    except OSError as exc:
        failed(str(exc))
        return
    started(popen.pid, False)
