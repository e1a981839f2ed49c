"""The library's events (job.events, job.aevents), the live set of worlds they change,
and what the head says down the supervisor link, parsed: no processes."""

import asyncio
import threading
from types import SimpleNamespace

import pytest

from mwrun import WorldEvent
from mwrun.errors import MwrunError
from mwrun.worlds import orders
from mwrun.worlds.events import EventKind, EventQueue
from mwrun.worlds.job import Job
from mwrun.worlds.roster import Roster
from mwrun.worlds.supervisor_link import MAX_LINE, Lines
from mwrun.worlds.worldspec import WorldSpec

pytestmark = pytest.mark.timeout(30)


def event(kind, world="w", generation=0, reason=None):
    return WorldEvent(EventKind(kind), world, generation, reason)


def test_a_kind_is_its_name():
    assert EventKind.ADDED == "added" and EventKind.RESIZED == "resized"
    assert "broken" in {EventKind.BROKEN} and str(EventKind.REMOVED) == "removed"
    assert {k.value for k in EventKind} == {"added", "draining", "removed", "resized",
                                            "broken", "reformed", "slow"}
    with pytest.raises(AttributeError):  # frozen
        event("added").world = "x"


def test_events_come_in_order_and_a_timeout_ends_the_iteration():
    queue = EventQueue()
    for kind in ("added", "broken", "reformed"):
        queue.post(event(kind))
    assert [e.kind for e in queue.iterate(0)] == ["added", "broken", "reformed"]
    assert list(queue.iterate(0)) == []  # consumed once
    assert list(queue.iterate(0.05)) == []  # none came in time: it ends


def test_a_waiting_consumer_gets_the_next_event_and_ends_when_the_queue_closes():
    queue, seen = EventQueue(), []
    consumer = threading.Thread(target=lambda: seen.extend(queue.iterate(None)))
    consumer.start()
    queue.post(event("draining"))
    queue.post(event("removed"))
    queue.close()
    consumer.join(10)
    assert not consumer.is_alive()
    assert [e.kind for e in seen] == ["draining", "removed"]
    queue.post(event("added"))  # after the close: dropped
    assert list(queue.iterate(0)) == []


def test_the_queue_keeps_the_latest_events_of_a_job_that_never_reads_them():
    queue = EventQueue(kept=3)
    for generation in range(5):
        queue.post(event("broken", generation=generation))
    assert [e.generation for e in queue.iterate(0)] == [2, 3, 4]


def test_async_events_never_block_the_loop_and_end_when_the_queue_closes():
    queue = EventQueue()
    queue.post(event("added"))

    async def main():
        seen, ticks = [], 0
        posted = threading.Event()

        async def consume():
            async for e in queue.aiterate():
                seen.append(e.kind)
                if e.kind == "added":  # the next ones come from another thread
                    threading.Thread(target=post_later, daemon=True).start()

        def post_later():
            posted.wait(10)  # once the loop has shown it still runs
            queue.post(event("broken"))
            queue.post(event("reformed"))
            queue.close()

        task = asyncio.create_task(consume())
        while not task.done():  # the loop keeps running while the consumer waits
            ticks += 1
            if ticks == 3:
                posted.set()
            await asyncio.sleep(0.01)
        return seen, ticks

    seen, ticks = asyncio.run(asyncio.wait_for(main(), 20))
    assert seen == ["added", "broken", "reformed"] and ticks >= 3


class FakeWorld:
    """What the roster reads of a World: its name, generation and draining state."""

    def __init__(self, name, generation=0):
        self.name, self.generation = name, generation
        self.membership = SimpleNamespace(state=self)
        self.draining = False

    def drain(self):
        first, self.draining = not self.draining, True
        return first


def test_the_roster_posts_what_changes_the_live_set_and_only_that():
    roster = Roster(EventQueue())
    init_world, added, ghost = FakeWorld("a"), FakeWorld("b"), FakeWorld("c")
    roster.enter(init_world)  # init's worlds: live from the start, no "added"
    roster.claim(added)
    roster.claim(ghost)
    with pytest.raises(MwrunError, match="has a world named 'b' already"):
        roster.claim(FakeWorld("b"))
    roster.drain("b", 3)  # told while it forms: applies once it has
    roster.tell(added, EventKind.BROKEN, 0, "a member died")  # forming: nobody's business
    assert sorted(roster.snapshot()) == ["a"]
    assert roster.formed(added)
    roster.tell(ghost, EventKind.REMOVED, 0, "drained")  # never formed: leaves quietly
    assert not roster.formed(ghost)
    roster.drain("b", 3)  # once per world
    roster.tell(added, EventKind.RESIZED, 3, "resized: 2 -> 3 members")
    roster.tell(init_world, EventKind.REMOVED, 0, "drained")
    snapshot = roster.snapshot()
    roster.tell(added, EventKind.REMOVED, 4, "gone")
    assert sorted(snapshot) == ["b"] and roster.snapshot() == {}  # a fresh dict each time
    assert [(e.kind, e.world, e.generation, e.reason) for e in roster.events.iterate(0)] == [
        ("added", "b", 0, None), ("draining", "b", 3, None),
        ("resized", "b", 3, "resized: 2 -> 3 members"), ("removed", "a", 0, "drained"),
        ("removed", "b", 0, "gone")]
    assert roster.everything() == []


