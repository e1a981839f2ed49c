"""``world.release()`` under the launcher: a drain is let go (the head told), and a
world that is not draining is left as it is, never an error: a ``draining`` event is
read after ``job.worlds`` changed (a frontend's CI run released a world of the same
name added since its drain ended, and died of the error)."""

from mwrun.errors import WorldClosedError
from mwrun.protocol import WorldReport
from mwrun.worlds.world import World
from mwrun.worlds.worldspec import WorldSpec


class Link:
    """The head's link as a member's world sees it: what it was told."""

    def __init__(self):
        self.told: list[tuple] = []

    def world_event(self, name, generation, report, *more) -> None:
        self.told.append((name, generation, report))


def world(link) -> World:
    return World("pair-2", WorldSpec(rank=0, size=2, port=1), link=link)


def test_a_draining_world_is_let_go_and_the_head_told():
    link = Link()
    w = world(link)
    w.membership.state.drain()
    assert w.release() is True
    assert link.told == [("pair-2", w.generation, WorldReport.RELEASED)]


def test_a_world_not_draining_or_whose_drain_is_over_is_left_alone():
    link = Link()
    added_since = world(link)  # a new world under the drained one's name
    assert added_since.release() is False
    drained = world(link)
    drained.membership.state.drain()
    drained.membership.close_for_good(WorldClosedError("pair-2", 0, "drained"))
    assert drained.release() is False  # closed at drain_timeout before the event was read
    assert link.told == []
