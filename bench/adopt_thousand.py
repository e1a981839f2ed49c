"""What taking a job of 1,000 ranks back costs a new head's CPU, beside what launching
it costs the first head: the decisions alone, on a scripted host (no processes, no
sockets: bench/bin/scripted.py's), so that the figure is the head's own work.

    python bench/adopt_thousand.py            # 1,000 ranks; 3 runs each, medians
    python bench/adopt_thousand.py --ranks 200 --runs 1

1. launch: a Supervisor of N processes in N/2 two-member worlds started, and every
   member's hello and ``ready`` heard, until all run and every world is healthy.
2. adoption: the same job taken back (``Supervisor.start(taken)``): N agents' reports
   read (``Found.read``, each from the JSON an agent sends), the plan rebuilt from the
   launch plan and REVISIONS revision records (membership/replay.py: a serving job of
   N workers scaled by one, REVISIONS times), every start taken as found, and every
   library's words replayed, until all run and every world is healthy.

The goal (issue 34): adoption at 1,000 ranks within 2 s of head CPU. What it leaves
out, and why that is small: the doors' handshakes (one per host: 125 at 8 ranks a
host, each a challenge and an HMAC) and reading the frames (the launch pays as much).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "bin"))
sys.path.insert(0, str(HERE.parent))

from scripted import Host, joined, pairs, pid  # noqa: E402

from mwrun.head.decide import adoption  # noqa: E402
from mwrun.head.decide.adoption import Found  # noqa: E402
from mwrun.head.decide.supervisor import Supervisor  # noqa: E402
from mwrun.membership import replay  # noqa: E402
from mwrun.membership.requests import parse_change  # noqa: E402
from mwrun.membership.revision import Membership  # noqa: E402
from mwrun.plan.inventory import HostInventory  # noqa: E402
from mwrun.plan.placement import place  # noqa: E402
from mwrun.plan.topology import parse  # noqa: E402
from mwrun.schema import ProcessState as P  # noqa: E402
from mwrun.schema import WorldState as W  # noqa: E402

REVISIONS = 100


def all_up(sup) -> bool:
    return all(r.state is P.RUNNING for r in sup.procs.values()) and \
        all(w.state is W.HEALTHY for w in sup.worlds.values())


def launch(n: int) -> float:
    """CPU seconds: a launch's start of N processes (its plan made already, as the
    adoption's is), until all run and every world is healthy."""
    plan = pairs(n, "restart: on-failure")[0].plan
    began = time.process_time()
    sup = Supervisor(plan, Host())
    sup.start()
    joined(sup)
    took = time.process_time() - began
    assert all_up(sup), "the launch did not get every process running"
    return took


def serving_records(n: int) -> tuple:
    """(the launch plan, REVISIONS revision records as a run folder keeps them) of a
    frontend with N - 1 - REVISIONS workers, scaled by one REVISIONS times."""
    text = (f"timeout: 10\nprocesses:\n  frontend: {{cmd: x}}\n  worker:\n    cmd: y\n"
            f"    replicas: {n - 1 - REVISIONS}\n    scale: {{min: 1, max: {n}}}\n"
            f"worlds:\n  pair: {{per: worker, members: [frontend, worker]}}\n")
    inv = {"localhost": HostInventory(True, (0, 1), ())}
    ports = iter(range(20000, 60000))
    topo = parse(text, "s.yaml")
    plan = place(topo, inv, lambda a, t: next(ports))
    m = Membership(topo, plan, inv, None, lambda a, t: next(ports))
    records = []
    for i in range(REVISIONS):
        revision = m.scale([parse_change("worker=+1")], f"op-{i}")
        m.adopt(revision)
        records.append(json.loads(json.dumps(revision.record())))
    return plan, records


def adopt(n: int) -> tuple[float, float]:
    """CPU seconds: (the plan rebuilt from REVISIONS records; N processes taken back
    as found, until all run and every world is healthy)."""
    launched, records = serving_records(n)
    began = time.process_time()
    revised = replay.revised(launched, records)
    rebuilt = time.process_time() - began
    assert len(revised.plan.processes) == n

    # The job to take back: N pairs that ran (their agents' reports, as JSON).
    sup, _ = pairs(n, "restart: on-failure")
    joined(sup)
    told = json.dumps({name: {"pid": pid(rec), "incarnation": 1, "restarts": 0,
                              "warm": True, "generations": {w: 0 for w in rec.plan.worlds},
                              "t": 1.0} for name, rec in sup.procs.items()})
    plan = sup.plan
    began = time.process_time()
    found = {name: seen for name, report in json.loads(told).items()
             if (seen := Found.read(report, "localhost")) is not None}
    new = Supervisor(plan, Host())
    new.start(adoption.taken(replay.revised(plan, []), found, {}))
    joined(new)  # the libraries' words, replayed by their agents
    took = time.process_time() - began
    assert all_up(new) and not any(r.restarts for r in new.procs.values())
    return rebuilt, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    launches, rebuilds, adoptions = [], [], []
    for _ in range(args.runs):  # interleaved: the same machine state for both
        launches.append(launch(args.ranks))
        rebuilt, took = adopt(args.ranks)
        rebuilds.append(rebuilt)
        adoptions.append(took)
    base, plan, mine = (statistics.median(x) for x in (launches, rebuilds, adoptions))
    print(f"{args.ranks} ranks in {args.ranks // 2} worlds, scripted host, median of"
          f" {args.runs}:")
    print(f"  launch's start, every process running and world healthy: {base:.3f} s CPU")
    print(f"  adoption: plan rebuilt from {REVISIONS} revisions {plan:.3f} s, every start"
          f" taken and world healthy {mine:.3f} s: {plan + mine:.3f} s CPU (goal <= 2 s);"
          f" ratio to the launch {(plan + mine) / base:.2f}")


if __name__ == "__main__":
    main()
