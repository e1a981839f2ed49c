"""What scaling a running job costs: issue 26's figures, with mwrun's default settings.

    python bench/elastic.py                  # everything this machine can do (ssh: root)
    python bench/elastic.py --adds 20 --only local,resize,head

1. local: the serving job (examples/serving, a frontend answering 100 requests/s
   through its workers, one world each). 20 times ``mwrun scale worker=+1``: from the
   command's start to the frontend's first answered request on the new world (the
   replica's ``first_call`` phase; goal: median <= 0.3 s, max <= 1 s), and ``mwrun scale
   worker=-1`` after each: the frontend's failed requests (goal: 0) and its pace during
   the drains against its pace before (goal: >= 99 %). Then ``worker=+8`` in one
   command: to every new world's first answered request (goal: <= 2 s).
2. ssh: the same +1 with the worker on an ssh host (a network namespace with a real
   sshd, tests/integration/testbed.py; goal: median <= 0.5 s).
3. resize: a world of 8 trainers (all_reduce in a loop) resized to 9: from the command
   to every member's first call at the new size (goal: <= 1 s).
4. head: the head's own CPU per scale operation (+1, its worlds formed, -1, its drain
   released, gone), on a scripted host, at 10 and at 1,000 processes (goal: ratio <= 2).

Every figure is printed beside the machine's load; they go to bench/README.rst.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bench.common import Launched, wait_for  # noqa: E402

PY = sys.executable
SERVING = ROOT / "examples" / "serving"


def serve_yaml(work: Path, hosts: str = "", worker_host: str = "", replicas: int = 1) -> Path:
    path = work / "serve.yaml"
    on_head = ", host: head" if hosts else ""
    path.write_text(f"""\
version: 1
name: serve
{hosts}processes:
  frontend: {{cmd: [{PY}, {SERVING / 'frontend.py'}, --rate, '100']{on_head}}}
  worker:
    cmd: [{PY}, {SERVING / 'worker.py'}, --work, '0.005']
    replicas: {replicas}
    scale: {{min: 1, max: 16}}
    drain_timeout: 10{f'''
    host: {worker_host}''' if worker_host else ''}
worlds:
  pair:
    per: worker
    members: [frontend, worker]
""")
    return path


def mwrun(home: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    """(wall time the command started, its result)."""
    started = time.time()
    done = subprocess.run([PY, "-m", "mwrun", *args], capture_output=True, text=True,
                          env={**os.environ, "MWRUN_HOME": str(home)}, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"mwrun {' '.join(args)} failed: {done.stderr}")
    return started, done


def records(home: Path, kind: str) -> list[dict]:
    run = next((home / "runs").iterdir())
    out = []
    for line in (run / "history.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == kind:
            out.append(record)
    return out


def first_calls(job: Launched, op: str, wait: float = 30.0) -> list[float]:
    """The first_call phase of each replica ``op`` added (its scale record is written
    once the first call is known)."""
    def found() -> list[float] | None:
        added = [r for r in records(job.home, "scale") if r["op"] == op and r["change"] == "add"]
        if added and all(r["phases"]["first_call"] is not None for r in added):
            return [r["phases"]["first_call"] for r in added]
        return None

    return wait_for(found, job.gone, wait, f"{op}: a first call on its new worlds", every=0.2)


def op_of(done: subprocess.CompletedProcess) -> str:
    return done.stdout.split(":", 1)[0]


def frontend(job: Launched) -> list[str]:
    """What the frontend said (its lines without the prefix, which the console pads to
    the longest process name)."""
    return [line.partition(" | ")[2] for line in job.lines
            if line.partition(" | ")[0].strip() == "frontend"]


def served(job: Launched) -> tuple[int, float]:
    """The frontend's last 'served N requests in Ts, ...' line: (N, T)."""
    for line in reversed(frontend(job)):
        if line.startswith("served "):
            words = line.split()
            return int(words[1]), float(words[4].rstrip("s,"))
    return 0, 0.0


