"""Run by bench/scale.py: the supervisor's own time for one member's exit (and the
restart it leads to) at 10 and 1,000 processes, with a scripted host (no processes,
no sockets): JSON {"10": seconds, "1000": seconds}, the median of many."""

import json
import statistics
import time

try:
    from mwrun.head.decide.supervisor import TICK, Supervisor
except ImportError:  # the head before its folders (bench/scale.py --baseline)
    from mwrun.head.supervisor import TICK, Supervisor  # type: ignore[no-redef]
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse


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
        return self.pid

    def probe(self, name):
        return "sleeping"

    def signal(self, *args):
        pass

    mark_broken = open_next = close_world = say = signal


def pid(rec) -> int:
    """A process's pid: its Worker's since the head's folders, its record's before."""
    return rec.worker.pid if hasattr(rec, "worker") else rec.pid


def one_exit(n: int, rounds: int = 200) -> float:
    procs = "".join(f"  p{i}: {{cmd: x, restart: on-failure, max_restarts: 100000,"
                    f" restart_backoff: 0}}\n" for i in range(n))
    worlds = "".join(f"  w{i}: {{members: [p{2 * i}, p{2 * i + 1}]}}\n" for i in range(n // 2))
    plan = place(parse(f"timeout: 10\nprocesses:\n{procs}worlds:\n{worlds}", "s.yaml"),
                 {"localhost": HostInventory(True, (0, 1), ())}, lambda a, t: 40000)
    host = Host()
    sup = Supervisor(plan, host)
    sup.start()
    for name, rec in sup.procs.items():
        sup.members.on_hello(name, pid(rec), 1.0)
        for world in rec.plan.worlds:
            sup.members.on_world_event(name, pid(rec), world, sup.worlds[world].generation, "ready")
    took = []
    for _ in range(rounds):
        rec = sup.procs["p0"]
        start = time.perf_counter()
        sup.on_exit("p0", -9)
        sup.deadline()
        took.append(time.perf_counter() - start)
        host.t += TICK
        sup.on_tick()  # restarted (its backoff is 0), outside the measured event
        rec = sup.procs["p0"]
        sup.members.on_hello("p0", pid(rec), 1.0)
        for world in rec.plan.worlds:
            for member in sup.worlds[world].plan.members:
                sup.members.on_world_event(member, pid(sup.procs[member]), world,
                                   sup.worlds[world].generation, "ready")
    return statistics.median(took)


print(json.dumps({"10": one_exit(10), "1000": one_exit(1000)}))
