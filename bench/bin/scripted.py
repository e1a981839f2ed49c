"""What bench/bin/one_exit.py and bench/bin/idle_tick.py share: the supervisor alone
on a scripted host (no processes, no sockets), in this checkout's head or an older
one's (``--baseline``: the head before its folders), a job of pairs, and every member
joined."""

try:
    from mwrun.head.decide.supervisor import TICK, Supervisor
except ImportError:  # the head before its folders
    from mwrun.head.supervisor import TICK, Supervisor  # type: ignore[no-redef]
try:
    from mwrun.head.decide.processbook import Made
    from mwrun.schema import Start
    COLD = Start.COLD
except ImportError:  # an older head: a start made is its pid alone
    def Made(pid, start):  # type: ignore[no-redef]
        return pid
    COLD = None
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse

__all__ = ["TICK", "Host", "joined", "pairs", "pid"]


class Host:
    def __init__(self):
        self.t, self.pid = 100.0, 1000

    def now(self):
        return self.t

    def wall(self):
        return self.t

    def reachable(self, name):
        return True

    def spawn(self, name, *args):
        self.pid += 1
        return Made(self.pid, COLD)

    def probe(self, name):
        return "sleeping"

    def signal(self, *args):
        pass

    mark_broken = open_next = close_world = say = tell = signal


def pid(rec) -> int:
    """A process's pid: its Worker's since the head's folders, its record's before."""
    return rec.worker.pid if hasattr(rec, "worker") else rec.pid


def pairs(n: int, settings: str) -> tuple:
    """A supervisor of ``n`` processes (each with ``settings``) in two-member worlds,
    started on a scripted host: (supervisor, host)."""
    procs = "".join(f"  p{i}: {{cmd: x, {settings}}}\n" for i in range(n))
    worlds = "".join(f"  w{i}: {{members: [p{2 * i}, p{2 * i + 1}]}}\n" for i in range(n // 2))
    plan = place(parse(f"timeout: 10\nprocesses:\n{procs}worlds:\n{worlds}", "s.yaml"),
                 {"localhost": HostInventory(True, (0, 1), ())}, lambda a, t: 40000)
    host = Host()
    sup = Supervisor(plan, host)
    sup.start()
    return sup, host


def joined(sup, beat_every: float = 1.0) -> None:
    """Every member said hello and joined its worlds' current generation."""
    for name, rec in sup.procs.items():
        sup.members.on_hello(name, pid(rec), beat_every)
        for world in rec.plan.worlds:
            sup.members.on_world_event(name, pid(rec), world, sup.worlds[world].generation,
                                       "ready")