def failed(job: Launched) -> list[str]:
    return [line for line in frontend(job) if line.startswith("request ") and "failed" in line]


def additions(work: Path, adds: int, hosts: str = "", worker_host: str = "") -> dict:
    home = work / f"home-{worker_host or 'local'}"
    job = Launched(serve_yaml(work, hosts, worker_host), home)
    try:
        job.healthy(180)
        time.sleep(3.0)  # the frontend's pace before anything is scaled
        one, drains, before = [], [], served(job)
        for _ in range(adds):
            started, done = mwrun(home, "scale", "worker=+1")
            one.append(max(first_calls(job, op_of(done))) - started)
            mwrun(home, "scale", "worker=-1")
            drains.append(op_of(done))
        after = served(job)
        result = {"one": one, "failed": failed(job)}
        if not worker_host:
            started, done = mwrun(home, "scale", "worker=+8")
            result["eight"] = max(first_calls(job, op_of(done))) - started
            result["pace"] = (after[0] - before[0]) / max(after[1] - before[1], 1e-9) / 100.0
        return result
    finally:
        job.stop()


def resize(work: Path, members: int = 8) -> float:
    path = work / "train.yaml"
    path.write_text(f"""\
version: 1
name: train
processes:
  trainer:
    cmd: [{PY}, {ROOT / 'tests' / 'bin' / 'trainer.py'}]
    replicas: {members}
    scale: {{min: 1, max: {members + 1}}}
worlds:
  all: {{members: [trainer]}}
""")
    home = work / "home-train"
    job = Launched(path, home)
    try:
        job.healthy(180)
        for _ in range(members):
            job.expect_where(lambda _, v: v.get("event") == "sum" and v.get("size") == members)
        started, _ = mwrun(home, "scale", f"trainer={members + 1}")
        firsts = [job.expect_where(lambda _, v: v.get("event") == "sum"
                               and v.get("size") == members + 1)["t"]
                  for _ in range(members + 1)]
        return max(firsts) - started
    finally:
        job.stop()


def head_cost(processes: int, rounds: int = 200) -> float:
    """The head's CPU seconds per scale operation (+1 formed, -1 released and gone), on
    a scripted host: a frontend and ``processes - 1`` workers, one world each."""
    from mwrun.head.decide import events as ev
    from mwrun.head.decide.supervisor import Supervisor
    from mwrun.head.observe.scaleops import Ops
    from mwrun.membership.requests import parse_change
    from mwrun.membership.revision import Membership
    from mwrun.plan.inventory import HostInventory
    from mwrun.plan.placement import place
    from mwrun.plan.topology import parse

    topo = parse(f"""\
processes:
  frontend: {{cmd: x}}
  worker: {{cmd: y, replicas: {processes - 1}, scale: {{min: 1, max: {processes + 8}}}}}
worlds:
  pair: {{per: worker, members: [frontend, worker]}}
""", "bench.yaml")
    inv = {"localhost": HostInventory(True, (0, 1), ())}
    ports = iter(range(10000, 60000))
    plan = place(topo, inv, lambda a, t: next(ports))
    host = ScriptedHost()
    ops = Ops(lambda record: None, time.time)
    sup = Supervisor(plan, host, ev.Events((ops,)), grace=1.0)
    sup.start()
    membership = Membership(topo, plan, inv, None, lambda a, t: next(ports))
    for name in list(sup.procs):
        host.join(sup, name)
    began = time.process_time()
    for n in range(rounds):
        for change in ("worker=+1", "worker=-1"):
            rev = membership.scale([parse_change(change)], f"op-{n}-{change}")
            ops.begin(rev.op, change, rev, {r: list(sup.procs[r].plan.worlds)
                                            for r in rev.retired})
            membership.adopt(rev)
            sup.revise(rev)
            for name in rev.started:
                host.join(sup, name)
                host.join(sup, "frontend", only=rev.worlds)
            for name in rev.retired:
                for world in list(sup.procs[name].plan.worlds):
                    fe = sup.procs["frontend"]
                    sup.members.on_world_event("frontend", fe.worker.pid, world, 0,
                                               "released")
                sup.on_exit(name, 0)  # its world closed: it ends by itself
                membership.gone(name)
    return (time.process_time() - began) / (2 * rounds)


