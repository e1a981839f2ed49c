"""How a call in flight is waited for, by backend.

gloo collectives are waited for in slices: gloo can miss the closing of a connection
when an operation is posted at that very moment, and would then sit out the timeout.
A gloo send/recv is waited for plainly: a timed-out one closes its connection, and the
break's abort ends the wait. nccl calls are never given a timed ``work.wait`` (since
torch 2.6 it aborts the communicator): a caller's timeout is a deadline on the work's
result future instead, and torch's watchdog's judgement of a call breaks its world
(``judged``).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import torch.distributed as dist

from mwrun.worlds import signals

SLICE = timedelta(milliseconds=100)
# torch's WorkResult, the value of an nccl work's get_future_result().
_SUCCESS = 0
_RESULTS = {1: "timed out (past the world's timeout)", 2: "failed (communicator error)"}


class Failed(Exception):
    """The wait failed with ``__cause__``; ``broken``: the world broke meanwhile, so it
    is the world's fault whatever the error says."""

    def __init__(self, broken: bool = False):
        super().__init__()
        self.broken = broken


def wait(work, backend: str, p2p: bool, timeout: float | None, name: str, broken) -> None:
    """Wait for ``work``; TimeoutError after ``timeout`` seconds; Failed when it failed
    (``broken()``: whether the world broke since the call was issued)."""
    if backend == "nccl":
        _wait_nccl(work, timeout, name)
        return
    if p2p:
        try:
            work.wait() if timeout is None else work.wait(timedelta(seconds=timeout))
        except RuntimeError as exc:
            raise Failed() from exc
        return
    deadline = None if timeout is None else time.monotonic() + timeout
    step = SLICE
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
                    raise Failed() from failure
            if broken():
                raise Failed(broken=True) from exc
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{name}: not done after {timeout:g}s") from None


def _result(work):
    """The future that completes when the call is done on the GPU (or judged failed):
    an nccl work's ``get_future()`` completes as soon as the call is queued."""
    future_result = getattr(work, "get_future_result", None)
    return future_result() if future_result is not None else work.get_future()


def _wait_nccl(work, timeout: float | None, name: str) -> None:
    """Never a timed ``work.wait``: it would abort a healthy communicator. A caller's
    timeout is a deadline on the work's result future instead (done once the GPU ran
    the call, or torch's watchdog judged it); a break ends any wait by abort()."""
    if timeout is not None:
        done = threading.Event()
        _result(work).add_done_callback(lambda _: done.set())
        if not done.wait(timeout):
            raise TimeoutError(f"{name}: not done after {timeout:g}s")
    try:
        work.wait()
    except RuntimeError as exc:
        raise Failed() from exc


def judged(work, fail, closed, name: str) -> None:
    """torch's watchdog marks an nccl call's result TIMEOUT once it outlives the world's
    timeout, or COMM_ERROR: ``fail(error)`` breaks the world then, at once (torch would
    clean up only after its flight recorder's wait, and never tell this world), unless
    ``closed()``."""
    future = getattr(work, "get_future_result", None)
    if future is None:  # a torch before 2.6: the world's calls fail when torch aborts
        return

    def judge(result) -> None:
        try:
            value = result.value()
        except Exception as exc:  # a failed future is a failed call
            value = exc
        if value != _SUCCESS and not closed():  # the break runs off torch's thread
            error = dist.DistBackendError(f"the call was judged {_RESULTS.get(value, value)}"
                                          " by torch's watchdog")
            signals.start(threading.Thread(target=fail, args=(error,),
                                           name=f"mwrun-judged-{name}", daemon=True))

    future().add_done_callback(judge)
