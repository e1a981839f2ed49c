"""One member's handle on one world: its calls, its breaks, its re-forming.

The calls mirror ``torch.distributed`` but run on the world's own process group
object (never the default group, never torch's private group registry). A call waits
in the plain ``Work.wait()`` of torch, so it costs what the raw call costs; when the
world breaks, the group's connections are shut down (see backends and gloo_sockets)
so a blocked call fails at once and is raised as ``BrokenWorldError``. How breaks and
generations travel between members is described in ``mwrun.protocol``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from mwrun import backends, protocol
from mwrun.errors import BrokenWorldError, MwrunError
from mwrun.spec import WorldSpec
from mwrun.work import Work

log = logging.getLogger("mwrun")
_FOREVER = timedelta(hours=1)  # a watcher's wait, renewed for as long as the world lives
# Collectives are waited for in slices: gloo can miss the closing of a connection when
# an operation is posted at that very moment, and would then sit out the timeout.
_SLICE = timedelta(milliseconds=100)
_TRANSPORT = re.compile(r"Connection (closed|reset|refused)|pair|Timed out|timed out|"
                        r"Socket|socket|transport|Broken pipe|NCCL", re.IGNORECASE)


class WorldClosed(BrokenWorldError):
    """The world's host decided it will not re-form (a BrokenWorldError all the same)."""


