"""Traffic: counts in the library, rates at the supervisor, keys of plain groups."""

import time

import pytest
import torch

from mwrun.head.observe.traffic import WINDOW, Traffic
from mwrun.keeper.stores import plain_ranks
from mwrun.protocol import CALL_TIME_BOUNDS
from mwrun.worlds import backends
from mwrun.worlds.beats import TRAFFIC_TAIL, beat_due
from mwrun.worlds.world import World
from mwrun.worlds.worldspec import WorldSpec


class Done:
    def wait(self, *args):
        return True

    def is_completed(self):
        return True


class Idle:
    """A stand-in group whose calls complete at once."""

    def send(self, *args):
        return Done()

    recv = allreduce = allgather = send


def idle_world():
    world = World("w", WorldSpec(rank=0, size=2))
    backend = backends.Backend("gloo", Idle(), torch.device("cpu"))
    assert world.membership.state.formed(0, 0, 2, backend, ended=lambda: False)
    return world


def test_completed_calls_are_counted_with_their_bytes():
    world = idle_world()
    assert world.traffic.totals() == (0, 0, 0, None, 0, 0.0)
    t = torch.ones(256)  # 1 KiB
    world.send(t, 1)
    world.recv(t, 1)
    world.all_reduce(torch.ones(4, dtype=torch.float64))
    work = world.all_reduce(t, async_op=True)
    assert world.traffic.totals()[:2] == (3, 2048 + 32)  # not done until waited for
    work.wait()
    work.wait()  # waited twice, counted once
    calls, nbytes, failures, age, timed, waited = world.traffic.totals()
    assert (calls, nbytes, failures) == (4, 3072 + 32, 0) and 0 <= age < 1.0
    assert timed == 1 and waited >= 0  # the one collective waited for in its call
    # each blocking call's time in a bucket, per operation; the async one untimed
    times = world.traffic.times()
    assert sorted(times) == ["all_reduce", "recv", "send"]
    assert [sum(row[:-1]) for row in times.values()] == [1, 1, 1]
    assert all(len(row) == len(CALL_TIME_BOUNDS) + 2 and row[-1] >= 0
               for row in times.values())


def test_a_calls_time_lands_in_the_first_bucket_at_or_above_it():
    from mwrun.worlds.traffic import Traffic as MemberTraffic

    mine = MemberTraffic()
    for took in (0.0001, 0.00011, 0.003, 11.0):
        mine._took("barrier", took)
    row = mine.times()["barrier"]
    assert row[0] == 1 and row[1] == 1  # le 0.0001 holds 0.0001 itself; 0.00011 the next
    assert row[CALL_TIME_BOUNDS.index(0.005)] == 1 and row[len(CALL_TIME_BOUNDS)] == 1
    assert row[-1] == pytest.approx(11.00321)


def test_a_member_made_late_comes_late_to_every_call_until_its_time_is_up():
    world = idle_world()
    world.be_late(0.05, 60.0)
    before = time.monotonic()
    world.all_reduce(torch.ones(4))
    world.send(torch.ones(4), 1)
    took = time.monotonic() - before
    assert took >= 0.1  # a sleep before each call, never shorter
    # its own wait in the all_reduce is timed after the sleep (it arrived late, and
    # waits least, as the slow member does): never more than what the sleeps left
    assert world.traffic.totals()[5] <= took - 0.1
    world.be_late(0.05, 0.01)
    time.sleep(0.02)
    world.all_reduce(torch.ones(4))  # its time is up: on time again, and forgotten
    assert world._calls.late is None


def test_a_failed_call_counts_as_a_failure_not_a_call():
    world = idle_world()

    class Failing(Idle):
        def send(self, *args):
            raise RuntimeError("Connection closed by peer [127.0.0.1]:1")

    world.membership.state.take_group()
    failing = backends.Backend("gloo", Failing(), torch.device("cpu"))
    world.membership.state.formed(0, 0, 2, failing, ended=lambda: False)
    with pytest.raises(RuntimeError):  # BrokenWorldError, a RuntimeError
        world.send(torch.ones(1), 1)
    assert world.traffic.totals()[:3] == (0, 0, 1)


