"""Wrong arguments are refused before anything is sent; gloo's abort, in one process."""

import inspect
import sys
import threading

import pytest
import torch
import torch.distributed as dist

from mwrun.errors import MwrunError
from mwrun.worlds import backends
from mwrun.worlds.world import World
from mwrun.worlds.worldspec import WorldSpec
from tests.helpers import free_port, store_server
from tests.integration.jobs import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def unformed():
    return World("w", WorldSpec(rank=1, size=3))


@pytest.mark.parametrize("call, message", [
    (lambda w: w.send(torch.zeros(1), 1), "dst 1 is this process's own rank"),
    (lambda w: w.send(torch.zeros(1), 3), r"dst must be a rank in 0..2, not 3"),
    (lambda w: w.recv(torch.zeros(1), -1), "src must be a rank in 0..2"),
    (lambda w: w.recv(torch.zeros(1), True), "src must be a rank"),
    (lambda w: w.broadcast(torch.zeros(1), 5), "src must be a rank"),
    (lambda w: w.reduce(torch.zeros(1), "0"), "dst must be a rank"),
    (lambda w: w.all_gather([torch.zeros(1)] * 2, torch.zeros(1)),
     "tensor_list must be a list of 3 tensors"),
    (lambda w: w.all_gather([torch.zeros(1), torch.zeros(2), torch.zeros(1)], torch.zeros(1)),
     r"tensor_list\[1\] is torch.float32 \(2,\), the tensor is torch.float32 \(1,\)"),
    (lambda w: w.all_gather([torch.zeros(1, dtype=torch.int64)] * 3, torch.zeros(1)),
     r"tensor_list\[0\] is torch.int64"),
    (lambda w: w.gather(torch.zeros(1), [torch.zeros(1)] * 3, dst=0),
     "only rank 0 \\(dst\\) takes a gather_list"),
    (lambda w: w.gather(torch.zeros(1), None, dst=1), "gather_list must be a list of 3"),
    (lambda w: w.scatter(torch.zeros(1), [torch.zeros(1)] * 3, src=2),
     "only rank 2 \\(src\\) takes a scatter_list"),
    (lambda w: w.all_reduce(torch.zeros(4)[::2]), "must be contiguous"),
    (lambda w: w.all_reduce(torch.zeros(1, device="meta")), "is on meta, but this world"),
])
def test_bad_arguments_raise_value_error_first(unformed, call, message):
    with pytest.raises(ValueError, match=message):
        call(unformed)


def test_not_a_tensor(unformed):
    with pytest.raises(TypeError, match=r"tensor must be a torch\.Tensor, not list"):
        unformed.all_reduce([1.0])


def test_good_arguments_reach_the_world_state(unformed):
    with pytest.raises(MwrunError, match="world 'w' has not formed"):
        unformed.all_reduce(torch.zeros(1))


