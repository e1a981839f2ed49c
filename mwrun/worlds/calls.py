"""The calls of a world: torch.distributed's, on the world's own process group.

Never the default group, never torch's private group registry. A call waits in the
plain ``Work.wait()`` of torch, so it costs what the raw call costs; when the world
breaks, the group's connections are shut down (see backends and gloo_abort) so a
blocked call fails at once and is raised as ``BrokenWorldError``. Arguments are
checked before anything is sent.

Every completed call is counted (calls, bytes of the tensor it carried, the moment it
completed) in plain attributes of the world, without a lock: the heartbeat thread only
reads them, and two threads calling on one world at the same instant may, rarely, lose
one count, which a rate shown to people can afford (a lock per call could not).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from time import monotonic

import torch
import torch.distributed as dist

from mwrun.worlds import failures, signals
from mwrun.worlds.work import Work

# gloo collectives are waited for in slices: gloo can miss the closing of a connection
# when an operation is posted at that very moment, and would then sit out the timeout.
# Never nccl's: a timed wait on a NCCL work aborts the communicator (torch >= 2.6).
_SLICE = timedelta(milliseconds=100)
# torch's WorkResult, the value of an nccl work's get_future_result().
_SUCCESS = 0
_RESULTS = {1: "timed out (past the world's timeout)", 2: "failed (communicator error)"}


def _result(work):
    """The future that completes when the call is done on the GPU (or judged failed):
    an nccl work's ``get_future()`` completes as soon as the call is queued."""
    future_result = getattr(work, "get_future_result", None)
    return future_result() if future_result is not None else work.get_future()


