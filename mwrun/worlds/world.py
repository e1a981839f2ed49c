"""One member's handle on one world: forming, breaking, re-forming (its calls are in
calls.py). How breaks and generations travel between members is described in
``mwrun.protocol``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import torch
import torch.distributed as dist

from mwrun import protocol
from mwrun.errors import BrokenWorldError, MwrunError, WorldClosedError, WorldEnded
from mwrun.worlds import aborts, backends, failures, fencing, seats, signals, storehost, watcher
from mwrun.worlds import nccl as discipline
from mwrun.worlds.calls import Calls
from mwrun.worlds.events import EventKind
from mwrun.worlds.failures import summarize
from mwrun.worlds.interruptible import finish, interruptible, release
from mwrun.worlds.reasons import agreed
from mwrun.worlds.worldspec import WorldSpec
from mwrun.worlds.worldstore import WorldStore, left

log = logging.getLogger("mwrun")


class WorldClosed(BrokenWorldError):
    """The world's host decided it will not re-form (a BrokenWorldError all the same)."""


class WorldFinished(WorldEnded, WorldClosed):
    """Closed because a member finished (exited 0, not restarted): ended, not broken."""


class World(Calls):
    """A world as one of its members uses it. Made by ``mwrun.init``."""

    def __init__(self, name: str, spec: WorldSpec, *, link=None, local_addr: str | None = None,
                 incarnation: int | None = None, process: str | None = None, tell=None):
        self.name = name
        self.rank = spec.rank
        self.size = spec.size
        self.backend = spec.backend
        self.timeout = spec.timeout
        self._spec = spec
        self._link = link
        self._local_addr = local_addr or backends.local_address(spec.addr)
        self._incarnation = incarnation  # which start of this process (fencing.py)
        self._process = process  # its name under the launcher: its seat (seats.py)
        self._tell = tell  # (world, EventKind, generation, reason): the job hears it
        self._draining = False
        self._gone: WorldClosedError | None = None  # closed for this member for good
        self._lock = threading.Lock()  # state below changes under it; calls read it bare
        self._rejoin_lock = threading.Lock()
        self._retiring = threading.Lock()  # held while a rejoin lets a group go: close() waits
        self._server = None  # the TCPStore server, when this member hosts the store
        self._store = None
        self._generation = -1
        self._group: backends.Backend | None = None
        self._error: BrokenWorldError | None = None
        self._watcher: threading.Thread | None = None
        self._stores = WorldStore(name, spec, self._exiting,
                                  lambda generation, exc: storehost.lost(self, generation, exc))
        self._waits = self._stores.waits  # store waits in flight; ended by close()
        self._closed = False
        self._broke_at = -1  # the last generation this member saw break
        self._over: BrokenWorldError | None = None  # by hand: its store host has gone
        self._calls = self._bytes = self._failures = 0  # traffic, see calls.py
        self._last_call = 0.0
        self._first_call = (-1, 0.0)  # (generation, wall clock): its first completed call
        self._device = torch.device("cpu") if self.backend == "gloo" else torch.device("cuda", 0)

    # -- what users read -----------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def broken(self) -> bool:
        return isinstance(self._error, BrokenWorldError)

    @property
    def draining(self) -> bool:
        """The head is retiring this world: calls work until ``release()`` lets it go."""
        return self._draining

    @property
    def reason(self) -> str | None:
        return self._error.reason if self._error else None

    def __repr__(self) -> str:
        state = "closed" if self._closed or self._gone else \
            "broken" if self._error else "healthy"
        return (f"<World {self.name} rank {self.rank}/{self.size} {self.backend}"
                f" generation {self._generation} {state}>")

    # -- forming ---------------------------------------------------------------------------

    def _client(self, timeout: float):
        return self._stores.client(timeout, self._generation)

    def form(self, deadline: float | None) -> None:
        """Join the generation the store names (or the one after a break) and build it
        (``init`` and ``job.add_world`` do; after a break, call ``rejoin()``)."""
        try:
            self._join(deadline)
        except BrokenWorldError:
            raise
        except WorldClosedError as exc:  # removed from the world: for good
            raise self._close_for_good(exc) from None
        except (RuntimeError, TimeoutError) as exc:  # a store call: close() dropped it,
            raise storehost.lost(self, max(self._generation, 0), exc) from None  # or its host died

    def _join(self, deadline: float | None) -> None:
        if self._spec.hosts_store and self._server is None:
            storehost.host(self)  # not once closed: see storehost
        if self._store is None:
            self._store = interruptible(self._exiting, self._waits, self._client,
                                        left(deadline, 300.0))
        store = self._store  # close() may drop self._store meanwhile
        generation = int(self._stores.value(store, protocol.GEN, deadline, 0))
        while True:
            # Never join a generation again once it broke, even if the store does not
            # say so yet (a peer that left publishes nothing): its key space holds the
            # old group's addresses. Wait for the host's word on it instead.
            while generation <= self._broke_at or \
                    protocol.broken_reason(store, generation) is not None:
                decision = self._stores.value(store, protocol.key(generation, "next"),
                                              deadline, generation)
                if decision.startswith(protocol.CLOSED):
                    why = decision[len(protocol.CLOSED):]
                    if protocol.removed(store, generation):
                        raise WorldClosedError(self.name, generation, why)
                    kind = WorldFinished if protocol.ended(store, generation) else WorldClosed
                    raise kind(self.name, generation, why)
                generation += 1
            rank, size = seats.seat(store, self.name, generation, self._process, self.rank,
                                    self.size)
            incarnations = fencing.admitted(store, self.name, generation, rank, size,
                                            self._incarnation)  # a stale copy ends
            arrivals = protocol.arrival_keys(generation, size)
            log.debug("%s: rank %d joins generation %d", self.name, rank, generation)
            store.set(arrivals[rank], "here")
            self._stores.arrive(store, arrivals, deadline, generation)
            if protocol.broken_reason(store, generation) is None:
                break
            # It broke before it formed (a member it counted on died meanwhile): that
            # is no end of the world, whose host opens the next one or closes it.
            self._broke_at = max(self._broke_at, generation)
        prefixed = dist.PrefixStore(protocol.pg_prefix(generation, incarnations), store)
        try:
            group = backends.create(self.backend, prefixed, rank, size, self.timeout,
                                    local_addr=self._local_addr, device=None)
        except RuntimeError as exc:
            reason = f"rank {rank} could not connect to its peers: {summarize(exc)}"
            raise BrokenWorldError(self.name, generation, reason) from None
        with self._lock:
            ended = self._waits.ended  # closed (or exiting) while the group formed
            if not ended:
                self._group, self._generation, self._error = group, generation, None
                self.rank, self.size, self._device = rank, size, group.device
        if ended:
            with self._retiring:
                release(group)
            raise self._exiting()
        log.debug("%s: generation %d formed (rank %d of %d)", self.name, generation, self.rank,
                  self.size)
        self._watcher = threading.Thread(target=watcher.watch, args=(self, generation),
                                         name=f"mwrun-watch-{self.name}", daemon=True)
        signals.start(self._watcher)
        if self._link is not None:
            self._link.world_event(self.name, generation, "ready")

    def _exiting(self) -> BrokenWorldError | WorldClosedError:
        if self._gone is not None:
            return self._gone
        if self._closed:
            return WorldClosed(self.name, max(self._generation, 0), "this member closed it")
        return BrokenWorldError(self.name, max(self._generation, 0), "the process is exiting")

    def give_up(self, error: BrokenWorldError) -> None:
        """Forming failed for good (``init`` says so): the world stays broken until a
        rejoin() succeeds."""
        with self._lock:
            self._error, self._generation = error, error.generation

    # -- breaking --------------------------------------------------------------------------

    def _break(self, generation: int, reason: str, publish: bool,
               left: tuple[int, ...] = (), ended: bool = False,
               closes: str | None = None) -> BrokenWorldError | WorldClosedError:
        """``left``: the peers that closed the world; ``ended``: its host closed it as a
        member finished (either way a normal end, not a failure); ``closes``: why the
        break closes the world for this member for good (seats.closes)."""
        if closes is not None:
            return self._close_for_good(WorldClosedError(self.name, generation, closes),
                                        generation)
        kind = WorldEnded if left or ended else BrokenWorldError
        resize = protocol.is_resize(reason)
        with self._lock:
            if self._generation != generation or self._error is not None:
                return self._error or kind(self.name, generation, reason)
            error = self._error = kind(self.name, generation, reason)
            self._broke_at = generation
            group = self._group
            self._say(EventKind.RESIZED if resize else EventKind.BROKEN, generation, reason)
        if group is not None:
            self._abort(group, generation)  # every blocked call, in any thread, fails now
        log.debug("%s: generation %d broke: %s", self.name, generation, reason)
        store = self._store
        if publish and store is not None:
            # If the store is gone too, peers learn from their own sockets.
            with contextlib.suppress(RuntimeError, TimeoutError):
                protocol.mark_broken(store, generation, self.size, reason)
        if self._server is not None:  # by hand, the host decides what comes next:
            with contextlib.suppress(RuntimeError, TimeoutError):
                if set(left) >= set(range(self.size)) - {self.rank}:
                    # every peer finished: no one will come back, the world is over
                    protocol.close(self._server, generation, self.size,
                                   "every peer left the world (they closed it)")
                else:  # a peer died or may come back: let the next generation form
                    protocol.open_next(self._server, generation)
        if self._link is not None and not resize:  # a resize is the head's own doing
            self._link.world_event(self.name, generation, "broken", reason)
        return error

    def _close_for_good(self, error: WorldClosedError,
                        generation: int | None = None) -> WorldClosedError:
        """The world is closed for this member (removed, or left out by a resize): every
        call and ``rejoin()`` raise ``error`` from now on, and it leaves the job. Its
        group, watcher and store go (the watcher may be the thread saying it)."""
        with self._lock:
            if self._gone is not None or self._closed:
                return self._gone or self._exiting()
            if generation is not None and generation != self._generation:
                return self._error or error  # a generation it no longer holds
            self._gone = self._error = error
            self._waits.end()  # nothing waits on its store from now on
            group, self._group = self._group, None
            self._say(EventKind.REMOVED, error.generation, error.reason)
        log.debug("%s: closed for this member: %s", self.name, error.reason)
        if group is not None:
            self._abort(group, error.generation)
            release(group)
        if self._watcher is not threading.current_thread():
            self._stop_watcher(self._generation)
        self._store = None
        return error

    def _say(self, kind: EventKind, generation: int, reason: str | None = None) -> None:
        """Tell the job (called under self._lock, so the job hears in order)."""
        if self._tell is not None:
            self._tell(self, kind, generation, reason)

    def _abort(self, group: backends.Backend, generation: int) -> None:
        """Abort ``group`` within its deadline (see aborts.py); one that does not return
        is told to the supervisor, which ends this process (its restart policy applies)."""
        hung = aborts.bounded(group.abort, discipline.ABORT_DEADLINE,
                              f"{self.name}'s {group.name} group (generation {generation})")
        if hung is not None and self._link is not None:
            self._link.world_event(self.name, generation, protocol.ABORT_HUNG, hung)

    def _failed(self, generation: int, exc: BaseException) -> BrokenWorldError:
        """A call of ``generation`` failed in the backend: the world is broken."""
        self._failures += 1
        error = self._error
        if error is not None and error.generation == generation:
            return error
        if generation != self._generation:  # a call from before a rejoin
            return BrokenWorldError(self.name, generation, "an earlier generation's call")
        said = agreed(self._store, generation, self.size, failures.noticed(self.rank, exc),
                      process=self._process, supervised=self._link is not None,
                      by_a_peer=storehost.by_a_peer(self._spec) and not self._closed)
        if said.host_gone is not None:  # by hand, its store host has gone: the world ends
            return storehost.gone(self, generation, said.host_gone, said.lost)
        return self._break(generation, said.reason, publish=False, left=said.left,
                           closes=said.closes)  # or gone already

    def mark_draining(self) -> bool:
        """The head drains this world (the job calls it); True the first time."""
        first, self._draining = not self._draining, True
        return first

    def release(self) -> None:
        """Let a draining world go now: under the launcher, tell the head, which then
        closes the world (calls raise ``WorldClosedError`` once it has); by hand, the
        same as ``close()``. ``MwrunError`` if the head is not draining it."""
        if self._link is None:
            self.close()
            return
        if not self._draining:
            raise MwrunError(f"world {self.name!r} is not draining: only a world the"
                             " supervisor drains can be released")
        self._link.world_event(self.name, self._generation, "released")

    def _live(self) -> backends.Backend:
        error = self._error
        if error is not None:
            raise error
        group = self._group
        if group is None:
            raise MwrunError(f"world {self.name!r} is closed" if self._closed
                             else f"world {self.name!r} has not formed")
        return group

    def rejoin(self, timeout: float | None = None) -> World:
        """After a break: wait for the next generation of the world and join it.

        Returns at once if the world is not broken. Raises ``BrokenWorldError`` if the
        world will not re-form (its host closed it) or ``timeout`` seconds pass: by
        default, under the launcher, long enough for a hung peer to be declared, killed
        and restarted (the world's ``rejoin`` in MWRUN_WORLDS); by hand, no deadline.
        """
        timeout = self._spec.rejoin if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._rejoin_lock, signals.blocked_off_main():
            if self._closed or self._gone:  # by another thread, maybe (Ctrl-C): WorldClosed
                raise self._exiting()
            if self._over is not None:
                raise self._over
            if self._error is None and self._group is not None:
                return self
            self._retire()
            self.form(deadline)
            with self._lock:
                self._say(EventKind.REFORMED, self._generation)
        return self

    def _stop_watcher(self, generation: int) -> None:
        """End this generation's watcher: it may still sleep (a break that was not
        published, like a peer leaving, wakes no one), so wake it with its own key."""
        watcher, self._watcher = self._watcher, None
        store = self._store
        if watcher is None or not watcher.is_alive() or watcher is threading.current_thread():
            return
        if store is not None:
            with contextlib.suppress(RuntimeError, TimeoutError):
                store.set(protocol.wake_key(generation, self.rank), "close")
        watcher.join(timeout=5)

    def _retire(self) -> None:
        """Let go of a broken generation: its watcher, its group, its sockets."""
        with self._retiring:
            self._stop_watcher(self._generation)
            with self._lock:
                group, self._group = self._group, None
            if group is not None:
                self._abort(group, self._generation)  # at once if it was aborted already
                release(group)

    def close(self) -> None:
        """Leave the world. Other members see it break if they still call on it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._waits.end()  # a rejoin in another thread starts nothing from now on
            group, self._group = self._group, None
            generation = self._generation
            gone = self._gone is not None  # its host closed it: nothing to tell
        # Tell the supervisor and the store first: the moment the group's sockets close,
        # peers notice, and their reports must find this member already gone.
        if self._link is not None and not gone:
            self._link.world_event(self.name, generation, "closed")
        store = self._store
        if store is not None and generation >= 0 and not gone:
            with contextlib.suppress(RuntimeError, TimeoutError):
                protocol.leave(store, generation, self.rank)
        storehost.leaving(self, generation)  # by hand, rank 0 takes the store away
        self._stop_watcher(generation)
        if group is not None:
            release(group)
        # A rejoin in another thread (Ctrl-C ends the main thread's wait for it) may hold
        # the group already, or the watcher, which _stop_watcher() then left to it: wait
        # until it has handed the group to its reaper (in RELEASING, which the exit hook
        # waits for). Left to itself, it could drop the group during the interpreter's
        # teardown, and ProcessGroupGloo's destructor, which releases the GIL, would
        # abort the process on taking it back (see storehost).
        with self._retiring:
            pass
        self._store = self._server = self._watcher = None
        finish(self._waits)  # a wait on the store this member hosted ends now

