"""Elastic jobs, the library's side: worlds added and removed while others work, by
hand (job.add_world, job.remove_world) and as a head tells them (add, resize, drain,
removal; tests/fakehead.py stands in for the head, the test hosts the world's store as
the head would, and the processes run as the launcher starts them)."""

import json
import socket

import pytest
import torch.distributed as dist

from mwrun import protocol
from tests.fakehead import FakeHead
from tests.helpers import free_port, python

pytestmark = pytest.mark.timeout(180)


def record(proc, key):
    return proc.expect(lambda v: isinstance(v, dict) and key in v, timeout=90)


def test_two_processes_add_a_world_beside_another_and_remove_it(procs):
    pa, pb = free_port(), free_port()
    remover = procs.start(python("adder.py", "--rank", 1, "--port-a", pa, "--port-b", pb,
                                 "--remover"))
    other = procs.start(python("adder.py", "--rank", 0, "--port-a", pa, "--port-b", pb))
    for proc in (remover, other):
        assert proc.wait(120) == 0, proc.output()
    seen = {name: {r.get("step", "events"): r for r in p.records()}
            for name, p in (("remover", remover), ("other", other))}
    for name in ("remover", "other"):
        steps = seen[name]
        assert steps["added"]["worlds"] == ["A", "B"], steps
        assert steps["b_sum"]["value"] == 3.0
        assert steps["removed"]["worlds"] == ["A"]
        assert steps["a_done"]["errors"] == [] and steps["a_done"]["after"] == 2.0, steps
    assert seen["other"]["b_ended"]["reason"] == "rank 1 left the world (it closed it)"
    assert seen["remover"]["events"]["events"] == [["added", "B", 0], ["removed", "B", 0]]
    assert seen["other"]["events"]["events"] == [["added", "B", 0], ["broken", "B", 0],
                                                 ["removed", "B", 0]]


class Stores:
    """The worlds' stores, hosted by the test as the head hosts them."""

    def __init__(self):
        self.stores, self.ports = {}, {}

    def open(self, world: str, members: list[str]):
        listener = socket.socket()  # on 127.0.0.1 only, as the head's stores listen
        listener.bind(("127.0.0.1", 0))
        listener.listen(512)
        port = listener.getsockname()[1]
        store = dist.TCPStore("127.0.0.1", port, None, True, wait_for_workers=False,
                              master_listen_fd=listener.detach())
        protocol.start(store, members=members)
        self.stores[world], self.ports[world] = store, port
        return store

    def spec(self, world: str, rank: int, size: int) -> dict:
        return {"rank": rank, "size": size, "addr": "127.0.0.1", "port": self.ports[world],
                "backend": "gloo", "timeout": 10, "generation": 0, "rejoin": 60}


def member(procs, head, stores, process, worlds, *args):
    env = {"MWRUN_PROCESS": process, "MWRUN_CONTROL": head.path,
           "MWRUN_HOST_ADDR": "127.0.0.1",
           "MWRUN_WORLDS": json.dumps({w: stores.spec(w, *seat) for w, seat in worlds.items()})}
    proc = procs.start(python("elastic.py", *args), env=env)
    head.expect_verb("hello", process=process)
    return proc


def call(proc, generation, size):
    return proc.expect(lambda v: isinstance(v, dict) and v.get("call") == generation
                       and v.get("size") == size, timeout=90)


def events(proc):
    return [(r["event"], r["world"], r["generation"]) for r in proc.records() if "event" in r]