def gloo_pair(timeout=30.0):
    """Two real gloo groups (ranks 0 and 1) built by mwrun, over a real store."""
    server, port = store_server()
    groups = {}

    def build(rank):
        store = dist.PrefixStore("t/", dist.TCPStore("127.0.0.1", port, None, False))
        groups[rank] = backends.gloo(store, rank, 2, timeout, "127.0.0.1")

    threads = [threading.Thread(target=build, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return server, groups


def recv_then(group, abort) -> dict:
    """Block a recv on ``group`` (rank 0), call ``abort()``; how the recv ended."""
    outcome = {}

    def receive():
        try:
            group.recv([torch.zeros(1)], 1, 0).wait()  # nothing is ever sent: it blocks
            outcome["error"] = None
        except RuntimeError as exc:
            outcome["error"] = str(exc)

    receiver = threading.Thread(target=receive)
    receiver.start()
    # The recv must be blocked before the abort, or nothing is proven: the thread is
    # seen asleep in the kernel inside the call, twice in a row.
    source, first = inspect.getsourcelines(receive)
    line = first + next(i for i, text in enumerate(source) if "group.recv(" in text)
    seen: list[bool] = []

    def blocked() -> bool:
        seen.append(asleep_in(receiver, receive.__code__, line))
        return seen[-2:] == [True, True]

    wait_for(blocked, timeout=20, what="the recv to block")
    abort()
    receiver.join(timeout=30)
    assert not receiver.is_alive()
    return outcome


def asleep_in(thread: threading.Thread, code, line: int) -> bool:
    """Whether ``thread`` sleeps in the kernel within a call made on ``line`` of ``code``
    (the innermost Python frame: what it called is C)."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None or frame.f_code is not code or frame.f_lineno != line:
        return False
    with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] == "S"


def test_gloo_abort_fails_a_blocked_recv_at_once():
    server, groups = gloo_pair()
    outcome = recv_then(groups[0].group, groups[0].abort)
    # at once: closed by the abort, not timed out by the world's 30 s timeout
    assert outcome["error"] and "Connection closed" in outcome["error"]
    for g in groups.values():
        g.release()
    del server


@pytest.mark.parametrize("method", ["abort", "shutdown"])
def test_torchs_own_gloo_abort_works_only_where_mwrun_relies_on_it(method):
    # mwrun prefers ProcessGroupGloo.abort() where it unblocks a blocked call; this
    # checks its belief (backends.GLOO_ABORT_WORKS_SINCE) against the installed torch.
    server, groups = gloo_pair(timeout=3.0)
    torch_group = groups[0].group
    outcome = recv_then(torch_group, getattr(torch_group, method))
    assert outcome["error"] is not None
    unblocked = "Timed out" not in outcome["error"]  # by the abort, not the 3 s timeout
    assert unblocked == backends.native_gloo_abort_works(), (torch.__version__, outcome)
    for g in groups.values():
        g.release()
    del server


def test_with_no_way_to_abort_gloo_one_warning_is_logged(monkeypatch, caplog):
    # As where gloo's loop cannot be told apart (another transport, a /proc without
    # tfd: lines): the groups still work, and the user is told what that costs, once.
    from mwrun.worlds import gloo_abort

    monkeypatch.setattr(gloo_abort, "registrations", lambda fd: [])
    monkeypatch.setattr(backends, "_warned", False)
    with caplog.at_level("WARNING", logger="mwrun"):
        server, groups = gloo_pair(timeout=3.0)
        again, more = gloo_pair(timeout=3.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "cannot abort a gloo process group" in warnings[0]
    assert "the world's timeout (3s)" in warnings[0]
    assert all(g._abort is None for g in [*groups.values(), *more.values()])
    for g in [*groups.values(), *more.values()]:
        g.release()
    del server, again


def test_init_returns_the_worlds_that_formed_when_another_cannot(capfd):
    import socket

    import mwrun

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        job = mwrun.init(worlds={
            "good": mwrun.WorldSpec(rank=0, size=1, port=free_port(), timeout=5),
            "bad": mwrun.WorldSpec(rank=0, size=1, port=taken.getsockname()[1], timeout=5)},
            timeout=10)
        try:
            job.world("good").barrier()
            with pytest.raises(MwrunError, match="world 'bad' has not formed"):
                job.world("bad").barrier()
        finally:
            job.close()
    finally:
        taken.close()
    assert "mwrun: world 'bad' did not form: world 'bad': cannot host its store" in \
        capfd.readouterr().err


def test_a_store_hosted_by_hand_listens_on_its_address_only():
    import psutil

    port = free_port()
    stores = World("w", WorldSpec(rank=0, size=1, addr="127.0.0.1", port=port)).membership.stores
    stores.host()
    try:
        listening = [c.laddr.ip for c in psutil.Process().net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
        assert listening == ["127.0.0.1"]  # torch alone would listen on every interface
    finally:
        stores.drop()


def test_a_store_address_not_on_this_machine_is_left_to_torch():
    assert backends.store_listener("192.0.2.1", free_port()) is None  # TEST-NET-1
