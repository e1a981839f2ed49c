"""The slow member (head/observe/slowness.py): the rule, and the members' waits the
head keeps from their beats (head/observe/traffic.py)."""

import pytest

from mwrun.head.observe.slowness import FLOOR_S, MIN_CALLS, slow
from mwrun.head.observe.traffic import Traffic
from mwrun.worlds.traffic import Traffic as MemberTraffic


def test_the_member_its_peers_wait_for_is_named():
    found = slow({"a": (100, 0.021), "b": (100, 0.022), "c": (100, 0.001)}, 3)
    assert found is not None and found.member == "c"
    assert found.lag_s == pytest.approx(0.020) and found.calls == 100


@pytest.mark.parametrize("waits, size, why", [
    ({"a": (100, 0.0011), "b": (100, 0.0010), "c": (100, 0.0012)}, 3, "healthy: all alike"),
    ({"a": (100, 0.0040), "b": (100, 0.0001)}, 2, "under the floor"),
    ({"a": (100, 0.300), "b": (100, 0.280)}, 2, "everyone waits on the link"),
    ({"a": (100, 0.021), "b": (100, 0.001), "c": (100, 0.001)}, 3, "two late together"),
    ({"a": (MIN_CALLS - 1, 0.021), "b": (100, 0.001)}, 2, "too few calls"),
    ({"a": (100, 0.021), "b": (100, 0.001)}, 3, "a member told nothing"),
    ({"a": (100, 0.021)}, 1, "a world of one"),
])
def test_no_member_is_named_without_a_clear_verdict(waits, size, why):
    assert slow(waits, size) is None, why


def test_the_floor_is_where_a_lag_begins_to_count():
    assert slow({"a": (100, FLOOR_S + 0.0001), "b": (100, 0.0)}, 2) is not None


def test_a_members_waits_travel_in_its_beats_and_are_compared_over_the_window():
    mine = MemberTraffic()
    for _ in range(20):
        mine.timed(4, 0, 0.0, "all_reduce")  # each call "began" at 0: its wait is the clock
    calls, nbytes, _, _, timed, waited = mine.totals()
    assert (calls, nbytes, timed) == (20, 80, 20) and waited > 0

    head = Traffic()
    for t, (timed, waited) in enumerate([(0, 0.0), (50, 1.0), (100, 2.0)]):
        head.beat("a", 11, float(t), {"w": [timed, 0, 0, 0.1, timed, waited]}, now=float(t))
        head.beat("b", 12, float(t), {"w": [timed, 0, 0, 0.1, timed, waited / 20]},
                  now=float(t))
    waits = head.waits({"a": 11, "b": 12}, "w", now=2.0)
    assert waits["a"] == (100, pytest.approx(0.02)) and waits["b"][1] == pytest.approx(0.001)
    assert slow(waits, 2).member == "b"


def test_a_beat_from_a_library_that_times_nothing_still_counts_its_calls():
    head = Traffic()
    head.beat("a", 11, 0.0, {"w": [0, 0, 0, None]}, now=0.0)
    head.beat("a", 11, 1.0, {"w": [10, 40, 0, 0.1]}, now=1.0)
    assert head.counts() == {"w": (10, 40)}
    assert head.waits({"a": 11}, "w", now=1.0) == {}
