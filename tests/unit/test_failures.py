"""Whose fault a failed call is, decided by torch's real exception types; and the nccl
wait, driven with fake works (no GPU here: the real nccl path cannot run)."""

import threading

import pytest
import torch
import torch.distributed as dist

from mwrun.errors import BrokenWorldError
from mwrun.worlds import backends, failures
from mwrun.worlds.failures import ISSUE, ISSUE_P2P, WAIT, is_worlds, store_timed_out
from mwrun.worlds.world import World
from mwrun.worlds.worldspec import WorldSpec

GLOO_CLOSED = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553]"
                           " Connection closed by peer [127.0.0.1]:4242")


@pytest.mark.parametrize("exc, backend, stage, expected", [
    (dist.DistBackendError("NCCL communicator was aborted"), "nccl", WAIT, True),
    (dist.DistBackendError("watchdog caught collective operation timeout"), "nccl", ISSUE,
     True),
    (dist.DistNetworkError("Connection reset by peer"), "gloo", ISSUE, True),
    (dist.DistStoreError("wait timeout after 30000ms"), "nccl", ISSUE, True),
    # the arguments: nccl says so with a ValueError (or a failed check, a RuntimeError)
    (ValueError("Cannot use ReduceOp.BAND with NCCL"), "nccl", ISSUE, False),
    (RuntimeError("Cannot use ReduceOp.BAND with NCCL"), "nccl", ISSUE, False),
    (RuntimeError("Tensors must be CUDA and dense"), "nccl", WAIT, False),
    (torch.OutOfMemoryError("CUDA out of memory"), "nccl", WAIT, False),
    # gloo's transport errors are plain RuntimeErrors: the stage tells them apart
    (GLOO_CLOSED, "gloo", WAIT, True),
    (GLOO_CLOSED, "gloo", ISSUE_P2P, True),
    (RuntimeError("ProcessGroupGloo::allreduce: invalid tensor type"), "gloo", ISSUE, False),
    (NotImplementedError("not for sparse tensors"), "gloo", WAIT, False),
    (TypeError("allreduce(): incompatible function arguments"), "gloo", ISSUE, False),
])
def test_failures_are_classified_by_type_and_stage(exc, backend, stage, expected):
    assert is_worlds(exc, backend, stage) is expected


def test_a_failed_call_says_who_noticed_not_who_died():
    assert failures.noticed(0, GLOO_CLOSED) == (
        "rank 0 lost its connection to a peer (Connection closed by peer [127.0.0.1]:4242)")
    timed_out = RuntimeError("[pair.cc:1] Timed out waiting 30000ms for recv operation")
    assert failures.noticed(1, timed_out) == (
        "rank 1: a call timed out waiting for a peer (the world's timeout)")


def test_a_store_timeout_is_told_from_a_lost_store_by_type():
    assert store_timed_out(dist.DistStoreError("wait timeout after 10ms, keys: /k"))
    assert store_timed_out(TimeoutError())
    assert not store_timed_out(dist.DistNetworkError("Failed to recv, got 0 bytes"))
    assert not store_timed_out(RuntimeError("socket timed out"))  # text is not a type


@pytest.mark.parametrize("op, tensor, backend, message", [
    (dist.ReduceOp.BAND, torch.zeros(2), "gloo", r"ReduceOp.BAND needs an integer or bool"),
    (dist.ReduceOp.BXOR, torch.zeros(2), "nccl", r"ReduceOp.BXOR needs an integer"),
    (dist.ReduceOp.MAX, torch.zeros(2, dtype=torch.complex64), "gloo",
     r"ReduceOp.MAX does not work on complex tensors"),
    (dist._make_nccl_premul_sum(2.0), torch.zeros(2), "gloo", r"PREMUL_SUM works with nccl"),
])
def test_reductions_gloo_would_refuse_mid_call_are_refused_first(op, tensor, backend, message):
    with pytest.raises(ValueError, match=message):
        failures.check_reduce(op, tensor, backend, "w")


@pytest.mark.parametrize("op, dtype", [(dist.ReduceOp.BAND, torch.int32),
                                       (dist.ReduceOp.BOR, torch.bool),
                                       (dist.ReduceOp.SUM, torch.complex64),
                                       (dist.ReduceOp.AVG, torch.float16)])
def test_reductions_that_work_pass(op, dtype):
    failures.check_reduce(op, torch.zeros(2, dtype=dtype), "gloo", "w")


class FakeWork:
    """A work whose wait() records its arguments; done when ``future`` completes."""

    def __init__(self, fail=None):
        self.waits = []
        self.fail = fail
        self.future = torch.futures.Future()

    def wait(self, *args):
        self.waits.append(args)
        if self.fail is not None:
            raise self.fail
        return True

    def get_future(self):
        return self.future

    def is_completed(self):
        return self.future.done()


class FakeGroup:
    def __init__(self, issue_error=None, work=None):
        self.issue_error = issue_error
        self.work = work or FakeWork()

    def allreduce(self, tensors, opts):
        if self.issue_error is not None:
            raise self.issue_error
        return self.work


def nccl_world(group) -> World:
    world = World("w", WorldSpec(rank=0, size=1, backend="nccl"))
    backend = backends.Backend("nccl", group, torch.device("cpu"))  # cpu: for cuda:0
    assert world.membership.state.formed(0, 0, 1, backend, ended=lambda: False)
    return world


def test_an_nccl_wait_is_never_timed():
    work = FakeWork()
    world = nccl_world(FakeGroup(work=work))
    world.all_reduce(torch.ones(1))
    assert work.waits == [()]  # a plain wait: a timed one would abort the communicator


def test_an_nccl_wait_with_a_callers_timeout_waits_on_the_future():
    work = FakeWork()
    world = nccl_world(FakeGroup(work=work))
    pending = world.all_reduce(torch.ones(1), async_op=True)
    with pytest.raises(TimeoutError, match=r"not done after 0\.05s"):
        pending.wait(timeout=0.05)
    assert work.waits == [] and not world.broken  # still pending, world untouched
    threading.Timer(0.05, work.future.set_result, args=(None,)).start()
    assert pending.wait(timeout=10)
    assert work.waits == [()]


def test_an_nccl_argument_error_stays_the_callers():
    for error in (ValueError("Cannot use ReduceOp.BAND with NCCL"),
                  RuntimeError("Cannot use ReduceOp.BAND with NCCL")):
        world = nccl_world(FakeGroup(issue_error=error))
        with pytest.raises(type(error), match="BAND with NCCL"):
            world.all_reduce(torch.ones(1, dtype=torch.int32))
        assert not world.broken


def test_an_nccl_backend_error_breaks_the_world():
    work = FakeWork(fail=dist.DistBackendError("NCCL communicator was aborted on rank 0"))
    world = nccl_world(FakeGroup(work=work))
    with pytest.raises(BrokenWorldError, match="communicator was aborted"):
        world.all_reduce(torch.ones(1))
    assert world.broken
