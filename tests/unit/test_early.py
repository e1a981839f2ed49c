"""What a warm start's library says before its head knows its pid (head/early.py): held,
then served in order once the pid is told, through the real dispatcher (serve/dispatcher.py),
the loop's ``spawned`` and the supervisor; what an earlier start said is dropped.

Before this, the hello and ``ready`` of a start whose pid came late (its zygote's answer
after the process's own first words, through a remote host's agent) were dropped: the
process stayed ``starting`` and its world ``forming`` for good, while the world worked.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from mwrun.head.decide.processbook import Made
from mwrun.head.loop import Heard
from mwrun.head.serve.dispatcher import Dispatcher
from mwrun.head.serve.early import MAX_HELD, Early
from mwrun.head.serve.library import Library
from mwrun.head.serve.verbs import Verbs
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W
from tests.unit.test_supervisor import FakeHost, make


class WarmHost(FakeHost):
    """Every start is a warm one: its pid comes later (``Heard.spawned``)."""

    def spawn(self, name, generations, restarts, incarnation=1):
        super().spawn(name, generations, restarts, incarnation)
        return Made(None, None)


def head(sup):
    """The dispatcher as the loop builds it, and what the hands tell it (``Heard``): the
    real supervisor and hold, the rest of the head left out."""
    calls = []
    quiet = SimpleNamespace(joined=lambda *a: None, broken=lambda *a: None,
                            added=lambda *a: None, first_call=lambda *a: None,
                            hello=lambda *a: calls.append(("downlink", a[:2])))
    library = Library(sup.members, quiet, quiet, quiet, quiet, quiet, quiet,
                      lambda name, t: t, lambda: 0.0)
    verbs = Verbs(sup, sup.stop, quiet, quiet, quiet, quiet, lambda fresh: {}, lambda: 0.0)
    dispatcher = Dispatcher(verbs, library, sup.processes.awaits_pid)
    return SimpleNamespace(supervisor=sup, early=dispatcher.early, calls=calls,
                           dispatcher=dispatcher,
                           heard=Heard(None, lambda: None, lambda: sup, lambda: dispatcher))


def said(loop, **request):
    assert loop.dispatcher.serve(json.dumps(request).encode()) is None


def test_a_starts_first_words_before_its_pid_are_served_once_the_pid_comes():
    sup, _host = make(host=WarmHost())
    loop = head(sup)
    pids = {"leader": 7001, "worker-0": 7002, "worker-1": 7003}
    for name, pid in pids.items():
        assert sup.procs[name].state is P.STARTING and sup.procs[name].worker.pid is None
        said(loop, verb="hello", process=name, pid=pid, interval=1.0)
        said(loop, verb="world", process=name, pid=pid - 1000, world="world1",  # an
             generation=0, event="ready")                                        # earlier start
        for world in sup.procs[name].plan.worlds:
            said(loop, verb="world", process=name, pid=pid, world=world, generation=0,
                 event="ready")
    assert all(not rec.worker.said_hello for rec in sup.procs.values())  # held, not yet served
    for name, pid in pids.items():
        loop.heard.spawned(name, pid, True)
    assert all(rec.state is P.RUNNING and rec.worker.said_hello for rec in sup.procs.values())
    assert all(w.state is W.HEALTHY for w in sup.worlds.values())
    assert ("downlink", ("worker-0", 7002)) in loop.calls  # its way down, for stacks
    assert loop.early.held == {}


def test_a_start_that_knows_its_pid_is_served_at_once_and_the_hold_is_bounded():
    sup, _host = make()  # cold starts: each pid known as it starts
    loop = head(sup)
    rec = sup.procs["leader"]
    said(loop, verb="hello", process="leader", pid=rec.worker.pid, interval=1.0)
    assert rec.worker.said_hello and loop.early.held == {}
    early = Early()
    for n in range(MAX_HELD + 10):
        early.hold({"process": "a", "pid": 5, "n": n}, None)
    assert [r["n"] for r, _ in early.take("a", 5)] == list(range(MAX_HELD))
