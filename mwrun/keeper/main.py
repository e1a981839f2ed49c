"""The keeper's loop: what its head writes, done in order, until the head says close
or goes (its end of the socket, the keeper's stdin, closes: the keeper then ends too,
as the stores did with the head before they had a process of their own).

Started by the head (head/hosts/stores.py) with its socket as stdin and its log as
stdout: forked from the zygote when the head's machine has one with torch, else as
``python -m mwrun.keeper``. The first message is the worlds and their bound listeners.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import sys
import traceback

from mwrun.keeper import wire
from mwrun.keeper.pending import PendingStores
from mwrun.plan import stored

WRITES = ("mark_broken", "open_next", "close_world", "resize", "remove")


def main() -> int:
    warm = "torch" in sys.modules  # forked from a zygote that imported it
    sock = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # stdin was the head's socket, held once, here
    os.close(null)
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
    return Keeper(sock, reader, PendingStores(worlds, listeners)).run(rest)


class Keeper:
    def __init__(self, sock: socket.socket, reader: wire.Reader, stores: PendingStores):
        self.sock, self.reader, self.stores = sock, reader, stores
        self.wake_read, self.wake_write = os.pipe()
        self.built = False  # told the head every store exists

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
                readable, _, _ = select.select([self.sock.fileno(), self.wake_read], [], [])
                if self.wake_read in readable:
                    os.read(self.wake_read, 4096)
                messages = self.reader.read() if self.sock.fileno() in readable else []
                if self.reader.ended:
                    return 0  # the head is gone: the stores go with it
        except BaseException as exc:  # what the build raised: the head ends the run with it
            traceback.print_exc()
            self._tell({"error": f"{type(exc).__name__}: {exc}"})
            return 1
        finally:
            self.stores.close()

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