def test_a_world_the_head_adds_grows_shrinks_drains_and_is_removed(procs, tmp_path):
    head, stores = FakeHead(str(tmp_path / "control.sock")), Stores()
    try:
        stores.open("solo", ["frontend"])
        pair = stores.open("pair", ["frontend", "worker-0"])
        ghost = stores.open("ghost", ["frontend", "nobody"])
        protocol.remove(ghost, 0, 2, "drained before it formed")
        frontend = member(procs, head, stores, "frontend", {"solo": (0, 1)}, "--release")
        head.send("frontend", {"verb": "add", "world": "ghost",
                               "spec": stores.spec("ghost", 0, 2)})
        head.send("frontend", {"verb": "add", "world": "pair",
                               "spec": stores.spec("pair", 0, 2)})
        worker0 = member(procs, head, stores, "worker-0", {"pair": (1, 2)})
        # seen, not expected: the frontend may say it before worker-0's hello comes
        head.seen_verb("world", process="frontend", world="pair", event="added")
        head.send("frontend", {"verb": "add", "world": "pair",  # again: changes nothing
                               "spec": stores.spec("pair", 0, 2)})
        for proc, rank in ((frontend, 0), (worker0, 1)):
            assert call(proc, 0, 2)["rank"] == rank

        # grow: worker-1 joins generation 1 as rank 2 of 3
        protocol.resize(pair, 0, 2, [1, 1, 1], ["frontend", "worker-0", "worker-1"],
                        protocol.resized(2, 3))
        worker1 = member(procs, head, stores, "worker-1", {"pair": (2, 3)})
        for proc, rank in ((frontend, 0), (worker0, 1), (worker1, 2)):
            seen = call(proc, 1, 3)
            assert (seen["rank"], seen["sum"]) == (rank, 3.0)

        # shrink: worker-0 leaves, worker-1 becomes rank 1 of 2
        protocol.resize(pair, 1, 3, [1, 1], ["frontend", "worker-1"], protocol.resized(3, 2))
        closed = worker0.expect(lambda v: isinstance(v, dict) and "closed" in v, timeout=90)
        assert closed["closed"].startswith("worker-0 was removed from the world")
        assert closed["in_worlds"] is False and closed["rejoin_raises_it"] is True
        for proc, rank in ((frontend, 0), (worker1, 1)):
            seen = call(proc, 2, 2)
            assert (seen["rank"], seen["sum"]) == (rank, 2.0)

        # drain: the frontend lets it go; the head then removes the world
        for process in ("frontend", "worker-1"):
            head.send(process, {"verb": "drain", "world": "pair", "generation": 2,
                                "deadline": 30})
        head.expect_verb("world", process="frontend", world="pair", event="released")
        worker1.expect(lambda v: isinstance(v, dict) and v.get("event") == "draining")
        protocol.remove(pair, 2, 2, "drained: worker-1 retired")
        for proc in (frontend, worker1):
            closed = proc.expect(lambda v: isinstance(v, dict) and "closed" in v, timeout=90)
            assert closed == {"closed": "drained: worker-1 retired", "generation": 2,
                              "in_worlds": False, "draining": True, "rejoin_raises_it": True}
        for proc in (frontend, worker0, worker1):
            assert proc.wait(60) == 0, proc.output()
    except BaseException:
        for proc in procs:
            print(proc.output())
        raise
    finally:
        head.close()
    for proc in (frontend, worker0):  # one break per resize, said as a resize
        broken = [r for r in proc.records() if "broken" in r]
        assert [r["generation"] for r in broken] == ([0, 1] if proc is frontend else [0])
        assert all(r["broken"].startswith("resized: ") for r in broken), broken
    assert events(frontend) == [("added", "pair", 0), ("resized", "pair", 0),
                                ("reformed", "pair", 1), ("resized", "pair", 1),
                                ("reformed", "pair", 2), ("draining", "pair", 2),
                                ("removed", "pair", 2)]
    assert events(worker0) == [("resized", "pair", 0), ("reformed", "pair", 1),
                               ("removed", "pair", 1)]
    assert events(worker1) == [("resized", "pair", 1), ("reformed", "pair", 2),
                               ("draining", "pair", 2), ("removed", "pair", 2)]


def test_job_scale_asks_the_head_and_says_its_answer(procs, tmp_path):
    head, stores = FakeHead(str(tmp_path / "control.sock")), Stores()
    try:
        stores.open("solo", ["frontend"])
        frontend = member(procs, head, stores, "frontend", {"solo": (0, 1)}, "--scale")
        asked = head.expect_verb("scale", process="frontend", target="worker", count="+1")
        assert asked["pid"] == frontend.pid and asked["id"]
        head.send("frontend", {"verb": "reply", "id": asked["id"], "ok": True, "desired": 3,
                               "current": 2})
        assert record(frontend, "scaled")["scaled"] == {"desired": 3, "current": 2}
        asked = head.expect_verb("scale", process="frontend", target="worker", count="9")
        head.send("frontend", {"verb": "reply", "id": asked["id"], "ok": False,
                               "error": "worker scales within 1-4, not 9"})
        assert record(frontend, "refused")["refused"] == "worker scales within 1-4, not 9"
        assert frontend.wait(60) == 0, frontend.output()
    finally:
        head.close()


def test_members_that_disagree_on_a_worlds_size_are_told_so_at_once(procs):
    """job.add_world where rank 0 says the world has 2 members and rank 1 says 3: each
    is told that, naming who said what, well within the add's timeout (before, one
    waited for a rank 2 that never came and the other sat out the world's 30 s
    timeout building a group, and neither said why)."""
    pb = free_port()
    said = {}
    for rank, size in ((0, 2), (1, 3)):
        proc = procs.start(python("misfit.py", "--rank", rank, "--size", size, "--port-a",
                                  free_port(), "--port-b", pb, "--timeout", 20))
        said[rank] = proc
    for proc in said.values():
        assert proc.wait(90) == 0, proc.output()
        seen = proc.records()[-1]
        assert seen["kind"] == "WorldClosed", seen  # a BrokenWorldError that will not re-form
        assert seen["reason"] == "its members disagree on its size: rank 0 says 2," \
                                 " rank 1 says 3", seen
        # told, not timed out: a timeout's reason would name the rank that never came
        assert seen["worlds"] == ["A"], seen


@pytest.mark.parametrize("remover", [0, 1])
def test_a_call_blocked_in_a_world_its_own_process_removes_raises_world_closed(procs,
                                                                              remover):
    """A thread blocked in a recv while its own process removes the world gets
    WorldClosedError (as README promises of a world closed on purpose), at once, and so
    do its rejoin() and every later call: code that rejoins after a BrokenWorldError
    does not try to rejoin it. Before, the store host's thread read "its store host has
    gone" (a BrokenWorldError), the other's sat out the world's timeout. Its peer sees
    the world end, as before."""
    port = free_port()
    started = {rank: procs.start(python("closer.py", "--rank", rank, "--port", port,
                                        *(["--remover"] if rank == remover else [])))
               for rank in (0, 1)}
    for proc in started.values():
        assert proc.wait(50) == 0, proc.output()
    closed = ["WorldClosedError", "this process closed it"]
    seen = started[remover].records()[-1]
    assert seen == {"blocked": closed, "rejoin": closed, "after": closed, "worlds": []}, seen
    peer = started[1 - remover].records()[-1]
    assert peer["blocked"][0] == "WorldEnded", peer
