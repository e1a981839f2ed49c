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
