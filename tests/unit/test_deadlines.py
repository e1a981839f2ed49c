"""The supervisor's timers: one heap, moved and cleared deadlines skipped."""

from mwrun.head.decide.deadlines import Deadlines


def test_deadlines_come_due_in_order_once_and_moved_or_cleared_ones_are_skipped():
    timers = Deadlines()
    assert timers.earliest() is None and timers.due(1e9) == []
    timers.set("a", 5.0)
    timers.set("b", 3.0)
    timers.set("c", 4.0)
    timers.set("b", 6.0)  # moved later
    timers.clear("c")
    assert timers.earliest() == 5.0
    assert timers.due(4.9) == []
    assert timers.due(10.0) == ["a", "b"]
    assert timers.due(10.0) == [] and timers.earliest() is None


def test_the_heap_agrees_with_a_plain_dict_through_any_sets_clears_and_dues():
    """Moved in place, taken out, come due: against the obvious (a dict of deadlines),
    over many seeded sequences, its order and its index checked after every step."""
    import random

    for seed in range(200):
        pick, timers, wanted = random.Random(seed), Deadlines(), {}
        for _ in range(300):
            key, roll = pick.randrange(30), pick.random()
            if roll < 0.5:
                when = pick.randrange(100)
                timers.set(key, when)
                wanted[key] = when
            elif roll < 0.7:
                timers.clear(key)
                wanted.pop(key, None)
            else:
                now = pick.randrange(100)
                due = timers.due(now)
                assert sorted(due) == sorted(k for k, w in wanted.items() if w <= now)
                assert [wanted[k] for k in due] == sorted(wanted[k] for k in due)
                for k in due:
                    del wanted[k]
            assert timers.earliest() == min(wanted.values(), default=None)
            assert len(timers) == len(wanted)
            assert all(timers.when(k) == w for k, w in wanted.items())


def test_the_grid_puts_a_deadline_on_the_next_tick_and_a_turn_after_now():
    from mwrun.head.decide.deadlines import next_on_grid, on_grid

    assert on_grid(100.0, 0.5) == 100.0 and on_grid(100.01, 0.5) == 100.5
    assert next_on_grid(100.0, 0.5) == 100.5 and next_on_grid(100.49, 0.5) == 100.5


def test_a_jobs_looks_and_turns_fall_due_together_on_the_ticks_grid():
    """Every look at a silent process and the awake clock's turn are due on multiples of
    TICK: one wakeup of the loop for them all, never one per late beat."""
    from mwrun.head.decide.deadlines import Timer
    from mwrun.head.decide.supervisor import TICK
    from tests.unit.test_supervisor import join_all, make

    sup, host = make()
    join_all(sup)
    host.t += 0.123  # the beats come at any moment, not on the grid
    for name, rec in sup.procs.items():
        sup.members.on_heartbeat(name, rec.worker.pid, 1.0)
    due = [sup.timers.when((kind, name)) for kind in (Timer.LOOK, Timer.AWAKE)
           for name in [*sup.procs, ""] if (kind, name) in sup.timers]
    assert len(due) == len(sup.procs) + 1
    assert all(abs(when / TICK - round(when / TICK)) < 1e-9 for when in due), due
