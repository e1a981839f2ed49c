"""Run by bench/ticks.py: the supervisor's own work on a tick with nothing due, at 10
and 1,000 processes, every member joined and beating on time, with a scripted host:
JSON {"10": {"seconds", "checks", "calls"}, "1000": {...}}. ``seconds`` is the median
of many ticks (the garbage collector off while timed, as timeit does: the beats'
garbage is not the tick's; not collected just before either, which walked every record
and timed the tick on a cold cache), ``checks`` the hang checks a tick made, ``calls`` the
Python calls of one tick (no clock, no cache: the work itself)."""

import gc
import json
import statistics
import sys
import time

from scripted import TICK, joined, pairs, pid

try:
    from mwrun.head.decide import hangs
except ImportError:  # the head before its folders
    from mwrun.head import hangs  # type: ignore[no-redef]

judged = [0]
judge = hangs.judge


def counted(*args, **kwargs):
    judged[0] += 1
    return judge(*args, **kwargs)


hangs.judge = counted


def beat(sup) -> None:
    for name, rec in sup.procs.items():  # every member beats on time (not timed)
        sup.members.on_heartbeat(name, pid(rec), 1.0)


def idle_tick(n: int, ticks: int = 400) -> dict:
    sup, host = pairs(n, "hang_timeout: 30")
    joined(sup)
    took, checks = [], []
    for _ in range(ticks):
        host.t += TICK
        beat(sup)
        before = judged[0]
        gc.disable()  # as timeit does; a collection just before would time a cold cache
        start = time.perf_counter()
        sup.on_tick()
        took.append(time.perf_counter() - start)
        gc.enable()
        checks.append(judged[0] - before)
    calls = [0]

    def count(frame, event, arg):
        if event in ("call", "c_call"):
            calls[0] += 1

    host.t += TICK
    beat(sup)
    sys.setprofile(count)
    sup.on_tick()
    sys.setprofile(None)
    return {"seconds": statistics.median(took), "checks": statistics.mean(checks),
            "calls": calls[0]}


print(json.dumps({str(n): idle_tick(n) for n in (10, 1000)}))