class ScriptedHost:
    """The supervisor's host with nothing behind it: starts give pids, the rest is
    dropped (what the head itself decides is what is measured)."""

    def __init__(self):
        self.t, self.pid = 100.0, 1000

    def now(self):
        return self.t

    def wall(self):
        return 1.8e9 + self.t

    def spawn(self, name, generations, restarts, incarnation):
        from mwrun.head.decide.processbook import Made
        from mwrun.schema import Start
        self.pid += 1
        return Made(self.pid, Start.COLD)

    def join(self, sup, name, only=None):
        """A process's library joining its worlds (``only``: these; it said hello)."""
        rec = sup.procs[name]
        if only is None:
            sup.members.on_hello(name, rec.worker.pid, 1.0)
        for world in (rec.plan.worlds if only is None else only):
            if world in sup.worlds and world in rec.plan.worlds:
                sup.members.on_world_event(name, rec.worker.pid, world,
                                           sup.worlds[world].generation, "ready")

    def __getattr__(self, name):  # signal, probe, reachable, tell, the stores' writes
        return lambda *args, **kwargs: True if name == "reachable" else None


def load() -> str:
    return "load " + "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adds", type=int, default=20)
    parser.add_argument("--only", default="local,ssh,resize,head")
    args = parser.parse_args()
    only = set(args.only.split(","))
    print(f"bench/elastic.py on {os.cpu_count()} cores, {load()}, {time.strftime('%Y-%m-%d')}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "head" in only:
            small, big = head_cost(10), head_cost(1000)
            print(f"head CPU per scale operation: {small * 1e3:.2f} ms at 10 processes,"
                  f" {big * 1e3:.2f} ms at 1,000: ratio {big / small:.2f} (goal <= 2)")
        if "local" in only:
            found = additions(work, args.adds)
            one = found["one"]
            print(f"+1 replica, command -> frontend's first answer on it: median"
                  f" {statistics.median(one):.3f} s, max {max(one):.3f} s over {len(one)}"
                  f" (goal <= 0.3 / 1 s); {load()}")
            print(f"+8 replicas, command -> every new world answered: {found['eight']:.3f} s"
                  f" (goal <= 2 s)")
            print(f"-1 replica (drain) x{len(one)}: frontend's failed requests"
                  f" {len(found['failed'])} (goal 0); its pace through it all"
                  f" {100 * found['pace']:.1f} % of the arrival rate (goal >= 99 %)")
        if "resize" in only:
            took = resize(work)
            print(f"resize 8 -> 9, command -> every member's first call at 9: {took:.3f} s"
                  f" (goal <= 1 s); {load()}")
        if "ssh" in only:
            sys.path.insert(0, str(ROOT))
            from tests.integration import testbed

            if testbed.missing():
                print(f"ssh: skipped ({testbed.missing()})")
                return
            with testbed.node(work) as node:
                hosts = (f"hosts:\n  head: {{addr: {node.head_addr}}}\n"
                         f"  node1: {{addr: {node.addr}, ssh: '{node.ssh}', ssh_options:"
                         f" {json.dumps(node.ssh_options())}}}\n")
                found = additions(work, args.adds, hosts, "node1")
                one = found["one"]
                print(f"+1 replica on an ssh host: median {statistics.median(one):.3f} s,"
                      f" max {max(one):.3f} s over {len(one)} (goal median <= 0.5 s);"
                      f" failed requests {len(found['failed'])}; {load()}")


if __name__ == "__main__":
    main()
