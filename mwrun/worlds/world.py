"""One member's handle on one world: what users read and call. A facade over the
member's place in the world generation after generation (membership.py, the state
machine), the calls on its group (calls.py) and their counts (traffic.py).
"""

from __future__ import annotations

import threading
import time

import torch
import torch.distributed as dist

from mwrun.errors import BrokenWorldError
from mwrun.protocol import WorldReport
from mwrun.worlds.calls import Calls
from mwrun.worlds.inflight import CALLS
from mwrun.worlds.membership import Membership
from mwrun.worlds.traffic import Traffic
from mwrun.worlds.work import Work
from mwrun.worlds.worldspec import WorldSpec


class World:
    """A world as one of its members uses it. Made by ``mwrun.init`` (or
    ``job.add_world``); ``membership`` and ``traffic`` are mwrun's own (the job and
    the heartbeats use them)."""

    def __init__(self, name: str, spec: WorldSpec, *, link=None, local_addr: str | None = None,
                 incarnation: int | None = None, process: str | None = None, tell=None):
        self.name = name
        self.backend = spec.backend
        self.timeout = spec.timeout
        self.spec = spec
        self.traffic = Traffic()
        self.membership = Membership(
            name, spec, link=link, local_addr=local_addr, incarnation=incarnation,
            process=process,
            tell=None if tell is None else lambda *change: tell(self, *change))
        self._state = self.membership.state
        self._calls = Calls(name, spec.backend, self.membership, self.traffic)

    # -- what users read -------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This member's rank in the generation it holds (a resize may change it)."""
        return self._state.rank

    @property
    def size(self) -> int:
        return self._state.size

    @property
    def generation(self) -> int:
        return self._state.generation

    @property
    def device(self) -> torch.device:
        return self._state.device

    @property
    def broken(self) -> bool:
        return isinstance(self._state.error, BrokenWorldError)

    @property
    def reason(self) -> str | None:
        error = self._state.error
        return error.reason if error else None

    @property
    def draining(self) -> bool:
        """The head is retiring this world: calls work until ``release()`` lets it go."""
        return self._state.draining

    def __repr__(self) -> str:
        state = self._state
        status = "closed" if state.closed or state.gone else \
            "broken" if state.error else "healthy"
        return (f"<World {self.name} rank {state.rank}/{state.size} {self.backend}"
                f" generation {state.generation} {status}>")

    # -- its generations ---------------------------------------------------------------------

    def rejoin(self, timeout: float | None = None) -> World:
        """After a break: wait for the next generation of the world and join it.

        Returns at once if the world is not broken. Raises ``BrokenWorldError`` if the
        world will not re-form (its host closed it) or ``timeout`` seconds pass: by
        default, under the launcher, long enough for a hung peer to be declared, killed
        and restarted (the world's ``rejoin`` in MWRUN_WORLDS); by hand, no deadline.
        After a resize it returns with the world's new size and this member's new rank;
        a world closed for this member raises ``WorldClosedError``.
        """
        timeout = self.spec.rejoin if timeout is None else timeout
        ident = threading.get_ident()
        if self.membership.state.error is not None:  # a wait: what a stacks dump says
            CALLS[ident] = (self.name, "rejoin", time.monotonic())
        try:
            self.membership.rejoin(None if timeout is None else time.monotonic() + timeout)
        finally:
            CALLS.pop(ident, None)
        return self

    def release(self) -> bool:
        """Let a draining world go now: under the launcher, tell the head, which then
        closes the world (calls raise ``WorldClosedError`` once it has); by hand, the
        same as ``close()``. True if a drain was let go; False, and nothing done, where
        the head is not draining this world. That is no misuse to raise on: a
        ``draining`` event is read later than ``job.worlds`` changes, and by then the
        drain may be over (the world closed at ``drain_timeout``, or a new world added
        under its name, which must not be let go)."""
        link = self.membership.link
        if link is None:
            self.close()
            return True
        if not self._state.draining or self._state.gone is not None:
            return False
        link.world_event(self.name, self._state.generation, WorldReport.RELEASED)
        return True

    def close(self) -> None:
        """Leave the world. Other members see it end if they still call on it."""
        self.membership.close()

    # -- its calls (calls.py) ----------------------------------------------------------------

    def be_late(self, delay: float, hold: float) -> None:
        """A drill's slow member (the head's ``late`` order, ``mwrun kill-world --signal
        SLOW``): come ``delay`` seconds late to every call for ``hold`` seconds."""
        self._calls.be_late(delay, hold)

    def send(self, tensor, dst: int, async_op: bool = False):
        return self._calls.send(tensor, dst, async_op)

    def recv(self, tensor, src: int, async_op: bool = False):
        return self._calls.recv(tensor, src, async_op)

    def isend(self, tensor, dst: int) -> Work:
        return self._calls.send(tensor, dst, async_op=True)

    def irecv(self, tensor, src: int) -> Work:
        return self._calls.recv(tensor, src, async_op=True)

    def broadcast(self, tensor, src: int, async_op: bool = False):
        return self._calls.broadcast(tensor, src, async_op)

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, async_op: bool = False):
        return self._calls.all_reduce(tensor, op, async_op)

    def reduce(self, tensor, dst: int, op=dist.ReduceOp.SUM, async_op: bool = False):
        return self._calls.reduce(tensor, dst, op, async_op)

    def all_gather(self, tensor_list, tensor, async_op: bool = False):
        return self._calls.all_gather(tensor_list, tensor, async_op)

    def gather(self, tensor, gather_list=None, dst: int = 0, async_op: bool = False):
        return self._calls.gather(tensor, gather_list, dst, async_op)

    def scatter(self, tensor, scatter_list=None, src: int = 0, async_op: bool = False):
        return self._calls.scatter(tensor, scatter_list, src, async_op)

    def barrier(self, async_op: bool = False):
        return self._calls.barrier(async_op)
