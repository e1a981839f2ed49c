"""The calls of a world: torch.distributed's, on the world's own process group.

Never the default group, never torch's private group registry. A call waits in the
plain ``Work.wait()`` of torch, so it costs what the raw call costs; when the world
breaks, the group's connections are shut down (see backends and gloo_abort) so a
blocked call fails at once and is raised as ``BrokenWorldError``. Arguments are
checked before anything is sent (arguments.py). Every completed call is counted
(traffic.py). How a call is waited for is completion.py's.
"""

from __future__ import annotations

import time
from threading import get_ident

import torch.distributed as dist

from mwrun.worlds import arguments, completion, failures
from mwrun.worlds.inflight import CALLS
from mwrun.worlds.lateness import Late
from mwrun.worlds.traffic import Traffic
from mwrun.worlds.work import Work


class Calls:
    """The calls on the group of the generation ``membership`` holds (membership.py);
    a call that fails breaks that generation (``membership.failed``)."""

    def __init__(self, name: str, backend: str, membership, traffic: Traffic):
        self.name, self.backend = name, backend
        self._state = membership.state  # read bare on every call
        self._membership = membership
        self._traffic = traffic
        self.late: Late | None = None  # a drill's slow member (lateness.py)

    def be_late(self, delay: float, hold: float) -> None:
        """Come ``delay`` seconds late to every call for the next ``hold`` seconds."""
        self.late = Late(delay, hold)

    def _arrive(self) -> None:
        late = self.late
        if late is not None and not late.arrive() and self.late is late:
            self.late = None  # over, unless a newer order came meanwhile

    def _failed(self, generation: int, exc: BaseException):
        """A call of ``generation`` failed in the backend: counted, and the world is
        broken (the error that stands is returned, to be raised)."""
        self._traffic.failed()
        return self._membership.failed(generation, exc)

    def _run(self, issue, async_op: bool, nbytes: int, call: str):
        """Issue a collective on the live group and wait for it (or hand back a Work);
        the thread is in ``call`` until then (inflight.py: what a stacks dump says)."""
        if self.late is not None:  # before its wait is timed: it arrives late
            self._arrive()
        ident = get_ident()
        started = time.monotonic()
        CALLS[ident] = (self.name, call, started)
        try:
            return self._issue(issue, async_op, nbytes, started, call)
        finally:
            CALLS.pop(ident, None)

    def _issue(self, issue, async_op: bool, nbytes: int, started: float, call: str):
        state = self._state
        group = state.live()
        generation = state.generation
        try:
            work = issue(group.group)
        except RuntimeError as exc:
            if self._fault(exc, generation, failures.ISSUE):
                raise self._failed(generation, exc) from None
            raise  # the arguments: torch said why
        if self.backend == "nccl":
            completion.judged(work, lambda exc: self._failed(generation, exc),
                              lambda: state.closed, self.name)
        if async_op:
            return Work(self, work, generation, False, nbytes, CALLS.get(get_ident()))
        self.wait(work, generation, False)
        self._traffic.timed(nbytes, generation, started, call)  # its wait: see traffic.py
        return None

    def wait(self, work, generation: int, p2p: bool, timeout: float | None = None) -> None:
        """Wait for a call of ``generation``; BrokenWorldError if the world broke."""
        try:
            completion.wait(work, self.backend, p2p, timeout, self.name,
                            lambda: self._state.error is not None
                            or generation != self._state.generation)
        except completion.Failed as failed:
            exc = failed.__cause__
            assert exc is not None  # completion.wait raises Failed from the wait's error
            if failed.broken or self._fault(exc, generation, failures.WAIT):
                raise self._failed(generation, exc) from None
            raise exc from None

    def count(self, nbytes: int, generation: int) -> None:
        """An async call of ``generation`` was waited for: it completed."""
        self._traffic.count(nbytes, generation)

    def _fault(self, exc: BaseException, generation: int, stage: str) -> bool:
        """Whether ``exc`` breaks the world (see failures.py), or is the caller's."""
        state = self._state
        return state.error is not None or generation != state.generation or \
            failures.is_worlds(exc, self.backend, stage)

    def _tensor(self, tensor, what: str = "tensor") -> None:
        arguments.tensor(self.name, tensor, self._state.device, self.backend, what)

    def _list(self, tensors, like, what: str) -> list:
        return arguments.tensors(self.name, tensors, like, self._state.size,
                                 self._state.device, self.backend, what)

    def _rank(self, rank, what: str, peer: bool = False) -> int:
        state = self._state
        return arguments.rank(self.name, rank, state.size, what, state.rank if peer else None)

    # send and recv skip _run's generic path: on a latency-bound round trip, every
    # microsecond of Python per call shows (four calls sit on its critical path).

    def send(self, tensor, dst: int, async_op: bool = False):
        self._tensor(tensor)
        self._rank(dst, "dst", peer=True)
        return self._point(self._state.live().group.send, tensor, dst, async_op, "send")

    def recv(self, tensor, src: int, async_op: bool = False):
        self._tensor(tensor)
        self._rank(src, "src", peer=True)
        return self._point(self._state.live().group.recv, tensor, src, async_op, "recv")

    def _point(self, issue, tensor, peer: int, async_op: bool, call: str):
        if self.late is not None:
            self._arrive()
        state = self._state
        generation = state.generation
        ident = get_ident()  # inline, not a wrapper: a frame more per call would show
        started = time.monotonic()
        CALLS[ident] = (self.name, call, started)
        try:
            try:
                work = issue([tensor], peer, 0)
            except RuntimeError as exc:
                if self._fault(exc, generation, failures.ISSUE_P2P):
                    raise self._failed(generation, exc) from None
                raise
            if self.backend == "nccl":
                completion.judged(work, lambda exc: self._failed(generation, exc),
                                  lambda: state.closed, self.name)
            if async_op:
                return Work(self, work, generation, True, tensor.nbytes, CALLS[ident])
            try:
                work.wait()  # see completion.wait: no slicing for point-to-point calls
            except RuntimeError as exc:
                if self._fault(exc, generation, failures.WAIT):
                    raise self._failed(generation, exc) from None
                raise
            self._traffic.answered(tensor.nbytes, generation, started, call)
            return None
        finally:
            CALLS.pop(ident, None)

    def broadcast(self, tensor, src: int, async_op: bool = False):
        self._tensor(tensor)
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = self._rank(src, "src"), 0
        return self._run(lambda g: g.broadcast([tensor], opts), async_op, tensor.nbytes,
                         "broadcast")

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, async_op: bool = False):
        self._tensor(tensor)
        failures.check_reduce(op, tensor, self.backend, self.name)
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        return self._run(lambda g: g.allreduce([tensor], opts), async_op, tensor.nbytes,
                         "all_reduce")

    def reduce(self, tensor, dst: int, op=dist.ReduceOp.SUM, async_op: bool = False):
        self._tensor(tensor)
        failures.check_reduce(op, tensor, self.backend, self.name)
        opts = dist.ReduceOptions()
        opts.reduceOp, opts.rootRank, opts.rootTensor = op, self._rank(dst, "dst"), 0
        return self._run(lambda g: g.reduce([tensor], opts), async_op, tensor.nbytes,
                         "reduce")

    def all_gather(self, tensor_list, tensor, async_op: bool = False):
        self._tensor(tensor)
        outputs = self._list(tensor_list, tensor, "tensor_list")
        return self._run(lambda g: g.allgather([outputs], [tensor]), async_op, tensor.nbytes,
                         "all_gather")

    def gather(self, tensor, gather_list=None, dst: int = 0, async_op: bool = False):
        self._tensor(tensor)
        dst = self._rank(dst, "dst")
        opts = dist.GatherOptions()
        opts.rootRank = dst
        if self._state.rank == dst:
            outputs = [self._list(gather_list, tensor, "gather_list")]
        elif gather_list:
            raise ValueError(f"{self.name}: only rank {dst} (dst) takes a gather_list")
        else:
            outputs = []
        return self._run(lambda g: g.gather(outputs, [tensor], opts), async_op, tensor.nbytes,
                         "gather")

    def scatter(self, tensor, scatter_list=None, src: int = 0, async_op: bool = False):
        self._tensor(tensor)
        src = self._rank(src, "src")
        opts = dist.ScatterOptions()
        opts.rootRank = src
        if self._state.rank == src:
            inputs = [self._list(scatter_list, tensor, "scatter_list")]
        elif scatter_list:
            raise ValueError(f"{self.name}: only rank {src} (src) takes a scatter_list")
        else:
            inputs = []
        return self._run(lambda g: g.scatter([tensor], inputs, opts), async_op, tensor.nbytes,
                         "scatter")

    def barrier(self, async_op: bool = False):
        return self._run(lambda g: g.barrier(dist.BarrierOptions()), async_op, 0, "barrier")
