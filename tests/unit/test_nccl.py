"""The nccl discipline, each rule with torch's process-group class replaced (no GPU).

Every test here fails when its rule is broken: error handling that tears the process
down (or overrides the user's), a broken communicator destroyed or aborted twice,
aborts one after another, a hung abort that blocks or goes untold, a blocking
communicator where a nonblocking one works, a timed wait on nccl work.
"""

import io
import json
import os
import signal
import socket
import threading
import time
from datetime import timedelta
from typing import ClassVar

import pytest
import torch

from mwrun import protocol
from mwrun.head.serve import requests
from mwrun.head.serve.dispatcher import Dispatcher
from mwrun.head.serve.library import Library
from mwrun.head.serve.verbs import Verbs
from mwrun.plan import nccl as plan_nccl
from mwrun.worlds import aborts, backends
from mwrun.worlds import nccl as discipline
from mwrun.worlds.supervisor_link import SupervisorLink
from mwrun.worlds.world import World
from mwrun.worlds.worldspec import WorldSpec


@pytest.fixture(autouse=True)
def _own_environment(monkeypatch):
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items()
                                        if not k.startswith("TORCH_NCCL_")})


class Future:
    """torch.futures.Future's surface the library uses, completed by hand."""

    def __init__(self):
        self._callbacks, self._value, self.done = [], None, False

    def add_done_callback(self, fn):
        self._callbacks.append(fn) if not self.done else fn(self)

    def value(self):
        return self._value

    def complete(self, value):
        self._value, self.done = value, True
        for fn in self._callbacks:
            fn(self)


class Work:
    """An nccl work: wait() must never be given a timeout (it would abort the comm)."""

    def __init__(self):
        self.result = Future()
        self.waits = []

    def wait(self, *args):
        self.waits.append(args)
        if args:
            raise AssertionError("a timed wait on nccl work aborts its communicator")
        return True

    def get_future(self):  # completes at once for nccl: queued is not done
        done = Future()
        done.complete(None)
        return done

    def get_future_result(self):
        return self.result

    def is_completed(self):
        return self.result.done


class StandInNCCL:
    """ProcessGroupNCCL, as far as mwrun touches it."""

    made: ClassVar[list] = []
    hang = None  # an Event: abort() blocks on it (a hung ncclCommAbort)

    class Options:
        def __init__(self):
            self.config = type("NCCLConfig", (), {"blocking": -2147483648})()  # UNDEF

    def __init__(self, store, rank, size, options):
        self.options = options
        self.calls = []
        self.env_at_creation = {k: v for k, v in os.environ.items()
                                if k.startswith("TORCH_NCCL_")}
        self.works = []
        StandInNCCL.made.append(self)

    def eager_connect_single_device(self, device):
        self.calls.append(("eager", device))

    def abort(self):
        self.calls.append(("abort",))
        if self.hang is not None:
            self.hang.wait()

    def shutdown(self):  # ncclCommDestroy underneath: never on a broken communicator
        self.calls.append(("shutdown",))

    def allreduce(self, tensors, opts):
        work = Work()
        self.works.append(work)
        return work


def fake_torch(nccl_version: int | None):
    class C:
        pass

    if nccl_version is not None:
        C._nccl_version = staticmethod(lambda: nccl_version)
        C._nccl_version_suffix = staticmethod(lambda: b"")

    class cuda:
        is_available = staticmethod(lambda: True)
        device_count = staticmethod(lambda: 1)
        set_device = staticmethod(lambda device: None)

    return type("torch", (), {"_C": C, "cuda": cuda,
                              "device": staticmethod(lambda kind, i: f"{kind}:{i}")})


def code(major, minor, patch):
    return (major << 32) | (minor << 16) | patch


C10D = type("c10d", (), {"ProcessGroupNCCL": StandInNCCL})


NCCL_2_21 = (2 << 32) | (21 << 16) | 5


def made(nccl_version=NCCL_2_21, timeout=7.0):
    backend = backends.nccl("store", 0, 1, timeout, "cuda:0", c10d=C10D,
                            torch_module=fake_torch(nccl_version))
    return backend, StandInNCCL.made[-1]