class Calls:
    """Mixed into World, which provides _live, _failed, _error, _generation, _device,
    _closed."""

    def _run(self, issue, async_op: bool, nbytes: int = 0):
        """Issue a collective on the live group and wait for it (or hand back a Work)."""
        group = self._live()
        generation = self._generation
        try:
            work = issue(group.group)
        except RuntimeError as exc:
            if self._worlds_fault(exc, generation, failures.ISSUE):
                raise self._failed(generation, exc) from None
            raise  # the arguments: torch said why
        if self.backend == "nccl":
            self._judged(work, generation)
        if async_op:
            return Work(self, work, generation, False, nbytes)
        self._wait(work, generation, False)
        self._count(nbytes, generation)
        return None

    def _wait(self, work, generation: int, p2p: bool, timeout: float | None = None) -> None:
        """Wait for a call of ``generation``; BrokenWorldError if the world broke."""
        if self.backend == "nccl":
            self._wait_nccl(work, generation, timeout)
            return
        if p2p:
            # A timed-out gloo send/recv closes its connection, so no slicing here: the
            # break's abort ends the wait (or, rarely, the world's timeout does).
            try:
                work.wait() if timeout is None else work.wait(timedelta(seconds=timeout))
            except RuntimeError as exc:
                if self._worlds_fault(exc, generation, failures.WAIT):
                    raise self._failed(generation, exc) from None
                raise
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
                        if self._worlds_fault(failure, generation, failures.WAIT):
                            raise self._failed(generation, failure) from None
                        raise
                error = self._error
                if error is not None or generation != self._generation:
                    raise self._failed(generation, exc) from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"{self.name}: not done after {timeout:g}s") from None

    def _count(self, nbytes: int, generation: int) -> None:
        """A call of ``generation`` completed (async ones, once their Work was waited
        for); the first of each generation is timed on the wall clock, for the
        supervisor's phases of a fault (the heartbeat's ``first_calls``)."""
        self._calls += 1
        self._bytes += nbytes
        self._last_call = monotonic()
        if self._first_call[0] < generation:
            self._first_call = (generation, time.time())

    def _first(self) -> tuple[int, float] | None:
        """(generation, wall-clock time) of this generation's first completed call, once
        there is one (the latest generation's only)."""
        first = self._first_call
        return first if first[0] >= 0 else None

    def _traffic(self) -> tuple[int, int, int, float | None]:
        """(calls, bytes, failures, seconds since the last completed call) so far, for
        the heartbeat: counts since this process joined, across generations."""
        last = self._last_call
        return self._calls, self._bytes, self._failures, \
            (monotonic() - last if last else None)

    def _wait_nccl(self, work, generation: int, timeout: float | None) -> None:
        """Never a timed ``work.wait``: it would abort a healthy communicator. A caller's
        timeout is a deadline on the work's result future instead (done once the GPU
        ran the call, or torch's watchdog judged it); a break ends any wait by abort()."""
        if timeout is not None:
            done = threading.Event()
            _result(work).add_done_callback(lambda _: done.set())
            if not done.wait(timeout):
                raise TimeoutError(f"{self.name}: not done after {timeout:g}s")
        try:
            work.wait()
        except RuntimeError as exc:
            if self._worlds_fault(exc, generation, failures.WAIT):
                raise self._failed(generation, exc) from None
            raise

    def _judged(self, work, generation: int) -> None:
        """torch's watchdog marks an nccl call's result TIMEOUT once it outlives the
        world's timeout, or COMM_ERROR: the world breaks then, at once (torch would
        clean up only after its flight recorder's wait, and never tell this world)."""
        future = getattr(work, "get_future_result", None)
        if future is None:  # a torch before 2.6: the world's calls fail when torch aborts
            return

        def judged(result) -> None:
            try:
                value = result.value()
            except Exception as exc:  # a failed future is a failed call
                value = exc
            if value != _SUCCESS and not self._closed:  # the break runs off torch's thread
                error = dist.DistBackendError(f"the call was judged {_RESULTS.get(value, value)}"
                                              " by torch's watchdog")
                signals.start(threading.Thread(target=self._failed, args=(generation, error),
                                               name=f"mwrun-judged-{self.name}", daemon=True))

        future().add_done_callback(judged)

    def _worlds_fault(self, exc: BaseException, generation: int, stage: str) -> bool:
        """Whether ``exc`` breaks the world (see failures.py), or is the caller's."""
        return self._error is not None or generation != self._generation or \
            failures.is_worlds(exc, self.backend, stage)

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
        if type(rank) is int and 0 <= rank < self.size and not (peer and rank == self.rank):
            return rank
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
            if self._worlds_fault(exc, generation, failures.ISSUE_P2P):
                raise self._failed(generation, exc) from None
            raise
        if self.backend == "nccl":
            self._judged(work, generation)
        if async_op:
            return Work(self, work, generation, True, tensor.nbytes)
        try:
            work.wait()  # see _wait: no slicing for point-to-point calls
        except RuntimeError as exc:
            if self._worlds_fault(exc, generation, failures.WAIT):
                raise self._failed(generation, exc) from None
            raise
        self._count(tensor.nbytes, generation)
        return None

    def isend(self, tensor, dst: int) -> Work:
        return self.send(tensor, dst, async_op=True)

    def irecv(self, tensor, src: int) -> Work:
        return self.recv(tensor, src, async_op=True)

    def broadcast(self, tensor, src: int, async_op: bool = False):
        self._tensor(tensor)
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = self._rank(src, "src"), 0
        return self._run(lambda g: g.broadcast([tensor], opts), async_op, tensor.nbytes)

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, async_op: bool = False):
        self._tensor(tensor)
        failures.check_reduce(op, tensor, self.backend, self.name)
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        return self._run(lambda g: g.allreduce([tensor], opts), async_op, tensor.nbytes)

    def reduce(self, tensor, dst: int, op=dist.ReduceOp.SUM, async_op: bool = False):
        self._tensor(tensor)
        failures.check_reduce(op, tensor, self.backend, self.name)
        opts = dist.ReduceOptions()
        opts.reduceOp, opts.rootRank, opts.rootTensor = op, self._rank(dst, "dst"), 0
        return self._run(lambda g: g.reduce([tensor], opts), async_op, tensor.nbytes)

    def all_gather(self, tensor_list, tensor, async_op: bool = False):
        self._tensor(tensor)
        outputs = self._list(tensor_list, tensor, "tensor_list")
        return self._run(lambda g: g.allgather([outputs], [tensor]), async_op, tensor.nbytes)

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
        return self._run(lambda g: g.gather(outputs, [tensor], opts), async_op, tensor.nbytes)

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
        return self._run(lambda g: g.scatter([tensor], inputs, opts), async_op, tensor.nbytes)

    def barrier(self, async_op: bool = False):
        return self._run(lambda g: g.barrier(dist.BarrierOptions()), async_op)
