"""Every state move of the head is checked against its machine's table (schema.py):
a move the machine does not draw is a bug, raised where it happens."""

import pytest

from mwrun import schema
from mwrun.head.decide.moves import IllegalMove, checked
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W
from tests.unit.test_supervisor import join_all, make


@pytest.mark.parametrize(("table", "states"), [(schema.PROCESS_MOVES, P),
                                               (schema.WORLD_MOVES, W), (schema.RUN_MOVES, R)])
def test_every_state_has_its_moves_and_a_final_one_none(table, states):
    assert set(table) == set(states)
    for state, to in table.items():
        assert to <= set(states)
        if getattr(state, "final", False):
            assert to == frozenset()


def test_a_move_not_drawn_raises_and_changes_nothing():
    assert checked(schema.PROCESS_MOVES, "process a", P.RUNNING, P.HUNG) is P.HUNG
    with pytest.raises(IllegalMove, match="process a may not move exited -> running"):
        checked(schema.PROCESS_MOVES, "process a", P.EXITED, P.RUNNING)
    sup, _ = make()
    join_all(sup)
    rec = sup.procs["worker-0"]
    with pytest.raises(IllegalMove):
        sup.processes.move(rec, P.STARTING)  # RUNNING -> STARTING is no arrow
    assert rec.state is P.RUNNING and sup.processes.tally[P.RUNNING] == len(sup.procs)
    world = sup.worlds["world1"]
    with pytest.raises(IllegalMove, match="world world1 may not move healthy -> healthy"):
        sup.book.move(world, W.HEALTHY)
    assert world.state is W.HEALTHY


def test_a_job_moves_only_along_its_machines_arrows():
    """A whole life, with every mover checking: exits, restarts, a stop."""
    sup, host = make()
    join_all(sup)
    sup.on_exit("worker-0", -9)
    assert sup.procs["worker-0"].state is P.RESTARTING
    host.t += 1.0
    sup.on_tick()
    assert sup.procs["worker-0"].state is P.STARTING
    sup.request_stop()
    for name in list(sup.procs):
        sup.on_exit(name, -15)
    assert sup.state is R.FINISHED  # stopped on request: every exit expected
