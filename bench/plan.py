"""How long planning the largest allowed job takes: parsing its topology and placing
every replica (CPU seconds, median of 5), at the full size and at half of it. Linear
placement takes about twice as long for twice the processes; placement was once
quadratic (4.3 s for 4,000 replicas).

    python bench/plan.py
"""

from __future__ import annotations

import statistics
import time

from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import MAX_PROCESSES, parse


def plan_seconds(replicas: int) -> float:
    text = (f"version: 1\nhosts:\n  h: {{addr: 10.0.0.9, cpus: {replicas}}}\n"
            f"processes:\n  w:\n    cmd: run\n    replicas: {replicas}\n    cpus: 1\n"
            "worlds:\n  x:\n    members: [w]\n  y:\n    members: [w]\n")
    started = time.process_time()
    topo = parse(text, "bench.yaml")
    plan = place(topo, {"h": HostInventory(False, tuple(range(replicas)), ())},
                 lambda addr, taken: 40000 + len(taken), here=False)
    took = time.process_time() - started
    assert plan.processes[f"w-{replicas - 1}"].local_rank == replicas - 1
    return took


def main() -> None:
    for replicas in (MAX_PROCESSES // 2, MAX_PROCESSES):
        runs = [plan_seconds(replicas) for _ in range(5)]
        print(f"{replicas:6d} replicas: median {statistics.median(runs):.3f} s"
              f" (min {min(runs):.3f}, max {max(runs):.3f}) of CPU")


if __name__ == "__main__":
    main()