class Link:
    def __init__(self):
        self.events = []

    def world_event(self, world, generation, event, reason=""):
        self.events.append((world, generation, event, reason))


def world_with(backend, name="gpu", link=None) -> World:
    """A World whose generation 0 is ``backend`` (no store: the break is local)."""
    world = World(name, WorldSpec(rank=0, size=1, backend="nccl", timeout=5.0),
                  link=link, local_addr="127.0.0.1")
    backend.device = torch.device("cpu")  # a stand-in for cuda:0
    assert world.membership.state.formed(0, 0, 1, backend, ended=lambda: False)
    return world


# -- 1. error handling: the communicator only, never the process ----------------------------

def test_the_library_sets_clean_up_only_before_the_group_is_made():
    _, group = made(timeout=7.0)
    assert group.env_at_creation[discipline.ERROR_HANDLING] == "2"  # CleanUpOnly
    assert group.env_at_creation[discipline.DUMP_ON_TIMEOUT] == "0"
    heartbeat = int(group.env_at_creation[discipline.HEARTBEAT])
    assert heartbeat >= 480 and heartbeat > 7.0 + 60  # above the call timeout and dump wait


def test_the_library_never_overrides_what_the_user_set():
    os.environ[discipline.ERROR_HANDLING] = "3"
    os.environ[discipline.HEARTBEAT] = "99"
    _, group = made()
    assert group.env_at_creation[discipline.ERROR_HANDLING] == "3"
    assert group.env_at_creation[discipline.HEARTBEAT] == "99"
    environ = {discipline.ERROR_HANDLING: "1"}
    assert discipline.ERROR_HANDLING not in discipline.ensure_env(30.0, environ)
    assert environ[discipline.ERROR_HANDLING] == "1"


def test_init_sets_it_before_any_world_forms(monkeypatch):
    from mwrun.worlds import forming, job

    seen = {}
    monkeypatch.setattr(forming, "form_all",
                        lambda worlds, deadline: seen.update(os.environ) or {})
    job.init(worlds={"g": WorldSpec(rank=0, size=1, backend="nccl", port=29999,
                                    timeout=600.0)}).close()
    assert seen[discipline.ERROR_HANDLING] == "2"
    assert int(seen[discipline.HEARTBEAT]) > 600  # kept above the world's timeout


@pytest.mark.parametrize("timeout", [0.5, 7.0, 30.0, 90.0, 600.0, 3600.0])
def test_the_launcher_and_the_library_agree(timeout):
    assert plan_nccl.member_env(timeout) == discipline.member_env(timeout)
    assert int(discipline.member_env(timeout)[discipline.HEARTBEAT]) > timeout


# -- 2. aborted, never destroyed; in parallel; against a deadline; told ---------------------

def test_a_broken_communicator_is_aborted_once_and_never_destroyed():
    backend, group = made()
    world = world_with(backend)
    error = world.membership.broke(0, "a peer died", publish=False)
    assert world.broken and error.reason == "a peer died"
    assert group.calls.count(("abort",)) == 1
    world.membership.retire()  # a rejoin lets the broken group go
    assert group.calls.count(("abort",)) == 1  # never a second abort
    assert ("shutdown",) not in group.calls and backend.group is None


def test_two_hanging_aborts_take_one_deadline_not_two(monkeypatch):
    # Side by side: each abort begins while the other still hangs. One after the other,
    # the second would begin only once the first had passed its deadline (60 s here).
    monkeypatch.setattr(discipline, "ABORT_DEADLINE", 60.0)
    made_two = [made() for _ in range(2)]
    worlds = [world_with(backend, f"gpu{i}") for i, (backend, _) in enumerate(made_two)]
    hanging = release_once_all_abort(monkeypatch, [group for _, group in made_two])
    threads = [threading.Thread(target=w.membership.broke, args=(0, "host lost", False))
               for w in worlds]
    for thread in threads:  # as two watcher threads see their worlds break at once
        thread.start()
    for thread in threads:
        thread.join(60)
    assert hanging.wait(0) and all(w.broken for w in worlds)  # both hung at once

    made_two = [made() for _ in range(2)]
    hanging = release_once_all_abort(monkeypatch, [group for _, group in made_two])
    hung = aborts.abort_all([("a", made_two[0][0].abort), ("b", made_two[1][0].abort)], 60)
    assert hanging.wait(0) and hung == {}  # both hung at once, then both returned

    release = threading.Event()  # never set before the deadline: both are named
    monkeypatch.setattr(StandInNCCL, "hang", release)
    hung = aborts.abort_all([("a", made()[0].abort), ("b", made()[0].abort)], 0.2)
    release.set()
    assert sorted(hung) == ["a", "b"]