def summarize(exc: BaseException) -> str:
    """gloo's '[/path/pair.cc:553] Connection closed by peer [addr]. This is ...' -> the gist."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    message = re.sub(r"^\[[^\]]*\]\s*", "", message)
    message = message.split(". This is typically")[0]
    if "Application timeout" in message or re.search(r"Timed out waiting \d+ms", message):
        return "a call timed out waiting for a peer (the world's timeout)"
    return message


class World:
    """A world as one of its members uses it. Made by ``mwrun.init``."""

    def __init__(self, name: str, spec: WorldSpec, *, agent=None, local_addr: str | None = None):
        self.name = name
        self.rank = spec.rank
        self.size = spec.size
        self.backend = spec.backend
        self.timeout = spec.timeout
        self._spec = spec
        self._agent = agent
        self._local_addr = local_addr or backends.local_address(spec.addr)
        self._lock = threading.Lock()  # state below changes under it; calls read it bare
        self._rejoin_lock = threading.Lock()
        self._server = None  # the TCPStore server, when this member hosts the store
        self._store = None
        self._generation = -1
        self._group: backends.Backend | None = None
        self._error: BrokenWorldError | None = None
        self._watcher: threading.Thread | None = None
        self._closed = False
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

    def _host(self) -> None:
        spec = self._spec
        try:
            self._server = dist.TCPStore(spec.addr, spec.port, None, True,
                                         timeout=timedelta(seconds=self.timeout),
                                         wait_for_workers=False)
        except RuntimeError as exc:
            raise MwrunError(f"world {self.name!r}: cannot host its store on"
                             f" {spec.addr}:{spec.port}: {summarize(exc)}") from None
        protocol.start(self._server)

    def _form(self, deadline: float | None) -> None:
        """Join the generation the store names (or the one after a break) and build it."""
        if self._spec.hosts_store and self._server is None:
            self._host()
        if self._store is None:
            self._store = self._client(_left(deadline, 300.0))
        store = self._store
        generation = int(self._store_wait(protocol.GEN, deadline, 0))
        while protocol.broken_reason(store, generation) is not None:
            decision = self._store_wait(protocol.key(generation, "next"), deadline, generation)
            if decision.startswith(protocol.CLOSED):
                raise WorldClosed(self.name, generation, decision[len(protocol.CLOSED):])
            generation += 1
        arrivals = protocol.arrival_keys(generation, self.size)
        log.debug("%s: rank %d joins generation %d", self.name, self.rank, generation)
        store.set(arrivals[self.rank], "here")
        self._wait_arrivals(store, arrivals, deadline, generation)
        reason = protocol.broken_reason(store, generation)
        if reason is not None:
            raise BrokenWorldError(self.name, generation, reason)
        prefixed = dist.PrefixStore(protocol.pg_prefix(generation), store)
        try:
            group = backends.create(self.backend, prefixed, self.rank, self.size, self.timeout,
                                    local_addr=self._local_addr, device=None)
        except RuntimeError as exc:
            reason = f"rank {self.rank} could not connect to its peers: {summarize(exc)}"
            raise BrokenWorldError(self.name, generation, reason) from None
        with self._lock:
            self._group, self._generation, self._error = group, generation, None
            self._device = group.device
        log.debug("%s: generation %d formed (rank %d of %d)", self.name, generation, self.rank,
                  self.size)
        self._watcher = threading.Thread(target=self._watch, args=(generation,),
                                         name=f"mwrun-watch-{self.name}", daemon=True)
        self._watcher.start()
        if self._agent is not None:
            self._agent.world_event(self.name, generation, "ready")

    def _store_wait(self, key: str, deadline: float | None, generation: int) -> str:
        while True:
            step = min(_left(deadline, 3600.0), 3600.0)
            try:
                return protocol.wait_value(self._store, key, step)
            except (RuntimeError, TimeoutError) as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    raise BrokenWorldError(self.name, generation,
                                           f"timed out waiting for the world's store ({key})"
                                           ) from None
                if not _is_timeout(exc):
                    raise BrokenWorldError(self.name, generation,
                                           f"lost the world's store: {summarize(exc)}") from None

    def _wait_arrivals(self, store, arrivals, deadline, generation) -> None:
        try:
            store.wait(arrivals, timedelta(seconds=max(_left(deadline, 1e6), 0.001)))
        except (RuntimeError, TimeoutError) as exc:
            if not _is_timeout(exc):
                raise BrokenWorldError(self.name, generation,
                                       f"lost the world's store: {summarize(exc)}") from None
            missing = [r for r, k in enumerate(arrivals) if not store.check([k])]
            ranks = ", ".join(map(str, missing))
            raise BrokenWorldError(self.name, generation,
                                   f"rank(s) {ranks} did not join in time") from None

    def _give_up(self, error: BrokenWorldError) -> None:
        """Forming failed for good: the world stays broken until a rejoin() succeeds."""
        with self._lock:
            self._error, self._generation = error, error.generation

    # -- breaking --------------------------------------------------------------------------

    def _watch(self, generation: int) -> None:
        """One thread per world: sleeps in the store until this generation ends."""
        wake = protocol.wake_key(generation, self.rank)
        try:
            client = self._client(self.timeout)
            while True:
                try:
                    client.wait([wake], _FOREVER)
                    break
                except (RuntimeError, TimeoutError) as exc:
                    if not _is_timeout(exc):
                        raise
            if protocol.text(client.get(wake)) == "close":
                return
            reason = protocol.broken_reason(client, generation) or "marked broken"
        except (RuntimeError, TimeoutError, BrokenWorldError):
            if self._closed:
                return
            reason = (f"lost the world's store at {self._spec.addr}:{self._spec.port}"
                      " (its host has gone)")
            self._store = None  # reconnect on rejoin
        self._break(generation, reason, publish=False)

    def _break(self, generation: int, reason: str, publish: bool) -> BrokenWorldError:
        with self._lock:
            if self._generation != generation or self._error is not None:
                return self._error or BrokenWorldError(self.name, generation, reason)
            error = self._error = BrokenWorldError(self.name, generation, reason)
            group = self._group
        if group is not None:
            group.abort()  # every blocked call of this world, in any thread, fails now
        log.debug("%s: generation %d broke: %s", self.name, generation, reason)
        store = self._store
        if publish and store is not None:
            # If the store is gone too, peers learn from their own sockets.
            with contextlib.suppress(RuntimeError, TimeoutError):
                protocol.mark_broken(store, generation, self.size, reason)
        if self._server is not None:  # by hand, the host lets the next generation form
            with contextlib.suppress(RuntimeError, TimeoutError):
                protocol.open_next(self._server, generation)
        if self._agent is not None:
            self._agent.world_event(self.name, generation, "broken", reason)
        return error

    def _failed(self, generation: int, exc: BaseException) -> BrokenWorldError:
        """A call of ``generation`` failed in the backend: the world is broken."""
        error = self._error
        if error is not None and error.generation == generation:
            return error
        if generation != self._generation:  # a call from before a rejoin
            return BrokenWorldError(self.name, generation, "an earlier generation's call")
        reason = self._agreed_reason(generation, f"rank {self.rank}: {summarize(exc)}")
        return self._break(generation, reason, publish=False)

    def _agreed_reason(self, generation: int, mine: str) -> str:
        """The reason the world's store records, which ours becomes if it is the first.

        A socket error is only the symptom; the cause (a member killed, a drill) is
        what the store's host or the first member to notice wrote. Under the launcher
        the supervisor writes it within milliseconds of a member's exit, so a failed
        call gives it a moment (error path only, bounded) before writing its own.
        """
        store = self._store
        if store is None:
            return mine
        try:
            left = protocol.who_left(store, generation, self.size)
            if left:
                # Not published: another member may still be reading the last words of
                # the one that left, and a published break would abort that read.
                return f"rank {left[0]} left the world (it closed it)"
            if self._agent is not None:
                give_up = time.monotonic() + 0.1
                while time.monotonic() < give_up:
                    found = protocol.broken_reason(store, generation)
                    if found is not None:
                        return found
                    time.sleep(0.01)
            return protocol.mark_broken(store, generation, self.size, mine)
        except (RuntimeError, TimeoutError):
            return mine

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
        world will not re-form (its host closed it) or ``timeout`` seconds pass.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._rejoin_lock:
            if self._closed:
                raise MwrunError(f"world {self.name!r} is closed")
            if self._error is None and self._group is not None:
                return self
            self._retire()
            self._form(deadline)
        return self

    def _retire(self) -> None:
        """Let go of a broken generation: its watcher, its group, its sockets."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.join(timeout=self.timeout)
        with self._lock:
            group, self._group = self._group, None
        if group is not None:
            group.abort()
            _release(group)

    def close(self) -> None:
        """Leave the world. Other members see it break if they still call on it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            group, self._group = self._group, None
            generation = self._generation
        store, watcher = self._store, self._watcher
        if store is not None and generation >= 0:
            with contextlib.suppress(RuntimeError, TimeoutError):
                protocol.leave(store, generation, self.rank)
        if watcher is not None and store is not None and watcher.is_alive():
            with contextlib.suppress(RuntimeError, TimeoutError):
                store.set(protocol.wake_key(generation, self.rank), "close")
            watcher.join(timeout=5)
        if group is not None:
            _release(group)
        self._store = self._server = self._watcher = None
        if self._agent is not None:
            self._agent.world_event(self.name, generation, "closed")

    # -- calls -----------------------------------------------------------------------------

    def _run(self, issue, async_op: bool):
        """Issue a collective on the live group and wait for it (or hand back a Work)."""
        group = self._live()
        generation = self._generation
        try:
            work = issue(group.group)
        except RuntimeError as exc:
            if self._error is not None or _TRANSPORT.search(str(exc)):
                raise self._failed(generation, exc) from None
            raise  # the arguments: torch said why
        if async_op:
            return Work(self, work, generation, False)
        self._wait(work, generation, False)
        return None

    def _wait(self, work, generation: int, p2p: bool, timeout: float | None = None) -> None:
        """Wait for a call of ``generation``; BrokenWorldError if the world broke."""
        if p2p:
            # A timed-out gloo send/recv closes its connection, so no slicing here: the
            # break's abort ends the wait (or, rarely, the world's timeout does).
            try:
                work.wait() if timeout is None else work.wait(timedelta(seconds=timeout))
            except RuntimeError as exc:
                raise self._failed(generation, exc) from None
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        step = _SLICE
        while True:
            if deadline is not None:
                step = timedelta(seconds=min(0.1, max(deadline - time.monotonic(), 0.0)))
            try:
                work.wait(step)
                return
            except RuntimeError as exc:
                if work.is_completed():  # done after all, or failed for real
                    try:
                        work.wait()
                        return
                    except RuntimeError as failure:
                        raise self._failed(generation, failure) from None
                error = self._error
                if error is not None or generation != self._generation:
                    raise self._failed(generation, exc) from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"{self.name}: not done after {timeout:g}s") from None

    def _tensor(self, tensor, what: str = "tensor") -> None:
        if not isinstance(tensor, torch.Tensor):
            kind = type(tensor).__name__
            raise TypeError(f"{self.name}: {what} must be a torch.Tensor, not {kind}")
        if tensor.device != self._device:
            raise ValueError(f"{self.name}: {what} is on {tensor.device}, but this world's"
                             f" backend {self.backend} works on {self._device}")
        if not tensor.is_contiguous():
            raise ValueError(f"{self.name}: {what} must be contiguous (call .contiguous())")

    def _rank(self, rank, what: str, peer: bool = False) -> int:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.size:
            raise ValueError(f"{self.name}: {what} must be a rank in 0..{self.size - 1},"
                             f" not {rank!r}")
        if peer and rank == self.rank:
            raise ValueError(f"{self.name}: {what} {rank} is this process's own rank")
        return rank

    def _list(self, tensors, like, what: str) -> list:
        if not isinstance(tensors, list | tuple) or len(tensors) != self.size:
            count = len(tensors) if isinstance(tensors, list | tuple) else type(tensors).__name__
            raise ValueError(f"{self.name}: {what} must be a list of {self.size} tensors"
                             f" (one per rank), not {count}")
        for i, t in enumerate(tensors):
            self._tensor(t, f"{what}[{i}]")
            if t.shape != like.shape or t.dtype != like.dtype:
                raise ValueError(f"{self.name}: {what}[{i}] is {t.dtype} {tuple(t.shape)}, the"
                                 f" tensor is {like.dtype} {tuple(like.shape)}")
        return list(tensors)

    # send and recv skip _run's generic path: on a latency-bound round trip, every
    # microsecond of Python per call shows (four calls sit on its critical path).

    def send(self, tensor, dst: int, async_op: bool = False):
        self._tensor(tensor)
        self._rank(dst, "dst", peer=True)
        return self._point(self._live().group.send, tensor, dst, async_op)

    def recv(self, tensor, src: int, async_op: bool = False):
        self._tensor(tensor)
        self._rank(src, "src", peer=True)
        return self._point(self._live().group.recv, tensor, src, async_op)

    def _point(self, issue, tensor, peer: int, async_op: bool):
        generation = self._generation
        try:
            work = issue([tensor], peer, 0)
        except RuntimeError as exc:
            if self._error is not None or _TRANSPORT.search(str(exc)):
                raise self._failed(generation, exc) from None
            raise
        if async_op:
            return Work(self, work, generation, True)
        try:
            work.wait()  # see _wait: no slicing for point-to-point calls
        except RuntimeError as exc:
            raise self._failed(generation, exc) from None
        return None

    def isend(self, tensor, dst: int) -> Work:
        return self.send(tensor, dst, async_op=True)

    def irecv(self, tensor, src: int) -> Work:
        return self.recv(tensor, src, async_op=True)

    def broadcast(self, tensor, src: int, async_op: bool = False):
        self._tensor(tensor)
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = self._rank(src, "src"), 0
        return self._run(lambda g: g.broadcast([tensor], opts), async_op)

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, async_op: bool = False):
        self._tensor(tensor)
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        return self._run(lambda g: g.allreduce([tensor], opts), async_op)

    def reduce(self, tensor, dst: int, op=dist.ReduceOp.SUM, async_op: bool = False):
        self._tensor(tensor)
        opts = dist.ReduceOptions()
        opts.reduceOp, opts.rootRank, opts.rootTensor = op, self._rank(dst, "dst"), 0
        return self._run(lambda g: g.reduce([tensor], opts), async_op)

    def all_gather(self, tensor_list, tensor, async_op: bool = False):
        self._tensor(tensor)
        outputs = self._list(tensor_list, tensor, "tensor_list")
        return self._run(lambda g: g.allgather([outputs], [tensor]), async_op)

    def gather(self, tensor, gather_list=None, dst: int = 0, async_op: bool = False):
        self._tensor(tensor)
        dst = self._rank(dst, "dst")
        opts = dist.GatherOptions()
        opts.rootRank = dst
        if self.rank == dst:
            outputs = [self._list(gather_list, tensor, "gather_list")]
        elif gather_list:
            raise ValueError(f"{self.name}: only rank {dst} (dst) takes a gather_list")
        else:
            outputs = []
        return self._run(lambda g: g.gather(outputs, [tensor], opts), async_op)

    def scatter(self, tensor, scatter_list=None, src: int = 0, async_op: bool = False):
        self._tensor(tensor)
        src = self._rank(src, "src")
        opts = dist.ScatterOptions()
        opts.rootRank = src
        if self.rank == src:
            inputs = [self._list(scatter_list, tensor, "scatter_list")]
        elif scatter_list:
            raise ValueError(f"{self.name}: only rank {src} (src) takes a scatter_list")
        else:
            inputs = []
        return self._run(lambda g: g.scatter([tensor], inputs, opts), async_op)

    def barrier(self, async_op: bool = False):
        return self._run(lambda g: g.barrier(dist.BarrierOptions()), async_op)


def _release(group: backends.Backend) -> None:
    """Drop a generation's group without waiting for it.

    Destroying a gloo group joins its worker threads, and a worker can be stuck for up
    to the world's timeout in an operation gloo failed to abort; a short-lived thread
    takes that wait so that rejoin() and close() never do.
    """
    reaper = threading.Thread(target=group.release, name="mwrun-release", daemon=True)
    reaper.start()
    reaper.join(timeout=0.5)


def _left(deadline: float | None, default: float) -> float:
    return default if deadline is None else max(deadline - time.monotonic(), 0.0)


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or "timeout" in str(exc).lower() \
        or "timed out" in str(exc).lower()
