"""One member's place in one world, generation after generation: the state machine
behind ``World`` (its states in state.py). It owns the world's store connections
(worldstore.py), the watcher of the generation it holds (watcher.py) and that
generation's group (backends.py); how members agree on generations and breaks is
described in ``mwrun.protocol``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from mwrun import protocol
from mwrun.errors import BrokenWorldError, WorldClosedError, WorldEnded
from mwrun.protocol import WorldReport
from mwrun.worlds import aborts, backends, failures, inflight, joining, signals, storehost
from mwrun.worlds import nccl as discipline
from mwrun.worlds.interruptible import finish, release
from mwrun.worlds.reasons import agreed
from mwrun.worlds.state import GenerationState
from mwrun.worlds.watcher import Watcher
from mwrun.worlds.worldstore import WorldStore

log = logging.getLogger("mwrun")


class Membership:
    """``link``: the supervisor link (None by hand); ``process``: this process's name
    under the launcher (its seat, seats.py); ``incarnation``: which start of it
    (fencing.py); ``tell(kind, generation, reason)``: the job hears a change."""

    def __init__(self, name: str, spec, *, link=None, local_addr: str | None = None,
                 incarnation: int | None = None, process: str | None = None, tell=None):
        self.name, self.spec, self.link = name, spec, link
        self.process, self.incarnation = process, incarnation
        self.state = GenerationState(name, spec.rank, spec.size, spec.backend, tell)
        self.stores = WorldStore(name, spec, self.state.exiting,
                                 lambda generation, exc: storehost.lost(self, generation, exc))
        self.watcher = Watcher(self)
        self._local_addr = local_addr or backends.local_address(spec.addr)
        self._rejoining = threading.Lock()
        self._retiring = threading.Lock()  # held while a rejoin lets a group go: close() waits

    # FORMING|BROKEN -> FORMED
    def form(self, deadline: float | None) -> None:
        """Join the generation the store names (or the one after a break) and build it."""
        try:
            self._form(deadline)
        except BrokenWorldError:
            raise
        except WorldClosedError as exc:  # removed from the world: for good
            raise self.close_for_good(exc) from None
        except (RuntimeError, TimeoutError) as exc:  # a store call: close() dropped it,
            raise storehost.lost(self, max(self.state.generation, 0), exc) from None  # or died

    def _form(self, deadline: float | None) -> None:
        if self.spec.hosts_store:
            self.stores.host()  # not once closed: see storehost
            storehost.hosted(self)
        store = self.stores.connect(deadline, max(self.state.generation, 0))
        seat, group = joining.built(self.stores, store, self, deadline, self._create,
                                    self._drop)
        if not self.state.formed(seat.generation, seat.rank, seat.size, group,
                                 lambda: self.stores.waits.ended):
            self._drop(group)  # closed (or exiting) while the group formed
            raise self.state.exiting()
        log.debug("%s: generation %d formed (rank %d of %d)", self.name, seat.generation,
                  seat.rank, seat.size)
        self.watcher.start(seat.generation, seat.rank)
        if self.link is not None:
            self.link.world_event(self.name, seat.generation, WorldReport.READY)

    def _create(self, prefixed_store, seat: joining.Seat) -> backends.Backend:
        return backends.create(self.spec.backend, prefixed_store, seat.rank, seat.size,
                               self.spec.timeout, local_addr=self._local_addr, device=None,
                               group=protocol.group_name(self.name, seat.generation))

    def _drop(self, group: backends.Backend) -> None:
        with self._retiring:  # close() waits for it to reach its reaper
            release(group)

    def rejoin(self, deadline: float | None) -> None:
        """After a break: let the broken generation go, and form the next one."""
        with self._rejoining, signals.blocked_off_main():
            state = self.state
            if state.closed or state.gone:  # closed on purpose: WorldClosedError
                raise state.error or state.exiting()
            if state.over is not None:
                raise state.over
            if state.error is None and state.group is not None:
                return
            self.retire()
            self.form(deadline)

    def retire(self) -> None:
        """Let go of a broken generation: its watcher, its group, its sockets."""
        with self._retiring:
            self.watcher.stop(self.stores.shared)
            group = self.state.take_group()
            if group is not None:
                self._abort(group, self.state.generation)  # at once if aborted already
                release(group)

    # FORMED -> BROKEN
    def broke(self, generation: int, reason: str, publish: bool, left: tuple[int, ...] = (),
              ended: bool = False, closes: str | None = None):
        """``generation`` broke. ``left``: the peers that closed the world; ``ended``:
        its host closed it as a member finished (either way a normal end, not a
        failure); ``closes``: why the break closes the world for this member for good
        (seats.closes). Returns the error that stands."""
        if closes is not None:
            return self.close_for_good(WorldClosedError(self.name, generation, closes),
                                       generation)
        kind = WorldEnded if left or ended else BrokenWorldError
        size, rank = self.state.size, self.state.rank
        error, now, group = self.state.broke(generation, kind(self.name, generation, reason))
        if not now:
            return error  # not the generation formed, or it broke before
        if group is not None:
            self._abort(group, generation)  # every blocked call, in any thread, fails now
        log.debug("%s: generation %d broke: %s", self.name, generation, reason)
        store = self.stores.shared
        if publish and store is not None:
            # If the store is gone too, peers learn from their own sockets.
            with contextlib.suppress(RuntimeError, TimeoutError):
                protocol.mark_broken(store, generation, size, reason)
        server = self.stores.server
        if server is not None:  # by hand, the host decides what comes next:
            with contextlib.suppress(RuntimeError, TimeoutError):
                if set(left) >= set(range(size)) - {rank}:
                    # every peer finished: no one will come back, the world is over
                    protocol.close(server, generation, size,
                                   "every peer left the world (they closed it)")
                else:  # a peer died or may come back: let the next generation form
                    protocol.open_next(server, generation)
        if self.link is not None and not protocol.is_resize(reason):  # the head's doing
            self.link.world_event(self.name, generation, WorldReport.BROKEN, reason)
        return error

    def failed(self, generation: int, exc: BaseException):
        """A call of ``generation`` failed in the backend: the world is broken."""
        error = self.state.error
        if error is not None and error.generation == generation:
            return error
        if generation != self.state.generation:  # a call from before a rejoin
            return BrokenWorldError(self.name, generation, "an earlier generation's call")
        call = inflight.CALLS.get(threading.get_ident())  # the call that failed, if one
        said = agreed(self.stores.shared, generation, self.state.size,
                      failures.noticed(self.state.rank, exc, *_call_of(call)),
                      process=self.process,
                      supervised=self.link is not None,
                      by_a_peer=storehost.by_a_peer(self.spec) and not self.state.closed)
        if said.host_gone is not None:  # by hand, its store host has gone: the world ends
            return storehost.gone(self, generation, said.host_gone, said.lost)
        return self.broke(generation, said.reason, publish=False, left=said.left,
                          closes=said.closes)  # or gone already

    def _abort(self, group: backends.Backend, generation: int) -> None:
        """Abort ``group`` within its deadline (see aborts.py); one that does not return
        is told to the supervisor, which ends this process (its restart policy applies)."""
        hung = aborts.bounded(group.abort, discipline.ABORT_DEADLINE,
                              f"{self.name}'s {group.name} group (generation {generation})")
        if hung is not None and self.link is not None:
            self.link.world_event(self.name, generation, WorldReport.ABORT_HUNG, hung)

    # any -> GONE
    def close_for_good(self, error: WorldClosedError, generation: int | None = None):
        """The world is closed for this member (removed, or left out by a resize): every
        call and ``rejoin()`` raise ``error`` from now on, and it leaves the job. Its
        group, watcher and store go (the watcher may be the thread saying it)."""
        error, changed, group = self.state.go(error, generation)
        if not changed:
            return error
        self.stores.stop_waits()  # nothing waits on its store from now on
        log.debug("%s: closed for this member: %s", self.name, error.reason)
        if group is not None:
            self._abort(group, error.generation)
            release(group)
        self.watcher.stop(self.stores.shared)
        self.stores.forget()
        return error

    # any -> CLOSED
    def close(self) -> None:
        """Leave the world. Other members see it end if they still call on it."""
        closing = self.state.close(self.stores.stop_waits)  # a rejoin starts nothing now
        if closing is None:
            return
        generation, group, gone = closing
        # Tell the supervisor and the store first: the moment the group's sockets close,
        # peers notice, and their reports must find this member already gone.
        if self.link is not None and not gone:  # the head closed it: nothing to tell
            self.link.world_event(self.name, generation, WorldReport.CLOSED)
        store = self.stores.shared
        if store is not None and generation >= 0 and not gone:
            with contextlib.suppress(RuntimeError, TimeoutError):
                protocol.leave(store, generation, self.state.rank)
        self.stores.leaving(generation, self.state.size, self.state.rank)  # by hand, rank 0
        self.watcher.stop(store)
        if group is not None:
            if inflight.busy(self.name):  # a thread of ours waits in a call: it fails now
                self._abort(group, generation)  # (with WorldClosedError, state.close)
            release(group)
        # A rejoin in another thread (Ctrl-C ends the main thread's wait for it) may hold
        # the group already, or the watcher, which watcher.stop() then left to it: wait
        # until it has handed the group to its reaper (in RELEASING, which the exit hook
        # waits for). Left to itself, it could drop the group during the interpreter's
        # teardown, and ProcessGroupGloo's destructor, which releases the GIL, would
        # abort the process on taking it back (see storehost).
        with self._retiring:
            pass
        self.stores.drop()
        finish(self.stores.waits)  # a wait on the store this member hosted ends now

    def at_exit(self) -> None:
        """The process exits without close(), and this member hosts the store: end it
        while Python still runs (see storehost)."""
        self.stores.leaving(self.state.generation, self.state.size, self.state.rank)
        self.stores.stop_waits()  # as close() does: no wait starts, no store is hosted
        self.stores.drop()
        with self._retiring:  # a rejoin letting a group go hands it to RELEASING first
            pass
        finish(self.stores.waits)
        self.watcher.join(timeout=2)


def _call_of(call: tuple[str, str, float] | None) -> tuple[str | None, float | None]:
    """(call, seconds in it) of a thread's entry in inflight.CALLS."""
    return (None, None) if call is None else (call[1], time.monotonic() - call[2])
