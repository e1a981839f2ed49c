"""Which head an agent serves (host/headship.py): without a grace the head's going ends
the job; with one the job goes on and the libraries' state is kept as it was; a newer
head is told first what runs here and what each library had said, then what was kept.
A real Absence and Recall; the link is a fake that records what it was asked."""

import socket

from mwrun.host.absence import Absence
from mwrun.host.frames import Kind
from mwrun.host.headship import Headship
from mwrun.host.recall import Recall
from tests.unit.test_recall import said, spec


class Link:
    def __init__(self):
        self.watched, self.replaced = True, None

    def unwatch(self) -> None:
        self.watched = False

    def replace(self, fd, first) -> None:
        self.replaced = (fd, first)


def headship(grace: float) -> tuple[Headship, Link, list]:
    link, away = Link(), []
    recall = Recall()
    recall.started(spec("a"))
    recall.spawned("a", 41, True, 1.0)
    recall.heard(said("a", 41, "world", world="w", generation=3, event="ready"))
    ship = Headship(link, Absence(grace, None, lambda: 5.0, lambda: 1e9), recall,
                    "/run/control.sock", lambda: away.append(True))
    return ship, link, away


def test_without_a_grace_the_heads_going_ends_the_job_with_nothing_kept():
    ship, link, away = headship(0)
    assert ship.lost("its link closed") is False
    assert link.watched and not away and ship.said == []


def test_a_newer_head_hears_what_runs_and_what_each_library_said_when_the_head_went():
    ship, link, away = headship(30)
    first = ship.hello("node1", node="n1", jobid="7")
    assert first["kind"] == Kind.HELLO and first["host"] == "node1" and first["node"] == "n1"
    assert ship.lost("its link closed") is True
    assert not link.watched and away == [True]
    # What it says from now on is kept behind the replay (absence.ALWAYS), not in it.
    ship.recall.heard(said("a", 41, "world", world="w", generation=4, event="ready"))
    mine, theirs = socket.socketpair()
    try:
        ship.adopted(mine, 2)
        fd, frames = link.replaced
        hello, *words = frames
        assert hello["host"] == "node1" and (hello["node"], hello["jobid"]) == ("n1", "7")
        assert hello["adopted"]["epoch"] == 2 and set(hello["adopted"]["processes"]) == {"a"}
        assert [w["request"]["generation"] for w in words] == [3]  # as when the head went
        assert not ship.absence.away
    finally:
        theirs.close()
        socket.socket(fileno=fd).close()