def release_once_all_abort(monkeypatch, groups) -> threading.Event:
    """Make every abort() hang until all of ``groups`` are in abort() at once (set on
    the event returned), or 30 s have passed (not set: they were not side by side)."""
    release, together = threading.Event(), threading.Event()
    monkeypatch.setattr(StandInNCCL, "hang", release)

    def watch():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not together.is_set():
            if all(("abort",) in g.calls for g in groups):
                together.set()
            time.sleep(0.01)
        release.set()

    threading.Thread(target=watch, daemon=True).start()
    return together


def test_an_abort_past_its_deadline_is_told_to_the_supervisor(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(StandInNCCL, "hang", release)
    monkeypatch.setattr(discipline, "ABORT_DEADLINE", 0.3)
    link = Link()
    world = world_with(made()[0], link=link)
    world.membership.broke(0, "a peer died", publish=False)  # returned, the abort hung:
    release.set()  # the process never hangs in an abort
    hung = [e for e in link.events if e[2] == protocol.WorldReport.ABORT_HUNG]
    assert len(hung) == 1 and hung[0][:2] == ("gpu", 0)
    assert "did not return within 0.3s" in hung[0][3]
    assert link.events[-1][2] == "broken"  # and the break is told as ever


def test_an_abort_that_returns_is_not_told():
    link = Link()
    world_with(made()[0], link=link).membership.broke(0, "a peer died", publish=False)
    assert [e[2] for e in link.events] == ["broken"]


def test_the_head_kills_a_member_whose_abort_hung():
    """An abort_hung from the library reaches the supervisor (not as a world's state
    change): the member is killed as hung, so its restart policy applies; one from an
    earlier incarnation (another pid) is ignored."""
    from tests.unit.test_supervisor import join_all, make

    sup, host = make()
    join_all(sup)
    leader = sup.procs["leader"]
    verbs = Verbs(sup, sup.stop, None, None, None, None, lambda fresh: {}, time.monotonic)
    library = Library(sup.members, None, None, None, None, None, None, lambda name, t: t,
                      time.monotonic)  # a world event reaches the members alone
    control = Dispatcher(verbs, library, sup.processes.awaits_pid)
    request = {"verb": "world", "process": "leader", "pid": leader.worker.pid, "world": "world1",
               "generation": 0, "event": protocol.WorldReport.ABORT_HUNG,
               "reason": "aborting world1's nccl group did not return within 10s"}
    assert requests.problem(request) is None
    control.dispatch({**request, "pid": leader.worker.pid + 100})  # an earlier incarnation
    assert host.of("signal") == []
    control.dispatch(request)
    assert host.of("signal") == [("leader", signal.SIGKILL)]
    assert leader.worker.hung == "aborting world1's nccl group did not return within 10s"
    assert all(w.state.value == "healthy" for w in sup.worlds.values())  # the break is
    # the library's to report (it came as "broken"), not this message's


def test_a_known_bad_nccl_is_warned_of_once_and_shown():
    from tests.unit.test_supervisor import make

    sup, host = make()
    for name, rec in sup.procs.items():
        sup.members.on_hello(name, rec.worker.pid, 1.0, "2.25.1")
    said = [c[0] for c in host.of("say") if "NCCL 2.25.1" in c[0]]
    assert len(said) == 1 and said[0].startswith("warning: ")
    assert {rec.nccl for rec in sup.procs.values()} == {"2.25.1"}


# -- 3. nonblocking where it works; the timeout a deadline on the future --------------------

@pytest.mark.parametrize("version, nonblocking", [
    (code(2, 21, 5), True), (code(2, 27, 3), True),
    (code(2, 26, 2), False),  # hangs in nonblocking mode (pytorch#153960)
    (code(2, 13, 4), False),  # before NCCL had nonblocking communicators
    (None, False)])
def test_communicators_are_nonblocking_where_the_nccl_allows(version, nonblocking):
    _, group = made(version)
    assert (group.options.config.blocking == 0) is nonblocking
    assert group.options._timeout == timedelta(seconds=7.0)
    assert group.calls[0][0] == "eager"  # connected at once, on the member's device


def test_nccl_work_is_never_given_a_timed_wait():
    backend, group = made()
    world = world_with(backend)
    world.all_reduce(torch.ones(1))
    work = group.works[-1]
    assert work.waits == [()]
    pending = world.all_reduce(torch.ones(1), async_op=True)
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        pending.wait(timeout=0.2)  # a deadline on the work's result future
    assert time.monotonic() - began >= 0.15  # it did wait (no later than: not asserted)
    group.works[-1].result.complete(0)  # done on the GPU
    pending.wait(timeout=0.2)
    assert all(args == () for w in group.works for args in w.waits)
    assert not world.broken


def test_a_call_torch_judges_timed_out_breaks_its_world_at_once():
    link = Link()
    backend, group = made()
    world = world_with(backend, link=link)
    world.all_reduce(torch.ones(1))
    group.works[-1].result.complete(1)  # WorkResult.TIMEOUT, from torch's watchdog
    deadline = time.monotonic() + 5
    while not link.events and time.monotonic() < deadline:  # told once it has aborted
        time.sleep(0.01)
    assert world.broken and "timed out" in world.reason
    assert ("abort",) in group.calls and link.events[-1][2] == "broken"


# -- 4. the NCCL version: read without CUDA, told in the hello, judged by the head ----------

def test_the_nccl_version_is_read_from_torch_without_cuda():
    assert discipline.version(fake_torch(code(2, 21, 5))) == "2.21.5"
    assert discipline.version(fake_torch(None)) is None  # a CPU build
    assert discipline.version() is None or discipline.parse(discipline.version())
    assert not torch.cuda.is_initialized()


def test_the_hello_tells_the_nccl_version(tmp_path):
    path = str(tmp_path / "c.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(1)
        link = SupervisorLink(path, "leader", 5.0, stderr=io.StringIO(), nccl="2.21.5")
        link.start()
        try:
            conn, _ = server.accept()
            with conn:
                conn.settimeout(10)
                data = b""
                while b"\n" not in data:
                    data += conn.recv(4096)
        finally:
            link.close()
    hello = json.loads(data.split(b"\n")[0])
    assert hello["verb"] == "hello" and hello["nccl"] == "2.21.5"
    assert requests.problem(hello) is None
    assert requests.problem({**hello, "nccl": None}) is None
    assert requests.problem({**hello, "nccl": 2}) is not None


@pytest.mark.parametrize("version, bad", [
    ("2.25.1", True), ("2.28.3", True), ("2.28.8+cuda12.9", True), ("2.28.9", False),
    ("2.28.2", False), ("2.25.0", False), ("2.21.5", False), (None, False), ("junk", False)])
def test_known_bad_versions(version, bad):
    assert (plan_nccl.known_bad(version) is not None) is bad


def test_status_label_and_one_warning_per_bad_version():
    assert plan_nccl.label("2.21.5") == "2.21.5" and plan_nccl.label(None) == "-"
    said = plan_nccl.warning("leader", "2.25.1", set())
    assert said.startswith("warning: leader runs NCCL 2.25.1: ncclCommAbort can hang")
    assert plan_nccl.warning("worker-0", "2.25.1", {"2.25.1"}) is None  # said once
    assert plan_nccl.warning("worker-0", "2.21.5", set()) is None