def test_the_head_s_orders_parse_and_anything_else_is_ignored():
    add = orders.parse(b'{"verb": "add", "world": "pair-2", "spec": {"rank": 0, "size": 2,'
                       b' "addr": "127.0.0.1", "port": 29600, "backend": "gloo",'
                       b' "timeout": 10, "generation": 3, "rejoin": 40}}')
    assert add == orders.Add("pair-2", WorldSpec(rank=0, size=2, port=29600, timeout=10.0,
                                                 generation=3, host_store=False, rejoin=40.0))
    assert orders.parse('{"verb": "drain", "world": "pair-2", "generation": 3,'
                        ' "deadline": 30}') == orders.Drain("pair-2", 3, 30.0)
    assert orders.parse('{"verb": "reply", "id": "7", "ok": true, "desired": 3}') == \
        orders.Reply("7", True, None, {"desired": 3})
    assert orders.parse('{"verb": "reply", "id": "8", "ok": false, "error": "no"}') == \
        orders.Reply("8", False, "no", {})
    for line in [b"", b"not json", b"[1, 2]", b'"add"', b'{"verb": "explode"}',
                 b'{"verb": ["add"]}', b'{"world": "w"}', b'{"verb": "add", "world": "w"}',
                 b'{"verb": "add", "world": "w", "spec": {"rank": 5, "size": 2,'
                 b' "addr": "a", "port": 1}}', b'{"verb": "add", "world": 3, "spec": {}}',
                 b'{"verb": "drain", "world": "w", "generation": "soon"}',
                 b'{"verb": "reply", "id": 7, "ok": true}', b'\xff\xfe',
                 b'{"verb": "slow", "world": "w"}',
                 b'{"verb": "slow", "world": "w", "generation": 1, "member": 3}',
                 b'{"verb": "slow", "world": "w", "generation": 1, "lag_s": "x"}']:
        assert orders.parse(line) is None, line
    assert orders.parse('{"verb": "slow", "world": "w", "generation": 2, "member": "m2",'
                        ' "lag_s": 0.02, "calls": 50}') == orders.Slow("w", 2, "m2", 0.02, 50)
    assert orders.parse('{"verb": "slow", "world": "w", "generation": 2, "member": null}') \
        == orders.Slow("w", 2, None)
    assert orders.parse('{"verb": "late", "world": "w", "delay": 0.02, "for": 30}') == \
        orders.Late("w", 0.02, 30.0)
    for late in ('{"verb": "late", "world": "w", "delay": 0, "for": 30}',
                 '{"verb": "late", "world": "w", "delay": 11, "for": 30}',
                 '{"verb": "late", "world": "w", "delay": 0.1, "for": -1}',
                 '{"verb": "late", "world": "w", "delay": 0.1}'):
        assert orders.parse(late) is None, late


def test_a_slow_member_is_an_event_of_a_live_world_only():
    roster = Roster(EventQueue())
    live, forming = FakeWorld("a"), FakeWorld("b")
    roster.enter(live)
    roster.claim(forming)
    roster.slow("a", 3, "worker-1", 0.02)
    roster.slow("b", 0, "worker-2", 0.02)  # not formed yet: nobody's business
    roster.slow("gone", 0, "worker-3", 0.02)
    roster.slow("a", 3, None, None)
    got = list(roster.events.iterate(0))
    assert [(e.kind, e.world, e.generation, e.member, e.lag_s) for e in got] == [
        ("slow", "a", 3, "worker-1", 0.02), ("slow", "a", 3, None, None)]
    assert got[0].reason == "its peers wait for worker-1: 20 ms more per collective"
    assert got[1].reason == "no member is waited for any more"


def test_lines_are_cut_where_they_end_and_an_overlong_one_is_dropped():
    lines = Lines()
    assert lines.feed(b'{"a": 1}\n{"b"') == [b'{"a": 1}']
    assert lines.feed(b': 2}\n\n') == [b'{"b": 2}']
    assert lines.feed(b"x" * (MAX_LINE + 1)) == []
    assert lines.feed(b"x" * 10 + b'\n{"c": 3}\n') == [b'{"c": 3}']


def test_scale_needs_the_launcher_and_a_count():
    job = Job()
    with pytest.raises(MwrunError, match="needs a job started by 'mwrun launch'"):
        job.scale("worker", 3)
    from mwrun.worlds.job import _count

    assert [_count(n) for n in (6, 0, "+1", "-2", "4")] == ["6", "0", "+1", "-2", "4"]
    for bad in (-1, True, 1.5, "two", "+", "1-"):
        with pytest.raises(MwrunError, match="scale to a number of replicas"):
            _count(bad)
    job.close()
    assert list(job.events(0)) == [] and list(job.events(None)) == []  # closed: ends