def beats(traffic, process, pid, start, rate, size, seconds, now=0.0):
    for i in range(seconds + 1):
        traffic.beat(process, pid, start + i, {"w": [rate * i, rate * i * size, 0, 0.01]},
                     now + i)


def test_rates_come_from_the_members_own_clock_over_the_window():
    traffic = Traffic()
    beats(traffic, "leader", 10, 1000.0, 20, 4096, 8)
    beats(traffic, "worker", 11, 5000.0, 10, 4096, 8)  # another clock, half the pace
    view = traffic.view({"leader": 10, "worker": 11}, "w", now=8.2)
    assert view["calls_per_s"] == 20.0 and view["bytes_per_s"] == 20 * 4096.0
    assert view["last_call_age_s"] == 0.21 and view["failures"] == 0
    assert traffic.per_member("worker", 11, ["w"], 8.2)["w"]["calls_per_s"] == 10.0


def test_a_restarted_member_counts_afresh_and_an_old_one_is_not_shown():
    traffic = Traffic()
    beats(traffic, "worker", 11, 0.0, 10, 4, 6)
    assert traffic.view({"worker": 12}, "w", now=6.0)["calls_per_s"] is None
    beats(traffic, "worker", 12, 100.0, 5, 4, 3, now=10.0)  # counts from zero again
    assert traffic.view({"worker": 12}, "w", now=13.0)["calls_per_s"] == 5.0


def test_a_member_that_stopped_beating_shows_no_rate():
    traffic = Traffic()
    beats(traffic, "worker", 11, 0.0, 10, 4, 6)
    assert traffic.view({"worker": 11}, "w", now=6.5)["calls_per_s"] == 10.0
    assert traffic.view({"worker": 11}, "w", now=20.0)["calls_per_s"] == 0.0


def test_plain_gloo_rendezvous_keys_name_their_ranks():
    assert plain_ranks([]) == set()
    keys = ["default_pg/0//cpu//0/0", "default_pg/0//cpu//0/2"]
    assert plain_ranks(keys) == {0, 2}
    assert plain_ranks([*keys, "default_pg/0//cpu//0/1", "default_pg/1//cpu//0/0"]) == {0, 1, 2}
    assert plain_ranks(["default_pg/0//cuda//0/ncclUniqueId"]) is None  # cannot tell


def test_beats_come_once_a_second_while_traffic_moves_and_at_the_interval_when_idle():
    # step 1 s (TRAFFIC_EVERY), interval 5 s: the last move was at t=10
    def due(now, sent_at):
        return beat_due(now, sent_at, moved_at=10.0, interval=5.0, step=1.0)

    assert due(11.0, 10.0) and due(15.0, 14.0)  # moving, and for TRAFFIC_TAIL after
    assert TRAFFIC_TAIL == WINDOW  # so the supervisor's rates fall to 0 in steps
    assert not due(16.0, 15.0) and not due(19.0, 15.0)  # idle, liveness not yet due
    assert due(19.6, 15.0) and due(20.0, 15.0)  # a check that woke a little early counts
    # an interval shorter than the traffic pace beats at every check
    assert beat_due(100.0, 99.95, moved_at=0.0, interval=0.05, step=0.05)


def test_a_worlds_count_for_the_history_never_goes_back_when_a_member_restarts():
    """The restarted member counts from zero again: its earlier incarnation's count is
    carried, and the world's count is its busiest member's."""
    traffic = Traffic()
    traffic.beat("leader", 10, 1.0, {"w": [40, 0, 0, 0.1]}, now=100.0)
    traffic.beat("worker", 11, 1.0, {"w": [39, 0, 0, 0.1]}, now=100.2)
    assert traffic.totals(now=101.0, wall=5000.0) == {"w": [40, 4999.2]}
    traffic.beat("worker", 12, 0.5, {"w": [3, 0, 0, 0.1]}, now=102.0)  # restarted
    traffic.beat("leader", 10, 2.0, {"w": [41, 0, 0, 0.1]}, now=102.0)
    assert traffic.totals(now=102.5, wall=5001.5) == {"w": [42, 5001.0]}  # 39 + 3
    traffic.beat("leader", 13, 0.2, {"w": [0, 0, 0, None]}, now=103.0)  # the leader too
    assert traffic.totals(now=103.0, wall=5002.0)["w"][0] == 42
