"""The worlds' stores as the head sees them: kept by a process of their own (the
keeper, ``mwrun.keeper``), written to over one socket, in order.

The head imports no torch. On a machine whose zygote imports torch the keeper is forked
from it (``start``: it costs the bring-up no second import, a second of CPU while a
hundred processes start on two cores); else it is started as ``python -m mwrun.keeper``
at once. Either way the worlds and their bound listeners are its first message, so a
member that connects early waits in its listener's backlog, as before.

The loop never waits on the keeper: a writer thread sends what the loop writes, in
order (the first message waits for a keeper still being forked), and a reader thread
takes what the keeper says (every store built, a build that failed, a plain group's
ranks) and wakes the loop. The one question the loop asks, and waits for (at most
``ASK_WAIT``), is which ranks of a plain torch.distributed group met in a store, once
every store exists. A keeper that ends before the head closes it ends the run: a job
without its stores cannot go on (``ready`` raises, naming its log).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable

from mwrun.errors import RunError
from mwrun.keeper import wire
from mwrun.plan import ports, stored
from mwrun.plan.placement import Plan, WorldPlan

ASK_WAIT = 2.0  # seconds for the keeper to say what a store shows (then: nothing yet)
# At the end, for the keeper to close its stores: a build still importing torch cannot
# be cut short (keeper/pending.py CLOSE_WAIT), then it is killed.
CLOSE_WAIT = 65.0
ARGV = ("-m", "mwrun.keeper")
HOW = ("module", "mwrun.keeper", ())  # how a zygote runs it


class KeeperProcess:
    """The keeper as a process: forked from a zygote or started cold, with its end of
    the head's socket as stdin and its log as stdout; killed at the end if it lingers."""

    def __init__(self, theirs: socket.socket, log_path,
                 zygote: tuple[tuple[str, ...], dict[str, str]] | None, python: str):
        self.theirs, self.log_path, self.zygote, self.python = theirs, log_path, zygote, python
        self.pid: int | None = None
        self._pidfd: int | None = None
        self._popen: subprocess.Popen | None = None  # started cold: ours to wait for
        if zygote is None:
            self._start_cold()

    def start(self, fork: Callable[..., bool]) -> None:
        """Fork it from the zygote (``Hands.fork``), unless it started cold."""
        if self.pid is not None or self.zygote is None:
            return
        modules, env = self.zygote
        with open(self.log_path, "ab") as log:
            if fork([self.python, *ARGV], modules, HOW, env,
                    (self.theirs.fileno(), log.fileno()), self._forked):
                return
        self._start_cold()

    def _forked(self, pid: int | None) -> None:
        if pid is None:  # the zygote could not: the ordinary way, then
            self._start_cold()
            return
        self._started(pid)

    def _start_cold(self) -> None:
        with open(self.log_path, "ab") as log:
            self._popen = subprocess.Popen([self.python, *ARGV], stdin=self.theirs.fileno(),
                                           stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True, cwd="/")
        self._started(self._popen.pid)

    def _started(self, pid: int) -> None:
        # Its end is the keeper's alone now: the head sees it go as its socket's end.
        self.theirs.close()
        self.pid = pid
        with contextlib.suppress(OSError):  # (a subreaper's child: not reaped yet)
            self._pidfd = os.pidfd_open(pid)

    def end(self) -> None:
        """Killed if it is still there (after its close was asked for, and waited for)."""
        if self.pid is None:  # never started (a launch that failed first)
            self.theirs.close()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            os.close(self._pidfd)
        if self._popen is not None:  # (forked warm, it is reaped as the subreaper's orphan)
            self._popen.wait()


