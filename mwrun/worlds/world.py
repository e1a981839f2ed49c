"""One member's handle on one world: forming, breaking, re-forming (its calls are in
calls.py). How breaks and generations travel between members is described in
``mwrun.protocol``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from mwrun import protocol
from mwrun.errors import BrokenWorldError, MwrunError, WorldEnded
from mwrun.worlds import aborts, backends, failures, fencing, signals, storehost, watcher
from mwrun.worlds import nccl as discipline
from mwrun.worlds.calls import Calls
from mwrun.worlds.failures import summarize
from mwrun.worlds.interruptible import Waits, finish, interruptible, release
from mwrun.worlds.worldspec import WorldSpec

log = logging.getLogger("mwrun")


class WorldClosed(BrokenWorldError):
    """The world's host decided it will not re-form (a BrokenWorldError all the same)."""


class WorldFinished(WorldEnded, WorldClosed):
    """Closed because a member finished (exited 0, not restarted): ended, not broken."""


class World(Calls):
    """A world as one of its members uses it. Made by ``mwrun.init``."""

    def __init__(self, name: str, spec: WorldSpec, *, link=None, local_addr: str | None = None,
                 incarnation: int | None = None):
        self.name = name
        self.rank = spec.rank
        self.size = spec.size
        self.backend = spec.backend
        self.timeout = spec.timeout
        self._spec = spec
        self._link = link
        self._local_addr = local_addr or backends.local_address(spec.addr)
        self._incarnation = incarnation  # which start of this process (fencing.py)
        self._lock = threading.Lock()  # state below changes under it; calls read it bare
        self._rejoin_lock = threading.Lock()
        self._retiring = threading.Lock()  # held while a rejoin lets a group go: close() waits
        self._server = None  # the TCPStore server, when this member hosts the store
        self._store = None
        self._generation = -1
        self._group: backends.Backend | None = None
        self._error: BrokenWorldError | None = None
        self._watcher: threading.Thread | None = None
        self._waits = Waits()  # store waits in flight (interruptible); ended by close()
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
        return self._error is not None

    @property
    def reason(self) -> str | None:
        return self._error.reason if self._error else None

    def __repr__(self) -> str:
        state = "closed" if self._closed else "broken" if self._error else "healthy"
        return (f"<World {self.name} rank {self.rank}/{self.size} {self.backend}"
                f" generation {self._generation} {state}>")

    # -- forming ---------------------------------------------------------------------------

    def _client(self, timeout: float):
        spec = self._spec
        try:
            store = dist.TCPStore(spec.addr, spec.port, None, False,
                                  timeout=timedelta(seconds=max(timeout, 0.001)))
        except (RuntimeError, TimeoutError) as exc:
            raise BrokenWorldError(self.name, max(self._generation, 0),
                                   f"cannot reach the world's store at {spec.addr}:{spec.port}"
                                   f" ({summarize(exc)})") from None
        store.set_timeout(timedelta(seconds=self.timeout))
        return store

    def _form(self, deadline: float | None) -> None:
        """Join the generation the store names (or the one after a break) and build it."""
        try:
            self._join(deadline)
        except BrokenWorldError:
            raise
        except (RuntimeError, TimeoutError) as exc:  # a store call: close() dropped it,
            raise storehost.lost(self, max(self._generation, 0), exc) from None  # or its host died

    def _join(self, deadline: float | None) -> None:
        if self._spec.hosts_store and self._server is None:
            storehost.host(self)  # not once closed: see storehost
        if self._store is None:
            self._store = interruptible(self._exiting, self._waits, self._client,
                                        _left(deadline, 300.0))
        store = self._store  # close() may drop self._store meanwhile
        generation = int(self._store_wait(store, protocol.GEN, deadline, 0))
        while True:
            # Never join a generation again once it broke, even if the store does not
            # say so yet (a peer that left publishes nothing): its key space holds the
            # old group's addresses. Wait for the host's word on it instead.
            while generation <= self._broke_at or \
                    protocol.broken_reason(store, generation) is not None:
                decision = self._store_wait(store, protocol.key(generation, "next"),
                                            deadline, generation)
                if decision.startswith(protocol.CLOSED):
                    kind = WorldFinished if protocol.ended(store, generation) else WorldClosed
                    raise kind(self.name, generation, decision[len(protocol.CLOSED):])
                generation += 1
            incarnations = fencing.admitted(store, self.name, generation, self.rank,
                                            self.size, self._incarnation)  # a stale copy ends
            arrivals = protocol.arrival_keys(generation, self.size)
            log.debug("%s: rank %d joins generation %d", self.name, self.rank, generation)
            store.set(arrivals[self.rank], "here")
            self._wait_arrivals(store, arrivals, deadline, generation)
            if protocol.broken_reason(store, generation) is None:
                break
            # It broke before it formed (a member it counted on died meanwhile): that
            # is no end of the world, whose host opens the next one or closes it.
            self._broke_at = max(self._broke_at, generation)
        prefixed = dist.PrefixStore(protocol.pg_prefix(generation, incarnations), store)
        try:
            group = backends.create(self.backend, prefixed, self.rank, self.size, self.timeout,
                                    local_addr=self._local_addr, device=None)
        except RuntimeError as exc:
            reason = f"rank {self.rank} could not connect to its peers: {summarize(exc)}"
            raise BrokenWorldError(self.name, generation, reason) from None
        with self._lock:
            ended = self._waits.ended  # closed (or exiting) while the group formed
            if not ended:
                self._group, self._generation, self._error = group, generation, None
                self._device = group.device
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

    def _store_wait(self, store, key: str, deadline: float | None, generation: int) -> str:
        if not self._wait_keys([key], deadline, generation):
            raise BrokenWorldError(self.name, generation,
                                   f"timed out waiting for the world's store ({key})")
        return protocol.text(store.get(key))

    def _wait_keys(self, keys, deadline, generation) -> bool:
        """Wait until every key exists; False once ``deadline`` has passed. The wait
        has a connection of its own, so that it can be left behind (see interruptible)."""
        def wait() -> None:
            client = self._client(self.timeout)
            while True:
                try:
                    client.wait(keys, timedelta(seconds=min(_left(deadline, 3600.0), 3600.0)))
                    return
                except (RuntimeError, TimeoutError) as exc:
                    if not _is_timeout(exc) or time.monotonic() >= (deadline or float("inf")):
                        raise
        try:
            interruptible(self._exiting, self._waits, wait)
            return True
        except BrokenWorldError:
            raise  # closed (or exiting) meanwhile: said as it is
        except (RuntimeError, TimeoutError) as exc:
            if not _is_timeout(exc):
                raise storehost.lost(self, generation, exc) from None
            return False

    def _exiting(self) -> BrokenWorldError:
        if self._closed:
            return WorldClosed(self.name, max(self._generation, 0), "this member closed it")
        return BrokenWorldError(self.name, max(self._generation, 0), "the process is exiting")

    def _wait_arrivals(self, store, arrivals, deadline, generation) -> None:
        if not self._wait_keys(arrivals, deadline, generation):
            missing = [r for r, k in enumerate(arrivals) if not store.check([k])]
            ranks = ", ".join(map(str, missing))
            raise BrokenWorldError(self.name, generation,
                                   f"rank{'s' * (len(missing) > 1)} {ranks} did not join"
                                   " in time")

    def _give_up(self, error: BrokenWorldError) -> None:
        """Forming failed for good: the world stays broken until a rejoin() succeeds."""
        with self._lock:
            self._error, self._generation = error, error.generation

    # -- breaking --------------------------------------------------------------------------

    def _break(self, generation: int, reason: str, publish: bool,
               left: tuple[int, ...] = (), ended: bool = False) -> BrokenWorldError:
        """``left``: the peers that closed the world; ``ended``: its host closed it as a
        member finished (either way a normal end, not a failure)."""
        kind = WorldEnded if left or ended else BrokenWorldError
        with self._lock:
            if self._generation != generation or self._error is not None:
                return self._error or kind(self.name, generation, reason)
            error = self._error = kind(self.name, generation, reason)
            self._broke_at = generation
            group = self._group
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
        if self._link is not None:
            self._link.world_event(self.name, generation, "broken", reason)
        return error

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
        reason, left = self._agreed_reason(generation, failures.noticed(self.rank, exc))
        return self._break(generation, reason, publish=False, left=left)  # or gone already

    def _agreed_reason(self, generation: int, mine: str) -> tuple[str, tuple[int, ...]]:
        """The reason the world's store records, which ours becomes if it is the first.

        A socket error is only the symptom; the cause (a member killed, a drill) is
        what the store's host or the first member to notice wrote. Under the launcher
        the supervisor writes it within milliseconds of a member's exit, so a failed
        call gives it a moment (error path only, bounded) before writing its own.
        Also returns the ranks that left the world (closed it) rather than failed.
        """
        store = self._store
        if store is None:
            return mine, ()
        try:
            # A break recorded already is the cause; members that left after it (a
            # survivor that saw it and ended) are its consequence.
            found = protocol.broken_reason(store, generation)
            if found is not None:
                return found, ()
            host = protocol.host_left(store, generation)
            if host is not None:
                return storehost.gone(self, generation, host).reason, (host,)
            left = protocol.who_left(store, generation, self.size)
            if left:
                # Not published: another member may still be reading the last words of
                # the one that left, and a published break would abort that read.
                return f"rank {left[0]} left the world (it closed it)", tuple(left)
            if self._link is not None:
                give_up = time.monotonic() + 0.1
                while time.monotonic() < give_up:
                    found = protocol.broken_reason(store, generation)
                    if found is not None:
                        return found, ()
                    time.sleep(0.002)
            return protocol.mark_broken(store, generation, self.size, mine), ()
        except (RuntimeError, TimeoutError) as exc:
            if storehost.by_a_peer(self._spec) and not self._closed:
                return storehost.gone(self, generation, 0, exc).reason, (0,)
            return mine, ()

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
            if self._closed:  # by another thread, maybe (Ctrl-C): WorldClosed
                raise self._exiting()
            if self._over is not None:
                raise self._over
            if self._error is None and self._group is not None:
                return self
            self._retire()
            self._form(deadline)
        return self

    def _stop_watcher(self, generation: int) -> None:
        """End this generation's watcher: it may still sleep (a break that was not
        published, like a peer leaving, wakes no one), so wake it with its own key."""
        watcher, self._watcher = self._watcher, None
        store = self._store
        if watcher is None or not watcher.is_alive():
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
        # Tell the supervisor and the store first: the moment the group's sockets close,
        # peers notice, and their reports must find this member already gone.
        if self._link is not None:
            self._link.world_event(self.name, generation, "closed")
        store = self._store
        if store is not None and generation >= 0:
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


def _left(deadline: float | None, default: float) -> float:
    return default if deadline is None else max(deadline - time.monotonic(), 0.0)


def _is_timeout(exc: BaseException) -> bool:
    return failures.store_timed_out(exc)  # by type: DistNetworkError is a lost store
