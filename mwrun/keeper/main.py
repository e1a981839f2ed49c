"""The keeper's loop: what its head writes, done in order, until the head says close
or goes. Once its connection closes (the head died) the stores stay for the run's
``head_grace`` (the head's first message says it), so that the worlds go on working
while the agents keep the processes; then the keeper ends, as the agents end
everything (host/absence.py). Without a grace it ends at once. Meanwhile, or while a
head runs it (mwrun restart-head), a head of a newer epoch can take the stores over at
its door (``--door PATH``, keeper/door.py): from then on that head's connection is the
one the keeper reads and answers.

Started by the agent of the head's machine when the head asks (host/asks.py), as
``python -m mwrun.keeper --connect PATH --door PATH``: forked from that host's zygote
with torch when there is one, else cold; its log is its stdout. It connects to the head
at PATH (a socket in the run's private folder, head/hosts/stores.py); the head's first
message is the worlds and their bound listeners, and its epoch.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import sys
import time
import traceback

from mwrun.keeper import wire
from mwrun.keeper.door import Door
from mwrun.keeper.pending import PendingStores
from mwrun.plan import stored

WRITES = ("mark_broken", "open_next", "close_world", "resize", "remove")


def main(argv: list[str] | None = None) -> int:
    warm = "torch" in sys.modules  # forked from a zygote that imported it
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (2, 4) or argv[0] != "--connect" or argv[2:3] not in ([], ["--door"]):
        print("usage: python -m mwrun.keeper --connect PATH [--door PATH] (started by"
              " mwrun, not by hand)", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(argv[1])
    except OSError as exc:
        print(f"keeper: cannot reach the head at {argv[1]}: {exc}", flush=True)
        return 1
    reader = wire.Reader(sock)
    first: list[tuple[dict, list[int]]] = []
    while not first and not reader.ended:
        first = reader.read()
    if reader.ended:
        return 0  # the head went before it said anything
    (hello, fds), *rest = first
    worlds = {name: stored.load_world(plan, f"world {name}")
              for name, plan in hello["worlds"].items()}
    listeners = {name: socket.socket(fileno=fd) for name, fd in zip(worlds, fds, strict=True)}
    print(f"keeper (pid {os.getpid()}): the stores of {len(worlds)} worlds;"
          + (" forked warm, torch imported already" if warm else
             " started cold, importing torch"), flush=True)
    door = Door(argv[3], int(hello.get("epoch", 1))) if len(argv) == 4 else None
    return Keeper(sock, reader, PendingStores(worlds, listeners),
                  float(hello.get("grace", 0.0)), door).run(rest)


class Keeper:
    def __init__(self, sock: socket.socket, reader: wire.Reader, stores: PendingStores,
                 grace: float = 0.0, door: Door | None = None):
        self.sock, self.reader, self.stores, self.grace = sock, reader, stores, grace
        self.door = door  # where a new head adopts the stores (keeper/door.py)
        self.wake_read, self.wake_write = os.pipe()
        self.built = False  # told the head every store exists
        self.first: list = []  # what an adopting head said after its epoch

    def run(self, first: list[tuple[dict, list[int]]]) -> int:
        self.stores.serve(self._wake)
        try:
            messages = first
            while True:
                for message, fds in messages:
                    if "close" in message:
                        return 0
                    self._do(message, fds)
                self._ready()
                watched = [self.sock.fileno(), self.wake_read]
                if self.door is not None:
                    watched.append(self.door.fileno())
                readable, _, _ = select.select(watched, [], [])
                if self.wake_read in readable:
                    os.read(self.wake_read, 4096)
                messages = self.reader.read() if self.sock.fileno() in readable else []
                if self.door is not None and self.door.fileno() in readable:
                    messages = self._adopted(messages)
                if self.reader.ended:
                    if not self._headless():
                        return 0
                    messages = self.first
        except BaseException as exc:  # what the build raised: the head ends the run with it
            traceback.print_exc()
            self._tell({"error": f"{type(exc).__name__}: {exc}"})
            return 1
        finally:
            if self.door is not None:
                self.door.close()
            self.stores.close()

    def _adopted(self, messages: list) -> list:
        """A head knocked at the door: if it is obeyed, what it said next is what is
        done next (the old head's last messages are not); else ``messages``."""
        assert self.door is not None, "watched only with a door"
        taken = self.door.take()
        if taken is None:
            return messages
        with contextlib.suppress(OSError):
            self.sock.close()  # a stale head reads its end
        self.sock, self.reader, self.first = taken
        print(f"keeper: a new head (epoch {self.door.epoch}) has the stores", flush=True)
        self.built = False  # it is told again, once every store exists
        self._tell({"adopted": self.door.epoch, "pid": os.getpid()})
        return self.first

    def _headless(self) -> bool:
        """The head is gone: the stores serve on for its grace (their own threads do
        the serving), then go with everything else; True if a new head adopted them
        meanwhile (its first messages are ``first``)."""
        if self.grace <= 0:
            return False
        print(f"keeper: the head is gone; the stores stay {self.grace:g}s for a new"
              " one", flush=True)
        ends = time.monotonic() + self.grace
        while (left := ends - time.monotonic()) > 0:
            if self.door is None:
                time.sleep(left)
                continue
            if select.select([self.door.fileno()], [], [], left)[0]:
                self.first = []
                self._adopted([])
                if not self.reader.ended:
                    return True
        print("keeper: no head came back within head_grace; the stores go", flush=True)
        return False

    def _wake(self) -> None:
        """From a store's builder thread: a store exists that a write may wait for."""
        os.write(self.wake_write, b".")

    def _do(self, message: dict, fds: list[int]) -> None:
        if "add" in message:
            world = stored.load_world(message["add"], "an added world")
            self.stores.add_world(world, message["incarnations"], socket.socket(fileno=fds[0]))
        elif "ask" in message:
            ranks = self.stores.plain_ranks(message["world"])
            self._tell({"ask": message["ask"], "ranks": None if ranks is None
                        else sorted(ranks)})
        elif message.get("do") in WRITES:
            getattr(self.stores, message["do"])(message["world"], *message["args"])
        else:
            raise ValueError(f"the keeper was told something it does not know: {message}")

    def _ready(self) -> None:
        if self.stores.ready() and not self.built:
            self.built = True
            self._tell({"built": True})

    def _tell(self, message: dict) -> None:
        with contextlib.suppress(OSError):  # the head is gone: the loop sees its end
            wire.send(self.sock, message)
