"""Run by bench/scale.py: the supervisor's own time for one member's exit (and the
restart it leads to) at 10 and 1,000 processes, with a scripted host (no processes,
no sockets): JSON {"10": seconds, "1000": seconds}, the median of many."""

import json
import statistics
import time

from scripted import TICK, joined, pairs, pid


def one_exit(n: int, rounds: int = 200) -> float:
    sup, host = pairs(n, "restart: on-failure, max_restarts: 100000, restart_backoff: 0")
    joined(sup)
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
