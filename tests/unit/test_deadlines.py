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
