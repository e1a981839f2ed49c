"""torch's Flight Recorder as the library reads it for a bundle (worlds/flight.py): off
unless its size is set, a real gloo group's calls read back under the group's name
("WORLD-gGEN", as mwrun names it), bounded to fit the line up; and the launcher turning
it on for nccl worlds unless the user set it, under either of its names."""

from __future__ import annotations

import json
import threading

import pytest
import torch
import torch.distributed as dist

from mwrun.plan import nccl as plan_nccl
from mwrun.worlds import backends, flight
from mwrun.worlds import nccl as discipline
from tests.helpers import store_server

pytestmark = pytest.mark.timeout(60)


def test_it_is_off_unless_its_size_is_set_above_zero():
    for environ in ({}, {flight.BUFFER: "0"}, {flight.BUFFER: "x"},
                    {flight.BUFFER_OLD: "0"}, {flight.BUFFER: "0", flight.BUFFER_OLD: "9"}):
        assert "off" in flight.dump(environ, readers=[pytest.fail]), environ
    assert flight.size({flight.BUFFER_OLD: "9"}) == 9  # torch reads the older name too


def test_a_dump_torch_cannot_make_is_said():
    def broken(*_):
        raise RuntimeError("no")

    assert flight.dump({flight.BUFFER: "10"}, readers=[broken]) == \
        {"off": "the Flight Recorder could not be read: RuntimeError: no"}
    assert flight.dump({flight.BUFFER: "10"}, readers=[]) == \
        {"off": "this torch has no Flight Recorder"}
    # one recorder read, the other not: what was read, and why the rest was not
    doc = flight.dump({flight.BUFFER: "10"}, readers=[broken, lambda *_: '{"entries": []}'])
    assert doc["entries"] == [] and doc["unread"] == ["RuntimeError: no"]


def test_both_recorders_are_read_and_their_calls_merged_in_order():
    """torch's nccl groups record in ProcessGroupNCCL's own recorder, gloo's in the
    generic one: an nccl member's dump must hold both (it did not while only the
    generic one was read)."""
    nccl = {"version": "2.10", "pg_config": {"solo-g0": {"desc": "nccl"}},
            "entries": [{"profiling_name": "nccl:all_reduce", "time_created_ns": 2},
                        {"profiling_name": "nccl:all_reduce", "time_created_ns": 4}]}
    generic = {"version": "2.10", "pg_config": {"pair-g1": {"desc": "gloo"}},
               "entries": [{"profiling_name": "gloo:broadcast", "time_created_ns": 3}]}
    doc = flight.dump({flight.BUFFER: "10"},
                      readers=[lambda *_: json.dumps(nccl), lambda *_: json.dumps(generic)])
    assert [e["time_created_ns"] for e in doc["entries"]] == [2, 3, 4]
    assert set(doc["pg_config"]) == {"solo-g0", "pair-g1"} and "unread" not in doc


def test_a_dump_that_does_not_come_is_not_waited_for():
    stuck = threading.Event()
    try:
        told = flight.within(0.05, {flight.BUFFER: "10"}, readers=[lambda *_: stuck.wait()])
        assert told == {"off": "the Flight Recorder's dump did not come within 0.05s"}
    finally:
        stuck.set()
    assert flight.within(5, {flight.BUFFER: "10"}, readers=[lambda *_: b'{"entries": []}']) \
        == {"version": None, "pg_config": {}, "pg_status": {}, "entries": [], "dropped": 0}


def test_the_oldest_entries_go_first_to_fit():
    entries = [{"collective_seq_id": n, "pad": "x" * 1000} for n in range(600)]
    doc = flight.dump({flight.BUFFER: "2000"},
                      readers=[lambda *_: json.dumps({"entries": entries}).encode()])
    assert len(json.dumps(doc)) <= flight.MAX_BYTES
    kept = [e["collective_seq_id"] for e in doc["entries"]]
    assert kept == list(range(600 - len(kept), 600)) and kept  # the newest, in order
    assert doc["dropped"] == 600 - len(kept)


def test_a_real_groups_calls_are_read_under_its_name(monkeypatch):
    monkeypatch.setenv(flight.BUFFER, "100")  # read by torch as each group is made
    server, port = store_server()
    groups = {}

    def member(rank):
        store = dist.PrefixStore("fr/", dist.TCPStore("127.0.0.1", port, None, False))
        groups[rank] = backends.create("gloo", store, rank, 2, 30.0,
                                       local_addr="127.0.0.1", group="frworld-g4")
        groups[rank].group.allreduce([torch.ones(2)]).wait()

    threads = [threading.Thread(target=member, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = flight.dump()
    ours = [e for e in doc["entries"] if e["process_group"][0] == "frworld-g4"]
    assert [e["profiling_name"] for e in ours] == ["gloo:all_reduce"] * 2, doc  # a rank each
    assert "frworld-g4" in doc["pg_config"]
    assert server.num_keys() > 0  # the store served the two ranks till now


def test_nccl_members_record_unless_the_user_said_otherwise_by_either_name():
    wanted = plan_nccl.member_env(30.0)
    assert wanted[flight.BUFFER] == "2000"
    assert flight.BUFFER in plan_nccl.unset(wanted, {})
    assert flight.BUFFER not in plan_nccl.unset(wanted, {flight.BUFFER_OLD: "0"})
    environ = {flight.BUFFER_OLD: "0"}
    discipline.ensure_env(30.0, environ)
    assert flight.BUFFER not in environ and flight.size(environ) == 0
    environ = {}
    discipline.ensure_env(30.0, environ)
    assert flight.size(environ) == 2000