class StoreKeeper:
    def __init__(self, plan: Plan, listeners: dict[str, socket.socket], log_path,
                 zygote: tuple[tuple[str, ...], dict[str, str]] | None,
                 python: str = sys.executable):
        """``zygote``: the modules and environment of the zygote to fork the keeper
        from (one that imports torch), or None to start it cold, now."""
        self.log_path = log_path
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._bound: dict[int, socket.socket] = {}  # port -> listener, not yet a world's
        self._cond = threading.Condition()
        self._built = self._ended = self._closing = False
        self._error: str | None = None
        self._answers: dict[int, list[int] | None] = {}
        self._asked = 0
        self._wake: Callable[[], None] | None = None
        self._out: queue.Queue[tuple[dict, list[socket.socket]] | None] = queue.Queue()
        names = list(plan.worlds)
        self._out.put(({"worlds": {n: stored.dump_world(plan.worlds[n]) for n in names}},
                       [listeners[n] for n in names]))
        self._threads = [threading.Thread(target=self._write, name="mwrun-keeper-out",
                                          daemon=True),
                         threading.Thread(target=self._read, name="mwrun-keeper-in",
                                          daemon=True)]
        for thread in self._threads:
            thread.start()
        self.process = KeeperProcess(theirs, log_path, zygote, python)

    def start(self, fork: Callable[..., bool]) -> None:
        """The loop's first act: the keeper forked warm (``Hands.fork``), if it is to be."""
        self.process.start(fork)

    @property
    def pid(self) -> int | None:
        return self.process.pid

    # -- what the loop writes, in order ------------------------------------------------

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        self._do("mark_broken", world, generation, reason)

    def open_next(self, world: str, generation: int, incarnations: list[int]) -> None:
        self._do("open_next", world, generation, list(incarnations))

    def close_world(self, world: str, generation: int, reason: str, ended: bool = False) -> None:
        self._do("close_world", world, generation, reason, ended)

    def resize(self, world: str, generation: int, incarnations: list[int],
               members: list[str], reason: str) -> None:
        self._do("resize", world, generation, list(incarnations), list(members), reason)

    def remove(self, world: str, generation: int, reason: str) -> None:
        self._do("remove", world, generation, reason)

    def _do(self, verb: str, world: str, *args) -> None:
        self._out.put(({"do": verb, "world": world, "args": list(args)}, []))

    def choose_port(self, addr: str, taken: set[int]) -> int:
        """A free port on ``addr`` for a new world, bound now (ports.bind_free): no one
        can take it before its store listens there (the keeper gets the socket)."""
        sock = ports.bind_free(addr, taken | set(self._bound))
        self._bound[sock.getsockname()[1]] = sock
        return sock.getsockname()[1]

    def add_world(self, plan: WorldPlan, incarnations: list[int]) -> None:
        self._out.put(({"add": stored.dump_world(plan), "incarnations": list(incarnations)},
                       [self._bound.pop(plan.port)]))

    # -- what the keeper says ----------------------------------------------------------

    def serve(self, wake: Callable[[], None]) -> None:
        """From now on, wake the loop when the keeper said something."""
        with self._cond:
            self._wake = wake
        wake()

    def ready(self) -> bool:
        """Whether every store exists; raises RunError if the keeper failed or ended."""
        with self._cond:
            if self._error is not None:
                raise RunError(f"the worlds' stores could not be kept: {self._error}"
                               f" (the keeper's log: {self.log_path})")
            if self._ended and not self._closing:
                raise RunError(f"the worlds' stores' keeper (pid {self.pid}) ended; the job"
                               f" cannot go on without them (its log: {self.log_path})")
            return self._built

    def plain_ranks(self, world: str) -> set[int] | None:
        """The ranks of a plain group that met in the world's store; before every store
        exists, or if the keeper does not answer in time, none yet (asked again)."""
        with self._cond:
            if not self._built or self._ended:
                return set()
            self._asked += 1
            ask = self._asked
        self._out.put(({"ask": ask, "world": world}, []))
        with self._cond:
            answered = self._cond.wait_for(lambda: ask in self._answers or self._ended,
                                           ASK_WAIT)
            ranks = self._answers.pop(ask, [])
            self._answers.clear()  # answers to asks given up on, come late
        if not answered:
            return set()
        return None if ranks is None else set(ranks)

    # -- the threads -------------------------------------------------------------------

    def _write(self) -> None:
        while (item := self._out.get()) is not None:
            message, socks = item
            try:
                wire.send(self.sock, message, [s.fileno() for s in socks])
            except OSError:
                return  # the keeper is gone: the reader says so
            finally:
                for sock in socks:
                    sock.close()  # the keeper holds it now

    def _read(self) -> None:
        reader = wire.Reader(self.sock)
        while not reader.ended:
            for message, fds in reader.read():
                for fd in fds:
                    os.close(fd)
                with self._cond:
                    if "built" in message:
                        self._built = True
                    elif "error" in message:
                        self._error = str(message["error"])
                    elif "ask" in message:
                        self._answers[int(message["ask"])] = message["ranks"]
                    self._cond.notify_all()
                self._wake_loop()
        with self._cond:
            self._ended = True
            self._cond.notify_all()
        self._wake_loop()

    def _wake_loop(self) -> None:
        with self._cond:
            wake = self._wake
        if wake is not None:
            wake()

    # -- the end -----------------------------------------------------------------------

    def close(self) -> None:
        """Close every store (the keeper ends), or kill a keeper that does not."""
        with self._cond:
            self._closing = True
        self._out.put(({"close": True}, []))
        self._out.put(None)
        with self._cond:
            self._cond.wait_for(lambda: self._ended, CLOSE_WAIT if self.pid else 0.0)
        self.process.end()
        for sock in self._bound.values():
            sock.close()
        self.sock.close()
