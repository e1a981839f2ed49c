"""The worlds' stores as the head sees them: kept by a process of their own (the
keeper, ``mwrun.keeper``), written to over one socket, in order.

The head imports no torch, and starts no process: it asks the agent of its own machine
(the store host's) to start the keeper (``start``: the ``keeper`` frame, host/asks.py),
forked from the zygote that imports torch there when there is one (it costs the
bring-up no second import, a second of CPU while a hundred processes start on two
cores), else cold. The keeper connects to the head's socket in the run's private folder
(``keeper.sock``); the worlds and their bound listeners are the head's first message, so
a member that connects early waits in its listener's backlog, as before.

The loop never waits on the keeper: what it writes goes over the keeper's connection
in order, and what the keeper says wakes it (keeperwire.py). A head that adopts a run
(``mwrun adopt``) reaches the keeper that runs at its door instead (``doors.keeper``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
from collections.abc import Callable

from mwrun.head.hosts.keeperwire import LOOK, KeeperWire
from mwrun.host import sockets
from mwrun.plan import ports, stored
from mwrun.plan.placement import Plan, WorldPlan


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
                 grace: float = 0.0, door_path=None,
                 adopted: socket.socket | None = None):
        """``sock_path``: where the keeper connects (a private folder's); ``zygote``:
        the modules and environment of the zygote to fork the keeper from (one that
        imports torch, on the store host), or None to start it cold; ``grace``: how
        long the stores stay once the head is gone (head_grace); ``door_path``: where
        the keeper lets a new head in (keeper/door.py). ``adopted``: the connection of a
        new head to a keeper that runs already (``doors.keeper``): nothing is started."""
        self.log_path, self.zygote, self.door_path = log_path, zygote, door_path
        self.door = Door(str(sock_path)) if adopted is None else None
        self._bound: dict[int, socket.socket] = {}  # port -> listener, not yet a world's
        self.process = KeeperProcess()
        first = None
        if adopted is None:
            names = list(plan.worlds)
            first = ({"worlds": {n: stored.dump_world(plan.worlds[n]) for n in names},
                      "grace": grace, "epoch": 1}, [listeners[n] for n in names])
        self.wire = KeeperWire(self._reach(adopted), self.process, log_path, first)

    def _reach(self, adopted: socket.socket | None
               ) -> Callable[[Callable[[], bool]], socket.socket | None]:
        """How the wire gets its connection: the keeper's, once it connects to this
        head's door (until ``given_up()``), or the one an adopting head made."""
        door = self.door
        if door is None:
            return lambda given_up: adopted

        def wait(given_up: Callable[[], bool]) -> socket.socket | None:
            try:
                return door.wait(given_up)
            finally:
                door.close()
        return wait

    def start(self, ask: Callable[..., None]) -> None:
        """Ask the store host's agent for the keeper (``Agents.keeper``): the loop's
        first act, so a warm keeper is its zygote's first fork."""
        assert self.door is not None, "a keeper is started by the head that launched"
        modules, env = self.zygote if self.zygote is not None else ((), None)
        door = ["--door", str(self.door_path)] if self.door_path is not None else []
        ask(args=["--connect", self.door.path, *door], modules=list(modules), env=env,
            log=str(self.log_path))

    def kept(self, told: dict) -> None:
        """The agent's answer (``kept``): the keeper's pid, or why it did not start."""
        self.process.kept(told)
        if self.process.error is not None:
            self.wire.failed(self.process.error)

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
        self.wire.put({"do": verb, "world": world, "args": list(args)})

    def choose_port(self, addr: str, taken: set[int]) -> int:
        """A free port on ``addr`` for a new world, bound now (ports.bind_free): no one
        can take it before its store listens there (the keeper gets the socket)."""
        sock = ports.bind_free(addr, taken | set(self._bound))
        self._bound[sock.getsockname()[1]] = sock
        return sock.getsockname()[1]

    def add_world(self, plan: WorldPlan, incarnations: list[int]) -> None:
        self.wire.put({"add": stored.dump_world(plan), "incarnations": list(incarnations)},
                      [self._bound.pop(plan.port)])

    # -- what the keeper says (keeperwire.py) -----------------------------------------

    def serve(self, wake: Callable[[], None]) -> None:
        """From now on, wake the loop when the keeper said something."""
        self.wire.serve(wake)

    def ready(self) -> bool:
        """Whether every store exists; raises RunError if the keeper failed or ended."""
        return self.wire.ready()

    def plain_ranks(self, world: str) -> set[int] | None:
        return self.wire.plain_ranks(world)

    # -- the end -----------------------------------------------------------------------

    def close(self) -> None:
        """Close every store (the keeper ends), or kill a keeper that does not."""
        self.wire.close()
        for sock in self._bound.values():
            sock.close()

    def abandon(self) -> None:
        """A newer head has the keeper: it is left as it is, only our end closed."""
        self.wire.abandon()
        for sock in self._bound.values():
            sock.close()
