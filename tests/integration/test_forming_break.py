"""A member that dies after it arrived in a generation but before its group is built
(the window a fault hits in the tens of milliseconds of a warm restart) must not hold
its peers in their group's rendezvous until the world's timeout: the break stops
their build, and they join the next generation (mwrun.worlds.formguard)."""

import json
import sys
import threading
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch.distributed as dist

from mwrun import protocol
from mwrun.errors import BrokenWorldError
from mwrun.worlds import formguard
from mwrun.worlds.joining import Seat
from mwrun.worlds.worldstore import WorldStore
from tests.helpers import BIN
from tests.integration.jobs import expect, launch, wait_for

pytestmark = pytest.mark.timeout(120)
FOREVER = 600  # a world's timeout no test waits out: a build that is not stopped hangs
WAIT = 60  # the store's own timeout in this process's tests (pytest cannot end a wait
#            blocked in torch's C++, so a wait that is not cut must end by itself)


@pytest.fixture
def store():
    server = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=WAIT))
    spec = SimpleNamespace(addr="127.0.0.1", port=server.port, timeout=WAIT)
    stores = WorldStore("w", spec, lambda: BrokenWorldError("w", 0, "exiting"),
                        lambda generation, exc: BrokenWorldError("w", generation, "lost"))
    shared = stores.client(WAIT)
    yield server, stores, shared
    stores.stop_waits()


def rendezvous(prefixed, seat, ended=None):
    """As a group's rendezvous does with a peer that never comes: wait for its key."""
    try:
        prefixed.wait(["address/1"])
    except RuntimeError as exc:
        if ended is not None:
            ended.append(str(exc))
        raise
    return "group"


def guards_alive():
    return [t for t in threading.enumerate() if t.name == "mwrun-forming" and t.is_alive()]


def test_a_break_stops_a_build_waiting_for_a_dead_peer(store):
    server, stores, shared = store
    seat = Seat(generation=3, rank=0, size=2, prefix=protocol.pg_prefix(3))
    breaker = threading.Timer(0.3, protocol.mark_broken, (server, 3, 2, "rank 1 died"))
    breaker.start()
    dropped, ended = [], []
    assert formguard.build(stores, shared, seat,
                           lambda prefixed, seat: rendezvous(prefixed, seat, ended),
                           dropped.append) is None
    assert dropped == []  # nothing was built
    [why] = ended
    assert "closed" in why and "timeout" not in why  # cut, not waited out
    assert guards_alive() == []


def test_a_build_that_ends_well_returns_its_group_and_leaves_no_guard(store):
    server, stores, shared = store
    seat = Seat(generation=1, rank=0, size=2, prefix=protocol.pg_prefix(1))
    dist.PrefixStore(seat.prefix, server).set("address/1", "here")
    assert formguard.build(stores, shared, seat, rendezvous, lambda group: None) == "group"
    assert guards_alive() == []
    # a break after the build is the watcher's (the key the guard waited on is set)
    assert protocol.text(server.get(protocol.forming_key(1, 0))) == "settled"


def test_a_build_that_fails_with_no_break_says_why(store):
    _, stores, shared = store
    seat = Seat(generation=0, rank=0, size=2, prefix=protocol.pg_prefix(0))

    def refused(prefixed, seat):
        raise RuntimeError("Connection refused")

    with pytest.raises(BrokenWorldError, match="rank 0 could not connect to its peers"):
        formguard.build(stores, shared, seat, refused, lambda group: None)
    assert guards_alive() == []


def test_a_group_built_as_its_generation_broke_is_let_go(store):
    server, stores, shared = store
    seat = Seat(generation=2, rank=0, size=2, prefix=protocol.pg_prefix(2))

    def built_late(prefixed, seat):
        protocol.mark_broken(server, 2, 2, "rank 1 died")
        wait_for(lambda: not guards_alive(), what="the guard to read the break")
        return "group"

    dropped = []
    assert formguard.build(stores, shared, seat, built_late, dropped.append) is None
    assert dropped == ["group"]


def test_its_own_connection_is_told_apart_while_other_threads_connect_to_the_store(store):
    """A leader whose worlds re-form at once makes connections to a store from several
    threads (waits, watchers, builds): each build must still find its own socket, or it
    builds with no guard (a CI run of stop 40 lost a drill's world so: 9 of 20 were not
    told apart with another thread connecting beside them, before the connecting lock)."""
    _, stores, _ = store
    spec, stop, told = stores.spec, threading.Event(), []

    def beside():
        while not stop.is_set():
            stores.client(WAIT)  # made and dropped, as a wait's client is

    others = [threading.Thread(target=beside) for _ in range(2)]
    for thread in others:
        thread.start()
    try:
        for _ in range(40):
            connection = formguard.Connection(lambda: stores.client(WAIT), spec.port,
                                              formguard.connecting(spec.addr, spec.port))
            told.append(connection.cuttable)
            connection.forget()
    finally:
        stop.set()
        for thread in others:
            thread.join()
    assert told == [True] * 40


def test_a_peer_that_dies_as_its_group_is_built_costs_one_generation(procs, home, tmp_path):
    topology = tmp_path / "forming.yaml"
    topology.write_text(
        f"version: 1\nname: forming\ntimeout: {FOREVER}\nprocesses:\n"
        f"  leader:\n    cmd: {sys.executable} {BIN / 'hub.py'}\n"
        f"  worker:\n    cmd: {sys.executable} {BIN / 'dies_forming.py'}\n"
        "    restart: on-failure\n    restart_backoff: 0.2\n"
        "worlds:\n  world1: {members: [leader, worker]}\n")
    job = launch(procs, home, topology, "--run-id", "forming")
    got = expect(job, "leader", "recv", timeout=90)
    assert got["value"] == 1.0 and got["generation"] == 1
    assert job.wait(timeout=90) == 0  # the worker ends, then the leader: the run is over
    history = [json.loads(line) for line in
               (home / "runs" / "forming" / "history.jsonl").read_text().splitlines()]
    assert [e["restarts"] for e in history
            if e.get("event") == "spawn" and e["process"] == "worker"] == [0, 1]
    assert [(e["generation"], e["reason"]) for e in history if e.get("event") == "break"] \
        == [(0, "worker exited with code 3")]
