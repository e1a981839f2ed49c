"""The worlds' stores as the head sees them: kept by a process of their own (the
keeper, ``mwrun.keeper``), written to over one socket, in order.

The head imports no torch, and starts no process: it asks the agent of its own machine
(the store host's) to start the keeper (``start``: the ``keeper`` frame, host/asks.py),
forked from the zygote that imports torch there when there is one (it costs the
bring-up no second import, a second of CPU while a hundred processes start on two
cores), else cold. The keeper connects to the head's socket in the run's private folder
(``keeper.sock``); the worlds and their bound listeners are the head's first message, so
a member that connects early waits in its listener's backlog, as before.

The loop never waits on the keeper: a writer thread takes the keeper's connection and
sends what the loop writes, in order, and a reader thread takes what the keeper says
(every store built, a build that failed, a plain group's ranks) and wakes the loop. The
one question the loop asks, and waits for (at most ``ASK_WAIT``), is which ranks of a
plain torch.distributed group met in a store, once every store exists. A keeper that
ends (or could not start) before the head closes it ends the run: a job without its
stores cannot go on (``ready`` raises, naming its log).
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import signal
import socket
import threading
from collections.abc import Callable

from mwrun.errors import RunError
from mwrun.host import sockets
from mwrun.keeper import wire
from mwrun.plan import ports, stored
from mwrun.plan.placement import Plan, WorldPlan

ASK_WAIT = 2.0  # seconds for the keeper to say what a store shows (then: nothing yet)
# At the end, for the keeper to close its stores: a build still importing torch cannot
# be cut short (keeper/pending.py CLOSE_WAIT), then it is killed.
CLOSE_WAIT = 65.0
LOOK = 0.5  # seconds between looks at a keeper that has not connected yet


class KeeperProcess:
    """The keeper as a process, as its agent told it (``kept``): its pid, and whether
    it is gone; killed at the end if it lingers. Not the head's child (its agent's)."""

    def __init__(self):
        self.pid: int | None = None
        self.error: str | None = None  # it could not be started: why
        self._pidfd: int | None = None

    def kept(self, told: dict) -> None:
        """What its agent said: ``{pid, warm}`` or ``{error}``."""
        if isinstance(told.get("pid"), int):
            self.pid = told["pid"]
            with contextlib.suppress(OSError):
                self._pidfd = os.pidfd_open(self.pid)
        else:
            self.error = str(told.get("error") or "its agent could not start it")

    def gone(self) -> bool:
        """Whether it was started and has ended since."""
        if self._pidfd is None:
            return self.pid is not None  # (ended before it could be watched)
        return bool(select.select([self._pidfd], [], [], 0)[0])

    def end(self) -> None:
        """Killed if it is still there (after its close was asked for, and waited for)."""
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            os.close(self._pidfd)
            self._pidfd = None


class Door:
    """Where the keeper connects to the head: a socket in the run's private folder,
    owner-only; one connection of this user's is taken, once the keeper makes it."""

    def __init__(self, path: str):
        self.path = path
        self._listener = sockets.listen(path, 1)
        self._listener.settimeout(LOOK)

    def wait(self, given_up: Callable[[], bool]) -> socket.socket | None:
        """The keeper's connection; None once ``given_up()`` (the keeper ended or could
        not start, or the head closes first). Looked at every LOOK seconds."""
        while not given_up():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return None
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            if int.from_bytes(creds[4:8], "little") != os.getuid():
                sock.close()  # not this user's: never the keeper (the folder is private)
                continue
            sock.settimeout(None)
            return sock
        return None

    def close(self) -> None:
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class StoreKeeper:
    def __init__(self, plan: Plan, listeners: dict[str, socket.socket], log_path,
                 sock_path, zygote: tuple[tuple[str, ...], dict[str, str]] | None,
                 grace: float = 0.0):
        """``sock_path``: where the keeper connects (a private folder's); ``zygote``:
        the modules and environment of the zygote to fork the keeper from (one that
        imports torch, on the store host), or None to start it cold; ``grace``: how
        long the stores stay once the head is gone (head_grace)."""
        self.log_path, self.zygote = log_path, zygote
        self.door = Door(str(sock_path))
        self.sock: socket.socket | None = None  # the keeper's connection, once made
        self._bound: dict[int, socket.socket] = {}  # port -> listener, not yet a world's
        self._cond = threading.Condition()
        self._built = self._ended = self._closing = False
        self._error: str | None = None
        self._answers: dict[int, list[int] | None] = {}
        self._asked = 0
        self._wake: Callable[[], None] | None = None
        self._out: queue.Queue[tuple[dict, list[socket.socket]] | None] = queue.Queue()
        names = list(plan.worlds)
        self._out.put(({"worlds": {n: stored.dump_world(plan.worlds[n]) for n in names},
                        "grace": grace},
                       [listeners[n] for n in names]))
        self.process = KeeperProcess()
        self._writer = threading.Thread(target=self._write, name="mwrun-keeper-out",
                                        daemon=True)
        self._writer.start()

    def start(self, ask: Callable[..., None]) -> None:
        """Ask the store host's agent for the keeper (``Agents.keeper``): the loop's
        first act, so a warm keeper is its zygote's first fork."""
        modules, env = self.zygote if self.zygote is not None else ((), None)
        ask(args=["--connect", self.door.path], modules=list(modules), env=env,
            log=str(self.log_path))

    def kept(self, told: dict) -> None:
        """The agent's answer (``kept``): the keeper's pid, or why it did not start."""
        self.process.kept(told)
        if self.process.error is not None:
            with self._cond:
                self._error = self.process.error
                self._cond.notify_all()
            self._wake_loop()

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
            if self._ended and not self._closing and self.pid is None:
                raise RunError("the worlds' stores' keeper never reached the head (its log:"
                               f" {self.log_path})")
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

    def _given_up(self) -> bool:
        with self._cond:
            if self._closing or self._error is not None:
                return True
        return self.process.gone()

    def _write(self) -> None:
        sock = self.door.wait(self._given_up)
        self.door.close()
        if sock is None:
            while (item := self._out.get_nowait() if not self._out.empty() else None):
                for held in item[1]:
                    held.close()  # the listeners it would have had
            self._gone()
            return
        self.sock = sock
        threading.Thread(target=self._read, args=(sock,), name="mwrun-keeper-in",
                         daemon=True).start()
        while (item := self._out.get()) is not None:
            message, socks = item
            try:
                wire.send(sock, message, [s.fileno() for s in socks])
            except OSError:
                return  # the keeper is gone: the reader says so
            finally:
                for held in socks:
                    held.close()  # the keeper holds it now

    def _read(self, sock: socket.socket) -> None:
        reader = wire.Reader(sock)
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
        self._gone()

    def _gone(self) -> None:
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
        if self.sock is not None:
            self.sock.close()
        self._writer.join(LOOK * 4)  # it sees the close within a look
