"""The head's work on a tick with nothing due, at 10 and at 1,000 processes: what the
supervisor costs a job that is only running (every member joined and beating on time).

    python bench/ticks.py                              # this checkout
    python bench/ticks.py --baseline /path/to/checkout # and another, side by side

A scripted host (no processes, no sockets), as bench/bin/one_exit.py: every process says
hello (it beats every second), joins its world, and beats once a tick; then the
supervisor's ``on_tick`` is timed at each tick (the median of many, the garbage
collector off while timed, as timeit does: the beats' garbage is not the tick's). Its ratio 1,000 /
10 is what "nothing scans every process on a tick" means: a tick should cost what is
due, not what runs. Printed with the number of per-process hang checks a tick made.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Run in a fresh interpreter per checkout (PYTHONPATH), from elsewhere so that ``-c``
# does not put this folder first on the path; both layouts of the head are read.
CODE = r'''
import gc, json, statistics, sys, time
try:
    from mwrun.head.decide import hangs
    from mwrun.head.decide.supervisor import TICK, Supervisor
except ImportError:  # the head before its folders
    from mwrun.head import hangs
    from mwrun.head.supervisor import TICK, Supervisor
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


judged = [0]
judge = hangs.judge
def counted(*args, **kwargs):
    judged[0] += 1
    return judge(*args, **kwargs)
hangs.judge = counted


def idle_tick(n, ticks=400):
    procs = "".join(f"  p{i}: {{cmd: x, hang_timeout: 30}}\n" for i in range(n))
    worlds = "".join(f"  w{i}: {{members: [p{2 * i}, p{2 * i + 1}]}}\n" for i in range(n // 2))
    plan = place(parse(f"timeout: 10\nprocesses:\n{procs}worlds:\n{worlds}", "s.yaml"),
                 {"localhost": HostInventory(True, (0, 1), ())}, lambda a, t: 40000)
    host = Host()
    sup = Supervisor(plan, host)
    sup.start()
    def pid(rec):  # a Worker per start since the head's folders; the record's before
        return rec.worker.pid if hasattr(rec, "worker") else rec.pid

    for name, rec in sup.procs.items():
        sup.members.on_hello(name, pid(rec), 1.0)
        for world in rec.plan.worlds:
            sup.members.on_world_event(name, pid(rec), world, 0, "ready")
    took, checks = [], []
    for _ in range(ticks):
        host.t += TICK
        for name, rec in sup.procs.items():  # every member beats on time (not timed)
            sup.members.on_heartbeat(name, pid(rec), 1.0)
        before = judged[0]
        gc.collect()  # the beats' garbage is theirs: collected outside the timed tick
        gc.disable()  # as timeit does
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
    for name, rec in sup.procs.items():
        sup.members.on_heartbeat(name, pid(rec), 1.0)
    sys.setprofile(count)  # the work of one more tick, in calls: no clock, no cache
    sup.on_tick()
    sys.setprofile(None)
    return statistics.median(took), statistics.mean(checks), calls[0]


out = {}
for n in (10, 1000):
    seconds, checks, calls = idle_tick(n)
    out[str(n)] = {"seconds": seconds, "checks": checks, "calls": calls}
print(json.dumps(out))
'''


def measure(checkout: Path | None) -> dict:
    env = {**os.environ, **({"PYTHONPATH": str(checkout)} if checkout else {})}
    result = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True,
                            text=True, cwd=tempfile.gettempdir())
    if result.returncode != 0:
        sys.exit(f"the tick bench did not run in {checkout or 'this checkout'}:\n"
                 f"{result.stderr.strip()}")
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to run side by side")
    args = parser.parse_args()
    runs = [("this", None)] + ([("baseline", args.baseline)] if args.baseline else [])
    for label, checkout in runs:
        found = measure(checkout)
        small, large = found["10"], found["1000"]
        print(f"[{label}] a tick with nothing due: {small['seconds'] * 1e6:.1f} us at 10"
              f" processes ({small['checks']:.1f} hang checks, {small['calls']} calls),"
              f" {large['seconds'] * 1e6:.1f} us at 1,000 ({large['checks']:.1f} hang"
              f" checks, {large['calls']} calls): ratio in time"
              f" {large['seconds'] / small['seconds']:.2f}, in calls"
              f" {large['calls'] / small['calls']:.2f} (goal <= 1.5)")


if __name__ == "__main__":
    main()
