"""A process's state is reconciled from its goal (desired) and what was seen of its
current start (observed), in one place: the pure rule, and the reconcile that moves by
it, level-triggered (asked again, it does nothing more)."""

import pytest

from mwrun.head.decide import events as ev
from mwrun.head.decide.policy import Exit
from mwrun.head.decide.reconcile import target
from mwrun.head.decide.records import ProcessRecord, Worker
from mwrun.schema import PROCESS_MOVES, Goal
from mwrun.schema import ProcessState as P
from tests.unit.test_supervisor import join_all, make


def rec(state, goal=Goal.RUN, **seen):
    made = seen.pop("made", True)
    worker = Worker(1, 1.0, 1.0 if made else None, pid=42, **seen)
    record = ProcessRecord(make()[0].plan.processes["worker-0"], state, goal, worker)
    return record


@pytest.mark.parametrize(("state", "goal", "seen", "joined", "want"), [
    # a start made: STARTING until it joined every world, then RUNNING
    (P.STARTING, Goal.RUN, {}, False, P.STARTING),
    (P.STARTING, Goal.RUN, {}, True, P.RUNNING),
    (P.RESTARTING, Goal.RUN, {}, False, P.STARTING),  # its next start was made
    (P.STARTING, Goal.RUN, {"made": False}, True, P.STARTING),  # not made yet
    # what its beats say
    (P.RUNNING, Goal.RUN, {"late": "late"}, True, P.UNRESPONSIVE),
    (P.UNRESPONSIVE, Goal.RUN, {}, True, P.RUNNING),
    (P.STARTING, Goal.RUN, {"late": "late"}, False, P.STARTING),  # judged once RUNNING
    (P.UNRESPONSIVE, Goal.RUN, {"hung": "silent", "late": "late"}, True, P.HUNG),
    # retired: drained (a hung one stays hung: it is killed anyway)
    (P.RUNNING, Goal.RETIRE, {}, True, P.DRAINING),
    (P.HUNG, Goal.RETIRE, {"hung": "silent"}, True, P.HUNG),
    # a start that ends, by its goal
    (P.RUNNING, Goal.RUN, {"exit": Exit(-9)}, True, P.RESTARTING),
    (P.RUNNING, Goal.END, {"exit": Exit(0)}, True, P.EXITED),
    (P.RUNNING, Goal.END, {"exit": Exit(1)}, True, P.FAILED),
    (P.RUNNING, Goal.END, {"exit": Exit(0, drilled=True)}, True, P.FAILED),
    (P.RUNNING, Goal.STOP, {"exit": Exit(-15)}, True, P.STOPPED),
    (P.RUNNING, Goal.STOP, {"exit": Exit(0)}, True, P.EXITED),
    (P.DRAINING, Goal.RETIRE, {"exit": Exit(-15)}, True, P.EXITED),
    (P.STARTING, Goal.END, {"exit": Exit(None, start_error="no such file")}, False, P.FAILED),
    # one that ended before its goal changed (a restart cancelled, or given up)
    (P.RESTARTING, Goal.STOP, {"exit": Exit(0)}, False, P.STOPPED),
    (P.RESTARTING, Goal.END, {"exit": Exit(0, drilled=True)}, False, P.EXITED),
    (P.RESTARTING, Goal.END, {"exit": Exit(-9)}, False, P.FAILED),
    (P.RESTARTING, Goal.STOP, {"made": False}, False, P.STOPPED),  # a replica never started
    (P.RESTARTING, Goal.END, {"made": False}, False, P.FAILED),
    # outlived SIGKILL; and what has ended stays ended
    (P.RUNNING, Goal.STOP, {"abandoned": True}, True, P.FAILED),
    (P.EXITED, Goal.RUN, {}, True, P.EXITED),
])
def test_the_rule_one_move_at_a_time_along_the_machine(state, goal, seen, joined, want):
    record = rec(state, goal, **seen)
    got = target(record, joined)
    assert got is want
    assert got is state or got in PROCESS_MOVES[state]  # never a move the machine lacks


def test_a_reconcile_asked_again_does_nothing_more():
    told = []
    sup, _ = make(subscribers=[told.append])
    join_all(sup)
    rec = sup.procs["worker-0"]
    rec.worker.late = "late"
    assert sup.settle.reconcile(rec) is P.UNRESPONSIVE
    assert [e for e in told if isinstance(e, ev.ProcessChanged)][-1].state is P.UNRESPONSIVE
    before = len(told)
    assert sup.settle.reconcile(rec) is None and len(told) == before


def test_an_exit_is_marked_then_reconciled_and_told_once():
    """The exit is told as the move it made, with what was seen of it (pid, code)."""
    told = []
    sup, _ = make(subscribers=[told.append])
    join_all(sup)
    pid = sup.procs["worker-0"].worker.pid
    sup.on_exit("worker-0", -9)
    exits = [e for e in told if isinstance(e, ev.Exited)]
    assert [(e.process, e.pid, e.code, e.state) for e in exits] == \
        [("worker-0", pid, -9, P.RESTARTING)]
    sup.settle.reconcile(sup.procs["worker-0"])
    assert len([e for e in told if isinstance(e, ev.Exited)]) == 1


def test_a_start_is_told_once_whether_or_not_it_moved():
    """A first start is STARTING before it is made; a restart moves to it: each is told
    as one Spawned."""
    told = []
    sup, host = make(subscribers=[told.append])  # started
    first = [e.process for e in told if isinstance(e, ev.Spawned)]
    assert sorted(first) == sorted(sup.procs)
    join_all(sup)
    sup.on_exit("worker-0", -9)
    host.t += 1.0
    sup.on_tick()
    again = [e for e in told if isinstance(e, ev.Spawned) and e.process == "worker-0"]
    assert len(again) == 2 and sup.procs["worker-0"].state is P.STARTING


def test_a_world_is_moved_by_its_reconcile_from_what_was_marked_on_it():
    """A break is marked, then reconciled: the world breaks once, told once, and (every
    member still alive: a member saw a timeout) forms again at the next generation;
    asked again, nothing more moves or is told."""
    from mwrun.schema import WorldState as W
    told = []
    sup, host = make(subscribers=[told.append])
    join_all(sup)
    world = sup.worlds["world1"]
    generation = world.generation
    world.lost = "worker-0 was killed by SIGKILL"
    sup.book.settle.reconcile(world, host.now())
    assert world.state is W.FORMING and world.breaks == 1 and world.lost is None
    assert world.generation == generation + 1
    broken = [e for e in told if isinstance(e, ev.WorldBroken)]
    assert [(e.world, e.generation) for e in broken] == [("world1", generation)]
    before = len(told)
    sup.book.settle.reconcile(world, host.now())
    assert world.state is W.FORMING and len(told) == before


def test_a_world_the_job_no_longer_wants_closes_once():
    from mwrun.schema import WorldGoal
    from mwrun.schema import WorldState as W
    told = []
    sup, host = make(subscribers=[told.append])
    join_all(sup)
    world = sup.worlds["world1"]
    world.goal = WorldGoal.END
    sup.book.settle.reconcile(world, host.now())
    sup.book.settle.reconcile(world, host.now())
    assert world.state is W.CLOSED
    assert [e.world for e in told if isinstance(e, ev.WorldClosed)] == ["world1"]
